"""Finding the external programs the harness runs, with install hints when they are missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..procs import HarnessError

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "tests" / "e2e" / "kube" / "build.sh"
# CASTSLICE_E2E_KUBERNETES picks the pinned Kubernetes release the suite runs against.
KUBERNETES_MODULES = {
    "newest": REPO_ROOT / "tests" / "e2e" / "kube",
    "oldest": REPO_ROOT / "tests" / "e2e" / "kube" / "oldest",
}
_BUILDING = (
    "building kube-apiserver, kube-controller-manager, kube-scheduler, etcd and KWOK from "
    "source: once per version, 15 to 30 minutes on 2 cores (see tests/e2e/kube/build.sh)..."
)


class MissingTool(HarnessError):
    """A program the end-to-end environment needs is not installed; the message says how."""


@dataclass(frozen=True)
class KubeBinaries:
    etcd: Path
    apiserver: Path
    controller_manager: Path
    scheduler: Path
    # KWOK's controller plays the kubelet of fake nodes, following its default stages.
    kwok: Path
    kwok_stages: Path


def find_program(name: str, install: str, *, extra_dirs: tuple[str, ...] = ()) -> Path:
    """The path of `name` on PATH (or in `extra_dirs`), else MissingTool naming `install`."""
    found = shutil.which(name) or shutil.which(name, path=":".join(extra_dirs))
    if found is None:
        raise MissingTool(f"{name} not found; install it with: {install}")
    return Path(found)


def nginx() -> Path:
    # Debian installs nginx in /usr/sbin, which is not on a normal user's PATH.
    return find_program(
        "nginx",
        "apt-get install -y --no-install-recommends nginx-light  (Debian/Ubuntu)",
        extra_dirs=("/usr/sbin", "/usr/local/sbin"),
    )


def kubectl() -> Path:
    return find_program("kubectl", "the kubectl of https://kubernetes.io/docs/tasks/tools/")


def kubernetes_module() -> Path:
    """The Go module that pins the Kubernetes release chosen by CASTSLICE_E2E_KUBERNETES."""
    choice = os.environ.get("CASTSLICE_E2E_KUBERNETES", "newest")
    if choice not in KUBERNETES_MODULES:
        raise HarnessError(
            f"CASTSLICE_E2E_KUBERNETES={choice!r}; choose one of {', '.join(KUBERNETES_MODULES)}"
        )
    return KUBERNETES_MODULES[choice]


def kubernetes_version() -> tuple[int, int]:
    """(major, minor) of the Kubernetes release the suite runs against, from its go.mod."""
    for line in (kubernetes_module() / "go.mod").read_text().splitlines():
        words = line.split()
        if words[:2] == ["require", "k8s.io/kubernetes"]:
            major, minor = words[2].lstrip("v").split(".")[:2]
            return int(major), int(minor)
    raise HarnessError(f"no `require k8s.io/kubernetes` line in {kubernetes_module()}/go.mod")


def kube_binaries(on_build: Callable[[str], None] | None = None) -> KubeBinaries:
    """etcd, the control plane's binaries and KWOK, built once and cached by version.

    The first call compiles them from the versions pinned in tests/e2e/kube/go.mod
    (several minutes; `on_build` is told so), later calls find them in the cache.
    """
    try:
        build = subprocess.Popen(
            ["bash", str(BUILD_SCRIPT), str(kubernetes_module())],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    except FileNotFoundError:
        raise MissingTool("bash not found; it runs tests/e2e/kube/build.sh") from None
    try:
        stdout, stderr = build.communicate(timeout=2)
    except subprocess.TimeoutExpired:
        # A cache hit answers at once: this is the one-time build.
        if on_build is not None:
            on_build(_BUILDING)
        stdout, stderr = build.communicate()
    if build.returncode != 0:
        if shutil.which("go") is None:
            raise MissingTool(
                "go not found; the Kubernetes binaries are built from source with Go "
                "(see the go directive in tests/e2e/kube/go.mod): https://go.dev/dl/"
            )
        tail = "\n".join(stderr.splitlines()[-30:])
        raise HarnessError(f"{BUILD_SCRIPT} failed with status {build.returncode}:\n{tail}")
    directory = Path(stdout.strip().splitlines()[-1])
    return KubeBinaries(
        etcd=directory / "etcd",
        apiserver=directory / "kube-apiserver",
        controller_manager=directory / "kube-controller-manager",
        scheduler=directory / "kube-scheduler",
        kwok=directory / "kwok",
        kwok_stages=directory / "kwok-stages.yaml",
    )


def run_castslice(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m castslice ARGS` as a user runs it, with `env` its only CASTSLICE_* settings."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CASTSLICE_")}
    done = subprocess.run(
        [sys.executable, "-m", "castslice", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**environ, **env, "PYTHONIOENCODING": "utf-8"},
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done
