"""kubectl as a user runs it against the local control plane."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..procs import HarnessError, wait_until

_TIMEOUT = 60.0


@dataclass(frozen=True)
class Kubectl:
    binary: Path
    kubeconfig: Path

    def run(
        self, *args: str, stdin: str | None = None, timeout: float = _TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """Run `kubectl ARGS`; a non-zero exit raises with what kubectl said.

        `timeout` must outlast any `--timeout` in ARGS, or kubectl's own answer is lost.
        """
        argv = [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args]
        done = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise HarnessError(
                f"kubectl {' '.join(args)} exited with status {done.returncode}:\n{done.stderr}"
            )
        return done

    def wait_established(self, *selection: str, timeout: float = 60.0) -> None:
        """Wait until every CRD of `selection` (`crd/NAME`..., or `-f FILE`) is Established.

        Not `kubectl wait --for=condition=Established`: that exits with an error, instead of
        waiting, for a CRD the API server has not yet given any status conditions.
        """

        def established() -> bool:
            found = json.loads(self.run("get", *selection, "-o", "json").stdout)
            crds = found["items"] if found.get("kind") == "List" else [found]
            return all(
                any(
                    condition.get("type") == "Established" and condition.get("status") == "True"
                    for condition in (crd.get("status") or {}).get("conditions") or []
                )
                for crd in crds
            )

        wait_until(
            established, timeout=timeout, what=f"{' '.join(selection)} Established", interval=0.5
        )

    def apply(self, namespace: str, manifests: str) -> str:
        """`kubectl apply -n NAMESPACE -f -`; returns stderr, where kubectl prints warnings."""
        return self.run("apply", "-n", namespace, "-f", "-", stdin=manifests).stderr
