"""Check: how often the API server gave up on CastSlice and admitted Pods unchanged.

kube-apiserver counts every webhook call that failed under `failurePolicy:
Ignore` in `apiserver_admission_webhook_fail_open_count{name, type}` (type
`admit` for mutating webhooks), since it started. Reading `/metrics` needs
its own RBAC right, which many users lack: then the check says so and
passes.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.parser import text_string_to_metric_families

from castslice.contract.cluster import ApiError, Cluster
from castslice.contract.findings import Result, failed, passed, unknown

CHECK = "fail-open"
METRIC = "apiserver_admission_webhook_fail_open_count"


def check_fail_open(cluster: Cluster, webhook_names: Sequence[str]) -> Result:
    try:
        text = cluster.get_text("/metrics")
    except ApiError as error:
        if error.status == 403:
            return unknown(
                CHECK,
                f"{METRIC} not read: these credentials may not read the API server's /metrics",
                'to see it, grant a ClusterRole with nonResourceURLs: ["/metrics"], verbs: ["get"]',
            )
        return unknown(CHECK, f"{METRIC} not read: /metrics answered {error.status}")
    return assess(fail_open_counts(text, webhook_names))


def fail_open_counts(metrics_text: str, webhook_names: Sequence[str]) -> dict[str, int]:
    """Fail-open calls per webhook name, for the names given, from the Prometheus text format."""
    # Only this metric's lines: the whole page is megabytes of text on a busy API server.
    lines = [
        line for line in metrics_text.splitlines() if line.startswith((METRIC + "{", METRIC + " "))
    ]
    counts = dict.fromkeys(webhook_names, 0)
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            name = sample.labels.get("name")
            if sample.name == METRIC and name in counts:
                counts[name] += int(sample.value)
    return counts


def assess(counts: dict[str, int]) -> Result:
    failures = {name: count for name, count in counts.items() if count}
    if not failures:
        return passed(
            CHECK, f"no call to CastSlice failed open since this API server started ({METRIC})"
        )
    calls = ", ".join(
        f"{name} {count} time{'s' if count != 1 else ''}" for name, count in failures.items()
    )
    return failed(
        CHECK,
        f"calls to CastSlice failed open since this API server started ({METRIC}): {calls}; "
        "those Pods were admitted unchanged, not sliced",
        "the API server's log says why ('failing open'); recreate the Pods created meanwhile",
    )
