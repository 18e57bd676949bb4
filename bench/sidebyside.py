"""Two servers loaded at the same time on one shared CPU: the ratio of their costs.

Sharing a CPU, each server gets the same share of it, so the ratio of their
throughputs is the ratio of their costs, and machine noise, which slows both at
once, cancels out of it: rounds spread by about ±5 %, where one server measured
after the other spreads by ±20 % on a shared machine. Needs two CPUs: the
servers share one, each wrk runs on the other.
"""

from __future__ import annotations

import os
import statistics
import threading
from pathlib import Path

from .load import LoadSettings, _run_wrk
from .servers import Server, _process_tree

SERVER_CPU, LOAD_CPU = 0, 1


def pin(server: Server) -> None:
    # Threads started later (gunicorn's pool grows on demand) inherit the affinity.
    for pid in _process_tree(server.process.pid):
        for task in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(task), {SERVER_CPU})


def load_together(
    servers: list[Server], body_file: Path, settings: LoadSettings
) -> list[tuple[int, float]]:
    """(requests, server CPU seconds) of each server, loaded at the same time."""
    results: list[tuple[int, float]] = [(0, 0.0)] * len(servers)

    def load(index: int, server: Server) -> None:
        _run_wrk(server.port, body_file, settings, settings.warmup_seconds, LOAD_CPU)
        before = server.cpu_seconds()
        summary, _ = _run_wrk(server.port, body_file, settings, settings.seconds, LOAD_CPU)
        results[index] = (summary["requests"], server.cpu_seconds() - before)

    threads = [threading.Thread(target=load, args=pair) for pair in enumerate(servers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if not all(requests for requests, _ in results):
        raise RuntimeError("a side-by-side load run failed; see the errors above")
    return results


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"
