"""Serving a function the way production does, and measuring what its processes cost.

Both the function and the floor are started with the production command,
`functions-framework --target=... --source=...`, which runs gunicorn with
one uvicorn worker, functions-framework's default.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from tests.procs import free_port

REPO = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
# The API server calls the webhook URL with its timeout appended as a query.
REVIEW_PATH = "/?timeout=5s"
# Variables that change the server's shape; removed so every run uses the defaults.
# PYTHONDONTWRITEBYTECODE too: the image ships compiled bytecode, so a start must find
# it, and a first unmeasured start writes it.
_SERVER_SETTINGS = (
    "WORKERS",
    "THREADS",
    "CLOUD_RUN_TIMEOUT_SECONDS",
    "GUNICORN_LOG_LEVEL",
    "PYTHONDONTWRITEBYTECODE",
)
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class FunctionSource:
    """A functions-framework source file and target, as deployed.

    `root` is the tree its imports come from: the server runs there, with only it on
    PYTHONPATH, so another checkout's main.py is measured with that checkout's castslice.
    """

    name: str
    source: Path
    target: str = "mutate"
    root: Path = REPO
    # Server-shape settings (WORKERS, THREADS) a run sets on purpose; none by default.
    settings: tuple[tuple[str, str], ...] = ()


# The image's target (the ASGI server); FLASK is the default server's, for comparison.
FUNCTION = FunctionSource("castslice", REPO / "main.py", target="mutate_asgi")
FLASK = FunctionSource("castslice-flask", REPO / "main.py", target="mutate")
FLOOR = FunctionSource("floor", REPO / "bench" / "floor" / "main.py")
FLASK_FLOOR = FunctionSource("floor-flask", FLOOR.source, target="mutate_flask")


def functions_framework_command() -> str:
    """The functions-framework launcher of the running interpreter's environment."""
    beside = Path(sys.executable).parent / "functions-framework"
    return str(beside) if beside.exists() else "functions-framework"


def server_environment(root: Path = REPO) -> dict[str, str]:
    environ = {
        key: value
        for key, value in os.environ.items()
        if key not in _SERVER_SETTINGS and not key.startswith("CASTSLICE_")
    }
    # Sources outside the repository's root (the floor) import from it.
    environ["PYTHONPATH"] = str(root)
    return environ


class Server:
    """One functions-framework process tree (gunicorn arbiter and its worker)."""

    def __init__(self, function: FunctionSource, log_dir: Path) -> None:
        self.function = function
        self.port = free_port()
        # CastSlice logs a line per review to stdout; a file costs a real write, as the
        # pipe to a log collector does in production, and keeps the lines for checks.
        self.stdout_path = log_dir / f"{function.name}-{self.port}.out"
        self.stderr_path = log_dir / f"{function.name}-{self.port}.err"
        command = [
            functions_framework_command(),
            f"--target={function.target}",
            f"--source={function.source}",
            f"--host={HOST}",
            f"--port={self.port}",
        ]
        # Its own process group lets stop() signal the arbiter and its worker together.
        with self.stdout_path.open("wb") as stdout, self.stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                command,
                cwd=function.root,
                env={**server_environment(function.root), **dict(function.settings)},
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )

    def wait_until_answering(self, body: bytes, timeout: float = 30.0) -> bytes:
        """Poll with `body` until the server answers 200; return that answer."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.function.name} exited: {self._stderr()}")
            try:
                status, answer = post(self.port, body)
            except OSError:
                if time.monotonic() > deadline:
                    message = f"{self.function.name} did not answer in {timeout}s"
                    raise TimeoutError(message) from None
                time.sleep(0.002)
                continue
            if status != 200:
                raise RuntimeError(f"{self.function.name} answered {status}: {answer[:300]!r}")
            return answer

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the arbiter and all its descendants so far."""
        return sum(_process_cpu_seconds(pid) for pid in _process_tree(self.process.pid))

    def stop(self) -> None:
        if self.process.poll() is None:
            # SIGINT is gunicorn's quick shutdown: no graceful wait for keep-alive clients.
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def _stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-2000:]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def post(port: int, body: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    """POST one review body; (status, response body)."""
    connection = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        connection.request(
            "POST", REVIEW_PATH, body=body, headers={"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _process_tree(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _read_stat(int(entry.name))
            if stat:
                parents.setdefault(int(stat[1]), []).append(int(entry.name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(parents.get(pid, ()))
    return tree


def _process_cpu_seconds(pid: int) -> float:
    stat = _read_stat(pid)
    if not stat:
        return 0.0
    # Index 0 is field 3 (state), so utime (field 14) is at 11 and stime (15) at 12.
    return (int(stat[11]) + int(stat[12])) / _CLOCK_TICKS


def _read_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses; the fields follow the last ')'.
    return text[text.rindex(")") + 2 :].split()
