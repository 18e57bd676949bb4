"""Cold start: from spawning the server process to its first answered review."""

from __future__ import annotations

import time
from pathlib import Path

from .servers import FunctionSource, Server


def cold_start_seconds(function: FunctionSource, body: bytes, log_dir: Path) -> float:
    """Seconds from spawning `function`'s server until it answers `body` with a 200."""
    started = time.perf_counter()
    server = Server(function, log_dir)
    try:
        server.wait_until_answering(body)
        return time.perf_counter() - started
    finally:
        server.stop()
