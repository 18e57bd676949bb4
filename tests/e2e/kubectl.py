"""kubectl as a user runs it against the local control plane."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..procs import HarnessError

_TIMEOUT = 60.0


@dataclass(frozen=True)
class Kubectl:
    binary: Path
    kubeconfig: Path

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run `kubectl ARGS`; a non-zero exit raises with what kubectl said."""
        argv = [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args]
        done = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=_TIMEOUT, check=False
        )
        if done.returncode != 0:
            raise HarnessError(
                f"kubectl {' '.join(args)} exited with status {done.returncode}:\n{done.stderr}"
            )
        return done

    def apply(self, namespace: str, manifests: str) -> str:
        """`kubectl apply -n NAMESPACE -f -`; returns stderr, where kubectl prints warnings."""
        return self.run("apply", "-n", namespace, "-f", "-", stdin=manifests).stderr
