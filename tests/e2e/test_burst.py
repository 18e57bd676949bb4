"""A burst through the controller-manager: every Pod rewritten, no call failed open.

The controller-manager creates the Pods of a Deployment scaled out at once as
fast as its client allows; CastSlice must answer every one within the API
server's timeout, or that Pod is admitted unchanged and counted by the API
server's `apiserver_admission_webhook_fail_open_count`.
"""

from __future__ import annotations

import json

import kubernetes.client
import pytest

from castslice.render.webhook_configuration import POD_WEBHOOK

from .apiserver_metrics import FAIL_OPEN, fail_open_count, failed_pod_creates
from .burst import APPLIED, remove_burst, start_burst, wait_for_pods
from .burst import pods_in as burst_pods
from .castslice_server import CastSliceServer
from .pods import resources_of, shared

BURST = 500
# Suite modules that make calls fail open on purpose (CastSlice down, slow, broken, a
# wrong token, an unreachable URL): after one of them, only a difference can be checked.
FAULT_MODULES = ("test_doctor", "test_fail_open", "test_faults", "test_path_token")
EXPECTED_RECORD = {"slices": 2, "source": "workload-type", "backend": "resource"}


@pytest.fixture(scope="module")
def fail_opens_before(api: kubernetes.client.ApiClient) -> float:
    """The count before this module's first test (it asks for this fixture first)."""
    return fail_open_count(api)


def test_every_pod_of_a_burst_is_rewritten_and_none_fails_open(
    fail_opens_before: float,
    api: kubernetes.client.ApiClient,
    castslice: CastSliceServer,
    namespace: str,
) -> None:
    failed_before = failed_pod_creates(api)
    start_burst(api, namespace, "burst", BURST)
    try:
        wait_for_pods(api, namespace, BURST)
        pods = burst_pods(api, namespace, metadata_only=False)
        reviewed = [
            record
            for record in castslice.settled_log_records()
            if record.get("namespace") == namespace and record.get("decision") == "mutated"
        ]
        retried = failed_pod_creates(api) - failed_before
    finally:
        remove_burst(api, namespace, "burst")

    assert len(pods) == BURST
    unchanged = [pod["metadata"]["name"] for pod in pods if APPLIED not in _annotations(pod)]
    assert unchanged == [], f"{len(unchanged)} of {BURST} Pods were admitted unchanged"
    for pod in pods:
        assert resources_of(pod) == {"app": shared(2, cpu="100m")}
        record = json.loads(_annotations(pod)[APPLIED])
        assert {key: record[key] for key in EXPECTED_RECORD} == EXPECTED_RECORD
    # One review per Pod, and one more per create refused after admission and made
    # again by the controller: the API server did not retry or call twice.
    assert BURST <= len(reviewed) <= BURST + retried, f"{retried:.0f} creates refused"
    assert fail_open_count(api) == fail_opens_before


def test_ordinary_operation_never_fails_open(
    fail_opens_before: float, api: kubernetes.client.ApiClient, request: pytest.FixtureRequest
) -> None:
    """Since the API server started, no call to CastSlice failed open (`pytest tests/e2e`
    runs this module first, so everything before is the session's start and this burst).

    Run after a module that fails calls open on purpose, it checks this module alone.
    """
    items = request.session.items
    before = {
        item.module.__name__.rpartition(".")[2] for item in items[: items.index(request.node)]
    }
    baseline = fail_opens_before if before & set(FAULT_MODULES) else 0.0

    assert fail_open_count(api) == baseline, (
        f"{FAIL_OPEN}{{name={POD_WEBHOOK!r}}} rose without a fault: "
        f"{fail_open_count(api) - baseline:.0f} Pods admitted unchanged"
    )


def _annotations(pod: dict) -> dict[str, str]:
    return pod["metadata"].get("annotations") or {}
