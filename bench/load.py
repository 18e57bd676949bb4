"""Driving load with wrk, a separate process, and reading its results."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .servers import HOST, REVIEW_PATH

SCRIPT = Path(__file__).resolve().parent / "post.lua"


@dataclass(frozen=True)
class LoadSettings:
    threads: int = 1
    connections: int = 8
    seconds: int = 2
    warmup_seconds: int = 1

    def describe(self) -> str:
        return (
            f"wrk -t{self.threads} -c{self.connections}, {self.seconds} s per round "
            f"after {self.warmup_seconds} s of warm-up"
        )


def wrk_command() -> str:
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    return found


def run_wrk(port: int, body_file: Path, settings: LoadSettings, seconds: int, cpu: int) -> dict:
    """wrk's JSON summary of one fixed-duration run, wrk running on `cpu` only."""
    command = [
        "taskset",
        "--cpu-list",
        str(cpu),
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
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    output, errors = process.communicate(timeout=seconds + 60)
    if process.returncode != 0:
        raise RuntimeError(f"wrk failed ({process.returncode}): {errors.decode()[-500:]}")
    result = json.loads(output.decode().strip().splitlines()[-1])
    failures = {kind: count for kind, count in result["errors"].items() if count}
    if failures or not result["requests"]:
        raise RuntimeError(f"wrk on port {port}: {result['requests']} requests, errors {failures}")
    return result
