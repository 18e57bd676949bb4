"""CastSlice's scheduler extender run as a process of its own beside the test cluster, and
the shipped extender profile pointed at it."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..procs import ManagedProcess, free_port, wait_until
from .tools import REPO_ROOT

PROFILE = REPO_ROOT / "infra" / "scheduler" / "fgd-extender.yaml"
_START_TIMEOUT = 120.0


class ExtenderProcess:
    """`castslice extender` on 127.0.0.1 with the cluster's kubeconfig, ready once its
    watches have listed every kind."""

    def __init__(self, settings: Mapping[str, str], log_dir: Path) -> None:
        """The port is chosen now, so that the scheduler's profile can name it before the
        cluster (whose kubeconfig the extender needs) is up."""
        self.port = free_port()
        self.settings = dict(settings)
        self.log_dir = log_dir
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as answer:
                return answer.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def start(self, kubeconfig: Path) -> None:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("CASTSLICE_")}
        self.process = ManagedProcess(
            "castslice-extender",
            [sys.executable, "-m", "castslice", "extender", "--kubeconfig", str(kubeconfig),
             "--port", str(self.port)],
            self.log_dir,
            env={**environ, **self.settings},
            cwd=REPO_ROOT,
        )  # fmt: skip
        self.process.start()
        wait_until(
            self.ready,
            timeout=_START_TIMEOUT,
            what="the extender's /healthz",
            interval=0.25,
            alive=self.process.check_running,
        )

    def state(self) -> dict[str, Any]:
        """The extender's own account: its calls, its time in them, each node's free GPU."""
        with urllib.request.urlopen(f"{self.url}/view", timeout=10) as answer:
            document: dict[str, Any] = json.loads(answer.read())
        return document

    def usage(self) -> tuple[float, int]:
        """CPU seconds the process has used, and its peak resident memory in bytes."""
        assert self.process is not None
        return self.process.usage()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def profile_for(url: str, workdir: Path) -> Path:
    """The shipped profile with its extender's URL replaced by `url` (nothing else)."""
    document = yaml.safe_load(PROFILE.read_text())
    (extender,) = document["extenders"]
    extender["urlPrefix"] = url
    path = workdir / "fgd-extender-profile.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path
