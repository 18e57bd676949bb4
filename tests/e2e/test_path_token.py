"""CASTSLICE_PATH_TOKEN: only the registered URL with the token gets Pods rewritten."""

from __future__ import annotations

import secrets
import uuid

import kubernetes.client
import pytest

from ..procs import wait_until
from .castslice_server import CastSliceServer, StartServer
from .pods import GPU, create_pod, gpu_container, opted_in, pod, read_pod, resources_of, shared
from .registration import probe_is_mutated, register, register_and_wait


def rejections(server: CastSliceServer) -> int:
    return sum(1 for record in server.settled_log_records() if record.get("status") == 404)


def create_training_pod(api: kubernetes.client.ApiClient, namespace: str, name: str) -> dict:
    manifest = pod(name, [gpu_container()], annotations=opted_in(workload_type="training"))
    create_pod(api, namespace, manifest)
    return resources_of(read_pod(api, namespace, name))


def test_url_with_the_token_rewrites_pods(
    api: kubernetes.client.ApiClient, namespace: str, own_castslice: StartServer
) -> None:
    token = secrets.token_urlsafe(24)
    server = own_castslice({"CASTSLICE_PATH_TOKEN": token})

    register_and_wait(api, server, path=token)

    assert create_training_pod(api, namespace, "with-token") == {"app": shared(4, cpu="100m")}
    [review] = server.reviews_of(namespace, "with-token")
    assert review["decision"] == "mutated"


@pytest.mark.parametrize("path", ["", "not-the-token-0123456789"], ids=["no-token", "wrong-token"])
def test_url_without_the_token_admits_pods_unmutated(
    api: kubernetes.client.ApiClient, namespace: str, own_castslice: StartServer, path: str
) -> None:
    token = secrets.token_urlsafe(24)
    server = own_castslice({"CASTSLICE_PATH_TOKEN": token})
    register_and_wait(api, server, path=token)

    register(api, server.url(path), server.ca_pem)
    # Live once a probe stops being rewritten: the old, tokened URL is gone.
    wait_until(
        lambda: not probe_is_mutated(api, f"probe-{uuid.uuid4().hex[:10]}", "default"),
        timeout=30,
        what="the API server to call the URL without the token",
    )
    before = rejections(server)

    resources = create_training_pod(api, namespace, "without-token")

    assert resources == {"app": {"requests": {"cpu": "100m", GPU: "1"}, "limits": {GPU: "1"}}}
    assert server.reviews_of(namespace, "without-token") == []
    # The call did arrive, and CastSlice answered 404 without reviewing the Pod.
    assert rejections(server) == before + 1
