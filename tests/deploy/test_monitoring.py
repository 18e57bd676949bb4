"""infra/monitoring.tf: log-based metrics, dashboard and alerts.

The metrics are checked against the log the function really writes: the server is
started as Cloud Run starts it (the functions-framework command), it is sent each
kind of request it can get, and the JSON lines it writes on stdout become the log
entries Cloud Run would store. Each metric's filter and extractors, as Terraform
evaluates them, are applied to those entries (logging_filter.py reproduces the part
of Cloud Logging's query language they use; Cloud Logging itself cannot run here),
and what they select and extract is compared with what the HTTP answers say.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.factories import container, gpu_container, make_pod, make_review, opted_in
from tests.procs import wait_until
from tests.served import Served, environment, functions_framework_command, serving

from .logging_filter import extract, extracted_field, label, log_entry, matches
from .terraform_offline import Locals, variable_args
from .variants import INFRA, blocks, load_hcl


def resources(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{type: {name: body}} over every resource block of a parsed file."""
    found: dict[str, dict[str, Any]] = {}
    for block in document["resource"]:
        for kind, instances in block.items():
            found.setdefault(kind, {}).update(instances)
    return found


MONITORING = load_hcl(INFRA / "monitoring.tf")
RESOURCES = resources(MONITORING)
LOCALS = blocks(MONITORING, "locals")
VARIABLES = blocks(load_hcl(INFRA / "variables.tf"), "variable")

SERVICE = "castslice"
TOKEN = "Zx8qP2vN5mR7tK1wY4bC6dF9aB3c"
REVIEW_PATH = f"/{TOKEN}?timeout=5s"
SLICE_RATIO = "castops.io/slice-ratio"
WORKLOAD_TYPE = "castops.io/workload-type"


@dataclass
class Sample:
    """One request, and what its log line must make of it."""

    name: str
    body: str
    path: str = REVIEW_PATH
    kind: str = "review"  # review, failed (failed open) or refused
    decision: str | None = None
    source: str = ""
    reason: str = ""
    method: str = "POST"
    content_type: str = "application/json"
    expected_status: int = 200
    # Filled in from the answer.
    status: int = 0
    warnings: int = 0
    entry: dict[str, Any] = field(default_factory=dict)


def review(pod: dict[str, Any], uid: str, **options: Any) -> str:
    return json.dumps(make_review(pod, uid=uid, **options))


def unreadable_pod() -> dict[str, Any]:
    pod = make_pod(opted_in())
    pod["spec"]["containers"] = "not-a-list"
    return pod


SAMPLES = [
    Sample("slice ratio", review(make_pod(opted_in(**{SLICE_RATIO: "2"})), "uid-ratio"),
           decision="mutated", source="slice-ratio"),
    Sample("workload type", review(make_pod(opted_in(**{WORKLOAD_TYPE: "inference"})), "uid-type"),
           decision="mutated", source="workload-type"),
    Sample("bad ratio", review(make_pod(opted_in(**{SLICE_RATIO: "1.5"})), "uid-bad-ratio"),
           decision="mutated", source="default"),
    Sample("dry run", review(make_pod(opted_in()), "uid-dry-run", dry_run=True),
           decision="mutated", source="default"),
    Sample("not opted in", review(make_pod({}), "uid-not-opted-in"),
           decision="skipped", reason="not opted in"),
    Sample("no GPU", review(make_pod(opted_in(), containers=[container()]), "uid-no-gpu"),
           decision="unchanged", reason="no GPU request to rewrite"),
    Sample("no GPU, bad type",
           review(make_pod(opted_in(**{WORKLOAD_TYPE: "x"}), containers=[container()]), "uid-x"),
           decision="unchanged", reason="no GPU request to rewrite"),
    Sample("two containers",
           review(make_pod(opted_in(), containers=[gpu_container("a"), gpu_container("b")]),
                  "uid-two"),
           decision="mutated", source="default"),
    Sample("unreadable Pod", review(unreadable_pod(), "uid-unreadable"), kind="failed",
           decision="failed-open", reason="unreadable object"),
    Sample("not JSON", "{not json", kind="refused", decision="refused",
           reason="not an AdmissionReview", expected_status=400),
    Sample("not a review", json.dumps({"apiVersion": "v1", "kind": "Pod"}), kind="refused",
           decision="refused", reason="not an AdmissionReview", expected_status=400),
    Sample("wrong path", review(make_pod(opted_in()), "uid-wrong-path"), path="/guessed",
           kind="refused", decision="refused", reason="wrong path", expected_status=404),
    Sample("text content", review(make_pod(opted_in()), "uid-text"), content_type="text/plain",
           kind="refused", decision="refused", reason="not JSON", expected_status=415),
    Sample("PUT", review(make_pod(opted_in()), "uid-put"), method="PUT",
           kind="refused", decision="refused", reason="method not allowed", expected_status=405),
]  # fmt: skip


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> list[Sample]:
    """SAMPLES sent to the real server, each with its answer and its log entry."""
    env = environment(CASTSLICE_PATH_TOKEN=TOKEN)
    log_dir = tmp_path_factory.mktemp("server")
    with serving("castslice", functions_framework_command, log_dir, env) as server:
        for sample in SAMPLES:
            answer(server, sample)
        lines = wait_until(
            lambda: written_lines(server.request_log, len(SAMPLES)),
            timeout=10,
            what="one log line per request",
        )
    # The requests went one after the other, so the lines are in the same order.
    for sample, line in zip(SAMPLES, lines, strict=True):
        sample.entry = log_entry(line, SERVICE)
    return SAMPLES


def answer(server: Served, sample: Sample) -> None:
    status, _, body = server.request(sample.method, sample.path, sample.body, sample.content_type)
    sample.status = status
    if status == 200:
        sample.warnings = len(json.loads(body)["response"].get("warnings", []))


def written_lines(path: Path, count: int) -> list[dict[str, Any]] | None:
    started, *lines = [json.loads(text) for text in path.read_text().splitlines() if text.strip()]
    # The server's start line comes first, before any request (castslice/serve/start.py).
    assert started["message"] == "castslice starting", started
    assert len(lines) <= count, f"more log lines than requests: {lines}"
    return lines if len(lines) == count else None


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    names = ["log_metrics", "metric_types", "dashboard", "alerts"]
    module = Locals(tmp_path_factory.mktemp("monitoring"), names)
    return module.evaluate(*variable_args(service_name=SERVICE))


@pytest.fixture(scope="module")
def metrics(evaluated: dict[str, Any]) -> dict[str, Any]:
    return evaluated["log_metrics"]


def selected(metric: dict[str, Any], samples: list[Sample]) -> list[str]:
    return [sample.name for sample in samples if matches(metric["filter"], sample.entry)]


def names(samples: list[Sample], keep: Callable[[Sample], bool]) -> list[str]:
    return [sample.name for sample in samples if keep(sample)]


# What the real server answered and wrote, before any metric is looked at.


def test_each_request_is_answered_as_expected_and_logged_once(samples: list[Sample]) -> None:
    for sample in samples:
        assert sample.status == sample.expected_status, sample.name
        severity = {"review": "INFO", "failed": "ERROR", "refused": "WARNING"}[sample.kind]
        assert sample.entry["severity"] == severity, (sample.name, sample.entry)
        # Every answer says in fields of its own what it was, and why.
        assert sample.entry["jsonPayload"]["decision"] == sample.decision, sample.name
        assert sample.entry["jsonPayload"].get("reason", "") == sample.reason, sample.name
    assert [sample.warnings > 0 for sample in samples] == [
        sample.name in ("bad ratio", "no GPU, bad type", "unreadable Pod") for sample in samples
    ]


# Each metric against the entries.


@pytest.mark.terraform
def test_the_reviews_metric_counts_every_answered_review_and_nothing_else(
    metrics: dict[str, Any], samples: list[Sample]
) -> None:
    assert selected(metrics["reviews"], samples) == names(samples, lambda s: s.kind == "review")


@pytest.mark.terraform
def test_review_labels_are_the_decision_reason_source_and_backend_of_each_review(
    metrics: dict[str, Any], samples: list[Sample]
) -> None:
    extractors = metrics["reviews"]["labels"]
    assert set(extractors) == {"decision", "reason", "source", "backend"}
    for sample in samples:
        if sample.kind != "review":
            continue
        labels = {key: label(extractor, sample.entry) for key, extractor in extractors.items()}
        assert labels == {
            "decision": sample.decision,
            "reason": sample.reason,
            "source": sample.source,
            # The server runs with the default backend.
            "backend": "resource",
        }, sample.name


@pytest.mark.terraform
def test_the_latency_distribution_reads_each_reviews_milliseconds(
    metrics: dict[str, Any], samples: list[Sample]
) -> None:
    latency = metrics["review_latency"]
    assert latency["value_type"] == "DISTRIBUTION"
    assert selected(latency, samples) == names(samples, lambda s: s.kind == "review")
    for sample in samples:
        if sample.kind == "review":
            value = extract(latency["value_extractor"], sample.entry)
            assert isinstance(value, float) and 0 <= value < 10_000, (sample.name, value)
            assert label(latency["labels"]["decision"], sample.entry) == sample.decision


@pytest.mark.terraform
def test_the_warnings_metric_counts_the_reviews_answered_with_warnings(
    metrics: dict[str, Any], samples: list[Sample]
) -> None:
    reviewed_with_warnings = names(samples, lambda s: s.kind == "review" and s.warnings > 0)
    assert reviewed_with_warnings == ["bad ratio", "no GPU, bad type"]
    assert selected(metrics["review_warnings"], samples) == reviewed_with_warnings


@pytest.mark.terraform
def test_failed_open_reviews_and_errors_count_the_review_that_failed(
    metrics: dict[str, Any], samples: list[Sample]
) -> None:
    failed_open = metrics["failed_open_reviews"]
    assert selected(failed_open, samples) == ["unreadable Pod"]
    assert selected(metrics["errors"], samples) == ["unreadable Pod"]
    (unreadable,) = (sample for sample in samples if sample.kind == "failed")
    assert label(failed_open["labels"]["reason"], unreadable.entry) == "unreadable object"


@pytest.mark.terraform
def test_no_metric_reads_the_message_text(metrics: dict[str, Any]) -> None:
    # The message is for people and may be reworded; what a metric counts is in fields.
    for name, metric in metrics.items():
        assert "jsonPayload.message" not in metric["filter"], name


@pytest.mark.terraform
def test_refused_requests_are_counted_with_their_http_status(
    metrics: dict[str, Any], samples: list[Sample]
) -> None:
    refused = metrics["rejected_requests"]
    assert selected(refused, samples) == names(samples, lambda s: s.kind == "refused")
    for sample in samples:
        if sample.kind == "refused":
            assert label(refused["labels"]["status"], sample.entry) == str(sample.status)
            assert label(refused["labels"]["reason"], sample.entry) == sample.reason


@pytest.mark.terraform
def test_every_metric_reads_only_this_services_log(
    metrics: dict[str, Any], samples: list[Sample]
) -> None:
    for name, metric in metrics.items():
        assert selected(metric, samples), f"{name} selects none of the entries"
        for sample in samples:
            elsewhere = {**sample.entry, "resource": {**sample.entry["resource"], "labels": {}}}
            elsewhere["resource"]["labels"]["service_name"] = "another-service"
            assert not matches(metric["filter"], elsewhere), (name, sample.name)


@pytest.mark.terraform
def test_every_extractor_reads_a_field_the_selected_entries_carry(
    metrics: dict[str, Any], samples: list[Sample]
) -> None:
    for name, metric in metrics.items():
        extractors = list(metric["labels"].values())
        if metric["value_extractor"] is not None:
            extractors.append(metric["value_extractor"])
        entries = [sample.entry for sample in samples if matches(metric["filter"], sample.entry)]
        for extractor in extractors:
            found = [extract(extractor, entry) for entry in entries]
            assert any(value is not None for value in found), f"{name}: {extractor} finds nothing"
            assert extracted_field(extractor).startswith("jsonPayload.")


# The metrics as Terraform declares them.


def test_the_metrics_are_created_only_when_monitoring_is_on() -> None:
    metric = RESOURCES["google_logging_metric"]["castslice"]
    assert "if var.monitoring_enabled" in metric["for_each"]
    assert "local.log_metrics" in metric["for_each"]
    assert VARIABLES["monitoring_enabled"]["default"] is True
    for kind in ("time_sleep", "google_monitoring_dashboard"):
        for name, resource in RESOURCES[kind].items():
            assert resource["count"] == "${var.monitoring_enabled ? 1 : 0}", f"{kind}.{name}"


def test_each_label_is_declared_with_its_extractor() -> None:
    metric = RESOURCES["google_logging_metric"]["castslice"]
    assert metric["label_extractors"] == "${each.value.labels}"
    (descriptor,) = metric["metric_descriptor"]
    assert descriptor["metric_kind"] == "DELTA"
    (labels,) = descriptor["dynamic"]
    assert labels["labels"]["for_each"] == "${each.value.labels}"
    (content,) = labels["labels"]["content"]
    assert content == {
        "key": "${labels.key}",
        "value_type": "STRING",
        "description": "${local.label_descriptions[labels.key]}",
    }
    every_label = {key for m in LOCALS["log_metrics"].values() for key in m["labels"]}
    assert every_label <= set(LOCALS["label_descriptions"])


def test_the_latency_histogram_spans_a_microsecond_to_past_the_request_timeout() -> None:
    metric = RESOURCES["google_logging_metric"]["castslice"]
    (bucket_options,) = metric["dynamic"]
    assert "DISTRIBUTION" in bucket_options["bucket_options"]["for_each"]
    (content,) = bucket_options["bucket_options"]["content"]
    (buckets,) = content["exponential_buckets"]
    scale, growth, count = buckets["scale"], buckets["growth_factor"], buckets["num_finite_buckets"]
    assert scale <= 0.01 and growth > 1
    timeout_ms = VARIABLES["request_timeout_seconds"]["default"] * 1000
    assert scale * growth**count > timeout_ms
    latency = LOCALS["log_metrics"]["review_latency"]
    assert (latency["value_type"], latency["unit"]) == ("DISTRIBUTION", "ms")
    assert latency["value_extractor"] == "EXTRACT(jsonPayload.latencyMs)"


def test_alerts_notify_the_channels_variable_and_wait_for_the_metrics() -> None:
    assert VARIABLES["notification_channels"]["default"] == []
    policy = RESOURCES["google_monitoring_alert_policy"]["castslice"]
    assert (
        "local.alerts" in policy["for_each"] and "if var.monitoring_enabled" in policy["for_each"]
    )
    assert policy["notification_channels"] == "${var.notification_channels}"
    assert policy["combiner"] == "OR"
    assert policy["documentation"] == [
        {"mime_type": "text/markdown", "content": "${each.value.documentation}"}
    ]
    assert "${time_sleep.log_metrics_visible}" in policy["depends_on"]
    dashboard = RESOURCES["google_monitoring_dashboard"]["castslice"]
    assert dashboard["depends_on"] == ["${time_sleep.log_metrics_visible}"]
    assert dashboard["dashboard_json"] == "${jsonencode(local.dashboard)}"
    sleep = RESOURCES["time_sleep"]["log_metrics_visible"]
    assert "google_logging_metric.castslice" in sleep["triggers"]["metrics"]


def test_alert_thresholds_are_variables_over_five_minutes() -> None:
    policy = RESOURCES["google_monitoring_alert_policy"]["castslice"]
    (conditions,) = policy["dynamic"]
    assert conditions["conditions"]["for_each"] == "${each.value.conditions}"
    (content,) = conditions["conditions"]["content"]
    (threshold,) = content["condition_threshold"]
    assert threshold["threshold_value"] == "${var.alert_thresholds[each.key]}"
    assert threshold["comparison"] == "COMPARISON_GT"
    assert threshold["filter"] == "${conditions.value.filter}"
    (aggregation,) = threshold["aggregations"]
    assert aggregation == {
        "alignment_period": "300s",
        "per_series_aligner": "ALIGN_SUM",
        "cross_series_reducer": "REDUCE_SUM",
    }
    assert VARIABLES["alert_thresholds"]["default"] == {}
    assert "optional(number, 0)" in VARIABLES["alert_thresholds"]["type"]


# What Terraform makes of the alert and dashboard expressions.


def metric_type(monitoring_filter: str) -> str:
    match = re.search(r'metric\.type="([^"]+)"', monitoring_filter)
    assert match, monitoring_filter
    return match.group(1)


@pytest.mark.terraform
def test_the_alerts_watch_errors_refusals_and_cloud_runs_5xx_count(
    evaluated: dict[str, Any],
) -> None:
    alerts = evaluated["alerts"]
    # One threshold per alert, by the same name.
    assert set(alerts) == {"failed_open", "server_errors"}
    types = evaluated["metric_types"]
    assert types["errors"] == f"logging.googleapis.com/user/{SERVICE}/errors"
    assert set(types) == set(evaluated["log_metrics"])
    assert [c["filter"] for c in alerts["failed_open"]["conditions"]] == [
        f'metric.type="{types["errors"]}" AND resource.type="cloud_run_revision"',
        f'metric.type="{types["rejected_requests"]}" AND resource.type="cloud_run_revision"'
        ' AND metric.label."status"!="404"',
    ]
    assert [c["filter"] for c in alerts["server_errors"]["conditions"]] == [
        'metric.type="run.googleapis.com/request_count" AND resource.type="cloud_run_revision"'
        f' AND resource.label."service_name"="{SERVICE}"'
        ' AND metric.label."response_code_class"="5xx"'
    ]
    assert "apiserver_admission_webhook_fail_open_count" in alerts["failed_open"]["documentation"]


@pytest.mark.terraform
def test_every_dashboard_chart_reads_a_metric_this_module_defines(
    evaluated: dict[str, Any],
) -> None:
    by_type = {evaluated["metric_types"][n]: m for n, m in evaluated["log_metrics"].items()}
    tiles = evaluated["dashboard"]["mosaicLayout"]["tiles"]
    titles = [tile["widget"]["title"] for tile in tiles]
    assert any("by decision" in title for title in titles)
    assert any("latency" in title for title in titles)
    assert any("warnings" in title for title in titles)
    assert any("failed-open" in title for title in titles)
    for tile in tiles:
        for data_set in tile["widget"]["xyChart"]["dataSets"]:
            query = data_set["timeSeriesQuery"]["timeSeriesFilter"]
            kind = metric_type(query["filter"])
            if kind == "run.googleapis.com/request_count":
                assert 'metric.label."response_code_class"="5xx"' in query["filter"]
                continue
            metric = by_type[kind]
            grouped = query["aggregation"].get("groupByFields", [])
            labels = {re.fullmatch(r'metric\.label\."(\w+)"', g).group(1) for g in grouped}
            assert labels <= set(metric["labels"]), (kind, grouped)
            percentile = query["aggregation"]["crossSeriesReducer"].startswith("REDUCE_PERCENTILE")
            assert percentile == (metric["value_type"] == "DISTRIBUTION"), kind


@pytest.mark.terraform
def test_dashboard_tiles_fit_the_grid_without_overlapping(evaluated: dict[str, Any]) -> None:
    layout = evaluated["dashboard"]["mosaicLayout"]
    cells: set[tuple[int, int]] = set()
    for tile in layout["tiles"]:
        # The API leaves zero positions out; so does the module, to show no difference.
        assert tile.get("xPos", 1) != 0 and tile.get("yPos", 1) != 0
        x, y = tile.get("xPos", 0), tile.get("yPos", 0)
        assert x + tile["width"] <= layout["columns"]
        tile_cells = {(x + i, y + j) for i in range(tile["width"]) for j in range(tile["height"])}
        assert not cells & tile_cells, tile["widget"]["title"]
        cells |= tile_cells
