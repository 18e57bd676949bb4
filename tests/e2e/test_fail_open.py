"""CastSlice never blocks Pods: down or too slow, the API server admits them unmutated.

Each such Pod is a call the API server counts as failed open
(`apiserver_admission_webhook_fail_open_count` for `pods.castslice.castops.io`),
the signal an operator alerts on. test_faults.py has more ways to fail.
"""

from __future__ import annotations

import time

import kubernetes.client

from .apiserver_metrics import fail_open_count
from .castslice_server import StartServer
from .pods import (
    GPU,
    create_pod,
    gpu_container,
    opted_in,
    pod,
    read_pod,
    resources_of,
    shared,
)
from .registration import register_and_wait, webhook_settings

TIMEOUT_SECONDS = webhook_settings()["timeoutSeconds"]
UNMUTATED = {"app": {"requests": {"cpu": "100m", GPU: "1"}, "limits": {GPU: "1"}}}


def timed_create(api: kubernetes.client.ApiClient, namespace: str, name: str) -> float:
    manifest = pod(name, [gpu_container()], annotations=opted_in(workload_type="training"))
    started = time.monotonic()
    create_pod(api, namespace, manifest)
    return time.monotonic() - started


def test_pod_is_admitted_unmutated_while_castslice_is_down(
    api: kubernetes.client.ApiClient, namespace: str, own_castslice: StartServer
) -> None:
    server = own_castslice({})
    register_and_wait(api, server)
    server.stop()
    before = fail_open_count(api)

    elapsed = timed_create(api, namespace, "while-down")

    assert resources_of(read_pod(api, namespace, "while-down")) == UNMUTATED
    assert elapsed < TIMEOUT_SECONDS
    assert server.reviews_of(namespace, "while-down") == []
    assert fail_open_count(api) - before == 1


def test_pod_is_admitted_unmutated_when_castslice_answers_too_late(
    api: kubernetes.client.ApiClient, namespace: str, own_castslice: StartServer
) -> None:
    server = own_castslice({})
    register_and_wait(api, server)
    # nginx still accepts the call; the function behind it does not answer.
    server.pause()
    before = fail_open_count(api)
    try:
        elapsed = timed_create(api, namespace, "too-late")
    finally:
        server.resume()

    assert resources_of(read_pod(api, namespace, "too-late")) == UNMUTATED
    assert fail_open_count(api) - before == 1
    # The API server waited for the webhook (up to the generated configuration's
    # timeoutSeconds) instead of failing at once; the upper bound only catches a hang, with
    # room for a loaded machine.
    print(f"create with a paused CastSlice took {elapsed:.2f}s (timeout {TIMEOUT_SECONDS}s)")
    assert TIMEOUT_SECONDS - 0.5 <= elapsed < 3 * TIMEOUT_SECONDS
    # Once resumed, CastSlice serves again: the next Pod is rewritten. Whether the late call
    # itself is still answered depends on when nginx saw the API server hang up, so it is
    # not what this test asserts.
    create_pod(
        api,
        namespace,
        pod("after-resume", [gpu_container()], annotations=opted_in(workload_type="training")),
    )
    assert resources_of(read_pod(api, namespace, "after-resume")) == {"app": shared(4, cpu="100m")}
    assert fail_open_count(api) - before == 1
