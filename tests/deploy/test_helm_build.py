"""tests/helm/build.sh: a versioned cache, one build at a time, the binary published whole.

`go` is replaced by a recorder that writes a stand-in binary: what is tested is the
script's cache, lock and publishing, not Go's compiler.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

from tests.helm import BUILD_SCRIPT, VERSION_FILE

VERSION = VERSION_FILE.read_text().strip()


@pytest.fixture
def cache(tmp_path: Path) -> dict[str, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    go = bin_dir / "go"
    go.write_text(
        "#!/bin/sh\n"
        f'echo "go $*" >> "{calls}"\n'
        'printf "#!/bin/sh\\necho stand-in\\n" > "$GOBIN/helm" && chmod +x "$GOBIN/helm"\n'
    )
    go.chmod(0o755)
    return {"root": tmp_path / "cache", "bin": bin_dir, "calls": calls}


def build(cache: dict[str, Path]) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "CASTSLICE_HELM_CACHE": str(cache["root"]),
        "PATH": f"{cache['bin']}{os.pathsep}{os.environ['PATH']}",
    }
    return subprocess.Popen(
        ["bash", str(BUILD_SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def test_the_first_run_builds_the_pinned_version_and_the_second_finds_it(
    cache: dict[str, Path],
) -> None:
    outputs = []
    for _ in range(2):
        stdout, _ = build(cache).communicate(timeout=60)
        outputs.append(stdout.strip())
    published = cache["root"] / f"helm-{VERSION}" / "helm"
    assert outputs == [str(published), str(published)]
    assert cache["calls"].read_text().splitlines() == [
        "go install -ldflags -s -w -X helm.sh/helm/v4/internal/version.version="
        f"{VERSION} -X helm.sh/helm/v4/internal/version.gitTreeState=clean "
        f"helm.sh/helm/v4/cmd/helm@{VERSION}"
    ]
    # Nothing half-built is left beside the published directory.
    assert sorted(p.name for p in cache["root"].iterdir()) == [
        f"helm-{VERSION}",
        f"helm-{VERSION}.lock",
    ]


def test_a_build_waits_for_the_one_under_way_and_uses_its_binary(
    cache: dict[str, Path],
) -> None:
    cache["root"].mkdir()
    lock = cache["root"] / f"helm-{VERSION}.lock"
    with lock.open("w") as held:
        # Another build holds the lock.
        fcntl.flock(held, fcntl.LOCK_EX)
        waiting = build(cache)
        # The fake go is instant: a script that did not wait would be done by now.
        with pytest.raises(subprocess.TimeoutExpired):
            waiting.wait(timeout=2)
        # The other build publishes its binary and lets go.
        published = cache["root"] / f"helm-{VERSION}"
        published.mkdir()
        (published / "helm").write_text("#!/bin/sh\n")
        (published / "helm").chmod(0o755)
    stdout, _ = waiting.communicate(timeout=60)
    assert stdout.strip() == str(published / "helm")
    assert not cache["calls"].exists()
