"""infra/grafana/castslice-dashboard.json: the Grafana dashboard reads only metrics CastSlice
serves, the webhook's (CASTSLICE_METRICS=true) and the report exporter's
(`castslice report --serve`), and has the savings panels."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from castslice.inspect.report.exporter import metric_names
from castslice.serve import metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "infra" / "grafana" / "castslice-dashboard.json"
_METRIC = re.compile(r"\bcastslice_[a-z_]+\b")


def served() -> set[str]:
    """Every series name the webhook's process exposes once it has answered a review, and
    every one the exporter serves."""
    metrics.REQUESTS.labels("mutated", "", "default", "resource")
    metrics.REVIEW_DURATION.observe(0.0001)
    names = {sample.name for family in REGISTRY.collect() for sample in family.samples}
    return {name for name in names if name.startswith("castslice_")} | set(metric_names())


def panels() -> list[dict[str, Any]]:
    return json.loads(DASHBOARD.read_text())["panels"]


def expressions(panel: dict[str, Any]) -> list[str]:
    return [target["expr"] for target in panel["targets"]]


@pytest.mark.parametrize("panel", panels(), ids=lambda panel: panel["title"])
def test_every_panel_reads_only_metrics_castslice_serves(panel: dict[str, Any]) -> None:
    used = {name for expr in expressions(panel) for name in _METRIC.findall(expr)}
    assert used, f"{panel['title']}: reads no CastSlice metric"
    assert used <= served(), f"{panel['title']}: no such metric {sorted(used - served())}"


def test_the_savings_panels_show_saved_asked_and_occupied_gpus() -> None:
    used = {
        name for panel in panels() for expr in expressions(panel) for name in _METRIC.findall(expr)
    }
    assert {
        "castslice_cluster_gpus_saved",
        "castslice_cluster_gpus_asked",
        "castslice_cluster_gpus_occupied",
        "castslice_gpus_saved",
        "castslice_pods_pending",
    } <= used


def test_panels_do_not_overlap() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in panels():
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                 for y in range(grid["y"], grid["y"] + grid["h"])}  # fmt: skip
        assert not cells & taken, panel["title"]
        taken |= cells
