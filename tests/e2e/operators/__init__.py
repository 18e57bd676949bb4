"""Real operators (KubeRay, Kubeflow's training operator) run against the local control plane.

Each is built from its Go module (build.sh, cached by version), its CRDs are
installed from the same module version, and it runs as a process with the
cluster admin's kubeconfig: its own webhooks, leader election and metrics are
off or on loopback, as nothing here calls them.
"""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ...helm import go_module_dir
from ...procs import HarnessError, ManagedProcess, free_port
from ..kubectl import Kubectl

BUILD_SCRIPT = Path(__file__).parent / "build.sh"
UPSTREAM_CRDS = Path(__file__).parent / "crds"
_CRD_TIMEOUT = 60.0


@dataclass(frozen=True)
class OperatorBuild:
    directory: Path

    @property
    def binary(self) -> Path:
        return self.directory / "operator"

    @property
    def crds(self) -> Path:
        return self.directory / "crds"

    def sample(self, name: str) -> str:
        return (self.directory / "samples" / name).read_text()


def build(name: str) -> OperatorBuild:
    """The operator `name` of versions, built on first use (minutes), else found in the cache."""
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT), name], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.splitlines()[-30:])
        raise HarnessError(f"{BUILD_SCRIPT} {name} failed with status {done.returncode}:\n{tail}")
    return OperatorBuild(Path(done.stdout.strip().splitlines()[-1]))


def install_crds(kubectl: Kubectl, operator: OperatorBuild) -> None:
    """The module's CRDs, applied server-side (they exceed the client-side annotation limit)."""
    kubectl.run("apply", "--server-side", "--force-conflicts", "-f", str(operator.crds))
    kubectl.wait_established("-f", str(operator.crds), timeout=_CRD_TIMEOUT)


def upstream_crds() -> dict[str, Path]:
    """The CRD files named in ./crds, by CRD name, from their modules in Go's module cache.

    Raises tests.helm.GoModuleUnavailable when a module cannot be downloaded.
    """
    found: dict[str, Path] = {}
    for line in UPSTREAM_CRDS.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, module, version, file = line.split()
        path = go_module_dir(module, version) / file
        if not path.is_file():
            raise HarnessError(f"{module}@{version} has no {file} (named in {UPSTREAM_CRDS})")
        found[name] = path
    return found


def ray_operator_argv(operator: OperatorBuild, kubeconfig: Path) -> list[str]:
    return [
        str(operator.binary),
        f"--kubeconfig={kubeconfig}",
        "--enable-leader-election=false",
        # Port 0: controller-runtime serves no metrics and no health probes.
        "--metrics-addr=0",
        "--health-probe-bind-address=0",
        "--log-stdout-encoder=console",
    ]


# Where the training operator's webhook server reads its certificate: fixed in its code
# (pkg/cert), the mount point of its Secret in its Deployment.
TRAINING_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")


def mount_secret(data: dict[str, str], directory: Path) -> None:
    """Write a Secret's data (base64 values) as files, as the kubelet mounts a Secret volume."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, encoded in data.items():
        staged = directory / f".{name}.tmp"
        staged.write_bytes(base64.b64decode(encoded))
        os.replace(staged, directory / name)


def training_operator_argv(operator: OperatorBuild, kubeconfig: Path) -> list[str]:
    return [
        str(operator.binary),
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--metrics-bind-address=0",
        "--health-probe-bind-address=0",
        "--enable-scheme=pytorchjob",
        # Its validating webhook server always starts; the API server is never told of it.
        f"--webhook-server-port={free_port()}",
    ]


@contextmanager
def running(
    name: str, argv: list[str], log_dir: Path, env: dict[str, str]
) -> Iterator[ManagedProcess]:
    process = ManagedProcess(name, argv, log_dir, env=env)
    process.start()
    try:
        yield process
    finally:
        process.stop()
