"""Opted-in Pods are stored with shared-GPU slices, and the API server accepts every shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import kubernetes.client
import pytest

from .castslice_server import CastSliceServer
from .pods import (
    GPU,
    Manifest,
    container,
    create_pod,
    gpu_container,
    opted_in,
    pod,
    read_pod,
    resources_of,
    shared,
    with_resources,
)
from .tools import REPO_ROOT


def create_with_control(
    api: kubernetes.client.ApiClient,
    namespace: str,
    name: str,
    annotations: dict[str, str],
    containers: list[Manifest],
    init_containers: list[Manifest] | None = None,
) -> tuple[Manifest, Manifest]:
    """Store the Pod opted in, and the same Pod without annotations as the control.

    The control shows what the API server stores for this shape on its own
    (defaults, tolerations…), so the opted-in Pod can be compared as a whole.
    """
    create_pod(api, namespace, pod(f"{name}-control", containers, init_containers=init_containers))
    create_pod(
        api,
        namespace,
        pod(name, containers, annotations=annotations, init_containers=init_containers),
    )
    return read_pod(api, namespace, name), read_pod(api, namespace, f"{name}-control")


@pytest.mark.parametrize(
    ("annotations", "slices", "source"),
    [
        pytest.param(opted_in(slice_ratio="3"), 3, "slice-ratio", id="slice-ratio"),
        pytest.param(
            opted_in(slice_ratio="8", workload_type="training"), 8, "slice-ratio", id="ratio-wins"
        ),
        pytest.param(opted_in(workload_type="training"), 4, "workload-type", id="training"),
        pytest.param(opted_in(workload_type="inference"), 2, "workload-type", id="inference"),
        pytest.param(opted_in(workload_type="batch"), 2, "workload-type", id="batch"),
        pytest.param(opted_in(workload_type="dev"), 1, "workload-type", id="dev"),
        pytest.param(opted_in(), 1, "default", id="default"),
    ],
)
def test_opted_in_pod_is_stored_with_shared_slices(
    api: kubernetes.client.ApiClient,
    namespace: str,
    castslice: CastSliceServer,
    annotations: dict[str, str],
    slices: int,
    source: str,
) -> None:
    stored, control = create_with_control(api, namespace, "gpu", annotations, [gpu_container()])

    assert stored["spec"] == with_resources(control["spec"], {"app": shared(slices, cpu="100m")})
    record = {"slices": slices, "source": source, "backend": "resource", "original": {"app": "1"}}
    assert stored["metadata"]["annotations"] == {
        **annotations,
        "castslice.castops.io/applied": json.dumps(record, separators=(",", ":")),
    }
    [review] = castslice.reviews_of(namespace, "gpu")
    assert (review["namespace"], review["decision"], review["slices"], review["source"]) == (
        namespace,
        "mutated",
        slices,
        source,
    )


def test_native_sidecar_and_app_containers_are_rewritten(
    api: kubernetes.client.ApiClient, namespace: str
) -> None:
    sidecar = gpu_container("proxy", restartPolicy="Always")
    logger = container("logger", requests={"cpu": "10m"})
    stored, control = create_with_control(
        api,
        namespace,
        "with-sidecar",
        opted_in(workload_type="training"),
        [gpu_container("app"), logger],
        init_containers=[sidecar],
    )

    assert stored["spec"] == with_resources(
        control["spec"],
        {"proxy": shared(4, cpu="100m"), "app": shared(4, cpu="100m")},
    )
    assert resources_of(stored)["logger"] == {"requests": {"cpu": "10m"}}


def test_init_container_and_app_container_are_rewritten(
    api: kubernetes.client.ApiClient, namespace: str
) -> None:
    stored, control = create_with_control(
        api,
        namespace,
        "with-init",
        opted_in(slice_ratio="2"),
        [gpu_container("app", gpus="2")],
        init_containers=[gpu_container("warmup")],
    )

    assert stored["spec"] == with_resources(
        control["spec"], {"warmup": shared(2, cpu="100m"), "app": shared(2, cpu="100m")}
    )


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        pytest.param({"requests": {GPU: "1"}}, shared(2), id="requests-only"),
        # Defaulting copies limits into requests before any webhook runs.
        pytest.param({"limits": {GPU: "1"}}, shared(2), id="limits-only"),
        pytest.param({"requests": {GPU: "1"}, "limits": {GPU: "1"}}, shared(2), id="both"),
    ],
)
def test_every_gpu_shape_passes_api_validation(
    api: kubernetes.client.ApiClient,
    namespace: str,
    resources: Manifest,
    expected: Manifest,
) -> None:
    manifest = pod(
        "shape", [container("app", **resources)], annotations=opted_in(workload_type="inference")
    )

    # create_pod raises ApiException (422 Invalid) if the patched Pod fails validation.
    create_pod(api, namespace, manifest)

    assert resources_of(read_pod(api, namespace, "shape")) == {"app": expected}


def test_requests_only_gpu_is_invalid_without_castslice(
    api: kubernetes.client.ApiClient, namespace: str
) -> None:
    """The control for the requests-only shape: on its own the API server rejects it."""
    manifest = pod("requests-only", [container("app", requests={GPU: "1"})])

    with pytest.raises(kubernetes.client.ApiException) as raised:
        create_pod(api, namespace, manifest)

    assert raised.value.status == 422
    assert "Limit must be set" in raised.value.body


@pytest.mark.parametrize("count", ["-1", "500m", "0.5", "one", "\u00b9"])
@pytest.mark.parametrize("opts_in", [True, False], ids=["opted-in", "plain"])
def test_preview_says_which_gpu_counts_the_api_server_refuses(
    api: kubernetes.client.ApiClient, namespace: str, count: str, opts_in: bool
) -> None:
    """preview's verdict on a GPU count the API server refuses, against the API server's: it
    decodes before admission (no quantity: refused), and validates after mutating admission
    (a count CastSlice's rewrite replaces: admitted)."""
    manifest = pod(
        "odd-count",
        [container("app", limits={GPU: count})],
        annotations=opted_in() if opts_in else None,
    )
    environ = {key: value for key, value in os.environ.items() if not key.startswith("CASTSLICE_")}
    shown = subprocess.run(
        [sys.executable, "-m", "castslice", "preview", "-f", "-", "-n", namespace],
        input=json.dumps(manifest), capture_output=True, text=True, env=environ, cwd=REPO_ROOT,
        timeout=60, check=True,
    )  # fmt: skip
    refused = "the API server refuses this Pod" in shown.stderr
    assert refused or "the API server would refuse that, but castslice's rewrite" in shown.stderr
    if refused:
        with pytest.raises(kubernetes.client.ApiException) as raised:
            create_pod(api, namespace, manifest)
        assert raised.value.status in (400, 422)
    else:
        create_pod(api, namespace, manifest)
        assert resources_of(read_pod(api, namespace, "odd-count")) == {"app": shared(1)}
