"""Driving load with wrk, a separate process, and reading its results."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .servers import HOST, REVIEW_PATH, Server

SCRIPT = Path(__file__).resolve().parent / "post.lua"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class LoadSettings:
    threads: int = 1
    connections: int = 8
    seconds: int = 2
    warmup_seconds: int = 1

    def describe(self) -> str:
        return (
            f"wrk -t{self.threads} -c{self.connections}, {self.seconds} s per point "
            f"after {self.warmup_seconds} s of warm-up"
        )


@dataclass(frozen=True)
class Point:
    """One measured run of load against one server with one body."""

    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    cpu_ms_per_request: float
    # CPU the rest of the machine used meanwhile (neither server nor wrk), in cores:
    # the noise this point was measured under.
    other_load: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


def wrk_command() -> str:
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    return found


def measure(server: Server, body_file: Path, settings: LoadSettings) -> Point:
    """Warm up, then load `server` for a fixed time, counting CPU time around the run."""
    if settings.warmup_seconds > 0:
        _run_wrk(server.port, body_file, settings, settings.warmup_seconds)
    busy_before = _machine_busy_seconds()
    cpu_before = server.cpu_seconds()
    result, wrk_cpu = _run_wrk(server.port, body_file, settings, settings.seconds)
    cpu = server.cpu_seconds() - cpu_before
    busy = _machine_busy_seconds() - busy_before
    requests, seconds = result["requests"], result["duration_us"] / 1e6
    return Point(
        requests=requests,
        seconds=seconds,
        p50_ms=result["p50_us"] / 1000,
        p99_ms=result["p99_us"] / 1000,
        cpu_ms_per_request=cpu * 1000 / requests,
        other_load=max(0.0, busy - cpu - wrk_cpu) / seconds,
    )


def _run_wrk(
    port: int, body_file: Path, settings: LoadSettings, seconds: int, cpu: int | None = None
) -> tuple[dict, float]:
    """wrk's JSON summary of one fixed-duration run, and the CPU seconds wrk used.

    With `cpu`, wrk runs on that CPU only.
    """
    pinned = [] if cpu is None else ["taskset", "--cpu-list", str(cpu)]
    command = [
        *pinned,
        wrk_command(),
        f"--threads={settings.threads}",
        f"--connections={settings.connections}",
        f"--duration={seconds}s",
        "--timeout=10s",
        f"--script={SCRIPT}",
        f"http://{HOST}:{port}{REVIEW_PATH}",
        "--",
        str(body_file),
    ]
    children_before = _children_cpu_seconds()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    output, errors = process.communicate(timeout=seconds + 60)
    # Only wrk is reaped meanwhile (the servers live on), so the growth is wrk's.
    wrk_cpu = _children_cpu_seconds() - children_before
    if process.returncode != 0:
        raise RuntimeError(f"wrk failed ({process.returncode}): {errors.decode()[-500:]}")
    result = json.loads(output.decode().strip().splitlines()[-1])
    failures = {kind: count for kind, count in result["errors"].items() if count}
    if failures or not result["requests"]:
        raise RuntimeError(f"wrk on port {port}: {result['requests']} requests, errors {failures}")
    return result, wrk_cpu


def _children_cpu_seconds() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


def _machine_busy_seconds() -> float:
    """CPU seconds all cores have spent not idle since boot."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return (sum(fields[:8]) - idle) / _CLOCK_TICKS
