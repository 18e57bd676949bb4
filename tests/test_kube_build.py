"""tests/e2e/kube/build.sh run twice at once against an empty cache, with a stand-in `go`.

The real build compiles Kubernetes for many minutes; what is under test here is the
script's cache handling, so `go` is a stand-in (a real Go cannot run this fast) that
writes small executables where `go build -o` and `go install` with GOBIN would, and
answers `go mod download -json` with a directory holding KWOK's stages.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "tests" / "e2e" / "kube" / "build.sh"
TOOLS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "kwok")
STAGES = (
    "node/fast/node-initialize",
    "node/heartbeat-with-lease/node-heartbeat-with-lease",
    "pod/fast/pod-ready",
    "pod/fast/pod-complete",
    "pod/fast/pod-delete",
)

# Each `go build` / `go install` takes a moment, as a real one takes minutes, and notes
# whether another was running at the same time and whether the published cache entry
# (CACHE_ENTRY_GLOB) was ever seen with some of its binaries missing.
FAKE_GO = """#!/usr/bin/env bash
set -euo pipefail
log="$FAKE_GO_LOG"
if [[ "$1" == mod ]]; then
  # As go prints it: indented, one field a line.
  printf '{\\n\\t"Path": "sigs.k8s.io/kwok",\\n\\t"Dir": "%s"\\n}\\n' "$FAKE_KWOK_MODULE"
  exit 0
fi
mkdir -p "$log/running"
touch "$log/running/$$"
others=$(ls "$log/running" | grep -vx "$$" || true)
[[ -z "$others" ]] || echo "go $$ ran beside $others" >>"$log/overlaps"
for entry in $CACHE_ENTRY_GLOB; do
  [[ -d "$entry" && "$entry" != *.tmp ]] || continue
  for tool in kube-apiserver kube-controller-manager kube-scheduler etcd kwok; do
    [[ -x "$entry/$tool" ]] || echo "$entry published without $tool" >>"$log/partial"
  done
done
sleep 0.3
target=""
if [[ "$1" == build ]]; then
  while [[ $# -gt 0 ]]; do
    if [[ "$1" == -o ]]; then target="$2"; fi
    shift
  done
else  # go install sigs.k8s.io/kwok/cmd/kwok@VERSION, into GOBIN
  target="$GOBIN/kwok"
fi
printf '#!/bin/sh\\necho stand-in\\n' >"$target"
chmod +x "$target"
rm "$log/running/$$"
"""


@pytest.fixture
def fake_go(tmp_path: Path) -> dict[str, str]:
    """An environment whose `go` is the stand-in and whose cache is an empty directory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(FAKE_GO)
    go.chmod(0o755)
    module = tmp_path / "kwok-module"
    for stage in STAGES:
        path = module / "kustomize" / "stage" / f"{stage}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"kind: Stage\nmetadata:\n  name: {stage.rpartition('/')[2]}\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    log = tmp_path / "go-log"
    log.mkdir()
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "CASTSLICE_KUBE_CACHE": str(cache),
        "FAKE_GO_LOG": str(log),
        "FAKE_KWOK_MODULE": str(module),
        "CACHE_ENTRY_GLOB": f"{cache}/kube-*",
    }


def test_two_first_builds_at_once_both_end_with_every_binary(fake_go: dict[str, str]) -> None:
    builds = [
        subprocess.Popen(
            ["bash", str(BUILD)],
            env=fake_go,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [build.communicate(timeout=120) for build in builds]
    for build, (_, err) in zip(builds, results, strict=True):
        assert build.returncode == 0, err
    (entry,) = {out.strip() for out, _ in results}
    entry_dir = Path(entry)
    assert entry_dir.parent == Path(fake_go["CASTSLICE_KUBE_CACHE"])
    for tool in TOOLS:
        assert os.access(entry_dir / tool, os.X_OK), f"{tool} missing from {entry}"
    stages = (entry_dir / "kwok-stages.yaml").read_text()
    assert stages.count("kind: Stage") == len(STAGES)
    log = Path(fake_go["FAKE_GO_LOG"])
    # Serialised: the second waited for the first, then found the entry complete.
    assert not (log / "overlaps").exists(), (log / "overlaps").read_text()
    assert not (log / "partial").exists(), (log / "partial").read_text()
    assert not list(entry_dir.parent.glob("*.tmp"))
    # The stand-in ran once per tool: the second build built nothing again.
    assert json.dumps(sorted(p.name for p in entry_dir.iterdir() if p.name in TOOLS)) == (
        json.dumps(sorted(TOOLS))
    )
