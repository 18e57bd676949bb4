"""Two servers loaded at the same time on one shared CPU: the ratio of their costs.

Sharing a CPU, each server gets the same share of it, so the ratio of their
throughputs is the ratio of their costs, and machine noise, which slows both at
once, cancels out of it: rounds spread by a few percent, where one server measured
after the other spreads by ±20 % or more on a shared machine. Needs two CPUs: the
servers share one, each wrk runs on the other.
"""

from __future__ import annotations

import os
import statistics
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .load import LoadSettings, run_wrk
from .servers import Server, _process_tree

SERVER_CPU, LOAD_CPU = 0, 1


@dataclass(frozen=True)
class Share:
    """One server's part of a round: requests answered, in how long, and CPU seconds used."""

    requests: int
    seconds: float
    cpu_seconds: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    @property
    def cpu_ms_per_request(self) -> float:
        return self.cpu_seconds * 1000 / self.requests


@dataclass
class Rounds:
    """Rounds of a server and a baseline loaded together on one body."""

    server: list[Share] = field(default_factory=list)
    baseline: list[Share] = field(default_factory=list)

    def throughput_ratios(self) -> list[float]:
        """Server ÷ baseline, per round."""
        return [mine.rps / base.rps for mine, base in zip(self.server, self.baseline, strict=True)]

    def cost_ratios(self) -> list[float]:
        """Baseline's CPU per request ÷ the server's, per round."""
        return [
            base.cpu_ms_per_request / mine.cpu_ms_per_request
            for mine, base in zip(self.server, self.baseline, strict=True)
        ]


def require_two_cpus(what: str) -> None:
    if not {SERVER_CPU, LOAD_CPU} <= os.sched_getaffinity(0):
        raise SystemExit(f"{what} needs two CPUs: one shared by the servers, one for wrk")


def side_by_side(
    server: Server, baseline: Server, body_file: Path, settings: LoadSettings, rounds: int
) -> Rounds:
    """`rounds` rounds of both servers loaded at the same time on one shared CPU."""
    return alternating([(server, baseline)], body_file, settings, rounds)[0]


def alternating(
    pairs: list[tuple[Server, Server]], body_file: Path, settings: LoadSettings, rounds: int
) -> list[Rounds]:
    """`rounds` rounds of each pair as `side_by_side` loads it, the pairs taking turns
    round by round, so that a slow moment of the machine falls on all of them alike."""
    for pair in pairs:
        for each in pair:
            _pin(each)
    results = [Rounds() for _ in pairs]
    for _ in range(rounds):
        for (server, baseline), result in zip(pairs, results, strict=True):
            mine, base = _load_together([server, baseline], body_file, settings)
            result.server.append(mine)
            result.baseline.append(base)
    return results


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def _pin(server: Server) -> None:
    # Threads started later inherit the affinity.
    for pid in _process_tree(server.process.pid):
        for task in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(task), {SERVER_CPU})


def _load_together(servers: list[Server], body_file: Path, settings: LoadSettings) -> list[Share]:
    shares: list[Share | None] = [None] * len(servers)

    def load(index: int, server: Server) -> None:
        run_wrk(server.port, body_file, settings, settings.warmup_seconds, LOAD_CPU)
        before = server.cpu_seconds()
        summary = run_wrk(server.port, body_file, settings, settings.seconds, LOAD_CPU)
        seconds = summary["duration_us"] / 1e6
        shares[index] = Share(summary["requests"], seconds, server.cpu_seconds() - before)

    threads = [threading.Thread(target=load, args=pair) for pair in enumerate(servers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if any(share is None for share in shares):
        raise RuntimeError("a side-by-side load run failed; see the errors above")
    return [share for share in shares if share is not None]
