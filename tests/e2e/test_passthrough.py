"""Pods that are not opted in never reach CastSlice: matchConditions and namespaceSelector."""

from __future__ import annotations

import kubernetes.client
import pytest

from .castslice_server import CastSliceServer
from .pods import (
    GPU,
    OPTIMIZE,
    SLICE_RATIO,
    WORKLOAD_TYPE,
    create_namespace,
    create_pod,
    gpu_container,
    opted_in,
    pod,
    read_pod,
    resources_of,
)
from .registration import serves_pods

SUBMITTED = {"app": {"requests": {"cpu": "100m", GPU: "1"}, "limits": {GPU: "1"}}}


def assert_stored_unchanged_and_never_reviewed(
    api: kubernetes.client.ApiClient, castslice: CastSliceServer, namespace: str, name: str
) -> None:
    assert resources_of(read_pod(api, namespace, name)) == SUBMITTED
    assert castslice.reviews_of(namespace, name) == []
    # The positive control: the webhook is registered and answering right now,
    # so "no review" means the API server chose not to call it.
    assert serves_pods(api, castslice)


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param(None, id="no-annotations"),
        pytest.param({"team": "vision"}, id="other-annotations"),
        pytest.param({OPTIMIZE: "false"}, id="optimize-false"),
        pytest.param({OPTIMIZE: "True"}, id="optimize-True"),
        pytest.param({OPTIMIZE: "yes"}, id="optimize-yes"),
        pytest.param({OPTIMIZE: ""}, id="optimize-empty"),
        pytest.param({OPTIMIZE: "true "}, id="optimize-trailing-space"),
        pytest.param({WORKLOAD_TYPE: "training", SLICE_RATIO: "4"}, id="no-optimize"),
    ],
)
def test_pod_not_opted_in_is_stored_unchanged_without_a_call(
    api: kubernetes.client.ApiClient,
    namespace: str,
    castslice: CastSliceServer,
    annotations: dict[str, str] | None,
) -> None:
    create_pod(api, namespace, pod("plain", [gpu_container()], annotations=annotations))

    assert_stored_unchanged_and_never_reviewed(api, castslice, namespace, "plain")


@pytest.mark.parametrize("excluded", ["kube-system", "kube-node-lease", "castslice"])
def test_opted_in_pod_in_excluded_namespace_is_not_sent(
    api: kubernetes.client.ApiClient, castslice: CastSliceServer, excluded: str
) -> None:
    create_namespace(api, excluded)
    name = f"excluded-{excluded}"

    create_pod(
        api, excluded, pod(name, [gpu_container()], annotations=opted_in(workload_type="training"))
    )

    assert_stored_unchanged_and_never_reviewed(api, castslice, excluded, name)


def test_mirror_pod_is_not_sent(
    api: kubernetes.client.ApiClient, namespace: str, castslice: CastSliceServer
) -> None:
    # What a kubelet creates for a static Pod; CastSlice must leave it to the kubelet.
    annotations = {**opted_in(workload_type="training"), "kubernetes.io/config.mirror": "hash"}
    manifest = pod("static-web", [gpu_container()], annotations=annotations)
    manifest["spec"]["nodeName"] = "node-a"

    create_pod(api, namespace, manifest)

    assert_stored_unchanged_and_never_reviewed(api, castslice, namespace, "static-web")
