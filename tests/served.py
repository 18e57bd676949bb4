"""CastSlice as its images run it, on 127.0.0.1, its request log kept in a file of its own.

Two commands: `functions-framework` (Cloud Run, Knative, the image's default) and
gunicorn with castslice/serve/tls.py (the in-cluster Deployment, which terminates TLS).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.procs import ManagedProcess, free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent
# Settings of the application or the platform a test must choose for itself.
_INHERITED_SETTINGS = ("CASTSLICE_", "GUNICORN_", "K_", "CLOUD_RUN_")
_SERVER_SHAPE = ("WORKERS", "THREADS", "WEB_CONCURRENCY", "PORT")


def environment(**settings: str) -> dict[str, str]:
    """This environment without CastSlice, Cloud Run or server-shape settings, plus `settings`."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_INHERITED_SETTINGS) and key not in _SERVER_SHAPE
    }
    return {**environ, **settings}


# main.py's targets: functions-framework's default (Flask) server and its ASGI server.
TARGETS = {"flask": "mutate", "asgi": "mutate_asgi"}
# The image's (Dockerfile): the ASGI server.
IMAGE_TARGET = TARGETS["asgi"]


def functions_framework_command(port: int, target: str = IMAGE_TARGET) -> list[str]:
    return [sys.executable, "-m", "functions_framework", f"--target={target}",
            "--source=main.py", "--host=127.0.0.1", f"--port={port}"]  # fmt: skip


def tls_command(port: int, certfile: Path, keyfile: Path) -> list[str]:
    """The Deployment's command, with the address and the certificate files moved for a test."""
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    return [gunicorn, "--config=python:castslice.serve.tls", f"--bind=127.0.0.1:{port}",
            f"--certfile={certfile}", f"--keyfile={keyfile}"]  # fmt: skip


@dataclass
class Served:
    process: ManagedProcess
    port: int
    context: ssl.SSLContext | None = None

    @property
    def request_log(self) -> Path:
        return self.process.stdout_path

    def connection(self, timeout: float = 30) -> http.client.HTTPConnection:
        if self.context is None:
            return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, timeout=timeout, context=self.context
        )

    def request(
        self,
        method: str,
        path: str = "/?timeout=5s",
        body: bytes | str | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, str | None, bytes]:
        """One request on a new connection: (status, Content-Type, body)."""
        connection = self.connection()
        headers = {"Content-Type": content_type} if body is not None else {}
        try:
            connection.request(method, path, body=body, headers=headers)
            reply = connection.getresponse()
            return reply.status, reply.getheader("Content-Type"), reply.read()
        finally:
            connection.close()


@contextlib.contextmanager
def serving(
    name: str,
    command: Callable[[int], list[str]],
    log_dir: Path,
    env: Mapping[str, str],
    *,
    cwd: Path = ROOT,
    context: ssl.SSLContext | None = None,
) -> Iterator[Served]:
    """Run the server until the block ends, once it answers GET with 200."""
    port = free_port()
    process = ManagedProcess(name, command(port), log_dir, env=env, cwd=cwd, separate_stdout=True)
    served = Served(process, port, context)

    def answers() -> bool:
        try:
            return served.request("GET")[0] == 200
        except OSError:
            return False

    process.start()
    try:
        wait_until(answers, timeout=30, what=f"{name} to answer", alive=process.check_running)
        yield served
    finally:
        process.stop()


def refused_start(
    command: list[str], env: Mapping[str, str], cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """Run a server that is expected to stop by itself at start; its status and output."""
    return subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
