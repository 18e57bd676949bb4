"""`castslice report --serve`, the Prometheus exporter, run beside a test's cluster and
scraped once."""

from __future__ import annotations

import os
import subprocess
import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

from ..procs import HarnessError, wait_until
from .tools import REPO_ROOT


def run_exporter(
    argv: list[str], settings: Mapping[str, str], port: int
) -> tuple[dict[tuple[str, str | None], float], str, str]:
    """Run `castslice report --serve PORT` (argv) with `settings` until one scrape answers:
    its samples by (name, namespace), and what it printed on stdout and stderr."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CASTSLICE_")}
    exporter = subprocess.Popen(
        argv, cwd=REPO_ROOT, env={**environ, **settings},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip

    def answered() -> dict[tuple[str, str | None], float] | None:
        if exporter.poll() is not None:
            raise HarnessError(f"the exporter exited with status {exporter.returncode}")
        return scrape(port)

    samples = None
    try:
        samples = wait_until(answered, timeout=90, what="the exporter to answer", interval=0.2)
    finally:
        exporter.terminate()
        stdout, stderr = exporter.communicate(timeout=30)
        # What it said is what tells a slow start from a crash or a refused read.
        assert samples is not None, f"the exporter never answered; it printed:\n{stdout}{stderr}"
    return samples, stdout, stderr


def scrape(port: int) -> dict[tuple[str, str | None], float] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    return {
        (sample.name, sample.labels.get("namespace")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
