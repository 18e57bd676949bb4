"""CastSlice never blocks Pods: down or too slow, the API server admits them unmutated."""

from __future__ import annotations

import time

import kubernetes.client

from .castslice_server import StartServer
from .pods import GPU, create_pod, gpu_container, opted_in, pod, read_pod, resources_of
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

    elapsed = timed_create(api, namespace, "while-down")

    assert resources_of(read_pod(api, namespace, "while-down")) == UNMUTATED
    assert elapsed < TIMEOUT_SECONDS
    assert server.reviews_of(namespace, "while-down") == []


def test_pod_is_admitted_unmutated_when_castslice_answers_too_late(
    api: kubernetes.client.ApiClient, namespace: str, own_castslice: StartServer
) -> None:
    server = own_castslice({})
    register_and_wait(api, server)
    # nginx still accepts the call; the function behind it does not answer.
    server.pause()
    try:
        elapsed = timed_create(api, namespace, "too-late")
    finally:
        server.resume()

    assert resources_of(read_pod(api, namespace, "too-late")) == UNMUTATED
    # The API server waited for the webhook, up to its timeout and not much longer.
    assert TIMEOUT_SECONDS - 0.5 <= elapsed < TIMEOUT_SECONDS + 3
    # Once resumed, CastSlice does answer (with a patch); the API server has moved on.
    late = server.wait_for_log(
        lambda record: (record.get("namespace"), record.get("pod")) == (namespace, "too-late"),
        what="the late review of too-late",
    )
    assert late["decision"] == "mutated"
