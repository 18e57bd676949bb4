"""Pod manifests for the unit and end-to-end suites alike: complete, valid, API-server-ready."""

from __future__ import annotations

from typing import Any

from castslice.contract import Manifest

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu-shared"
OPTIMIZE = "castops.io/optimize"
WORKLOAD_TYPE = "castops.io/workload-type"
SLICE_RATIO = "castops.io/slice-ratio"
# Never pulled: no kubelet runs, and the .invalid domain cannot resolve anyway.
IMAGE = "registry.invalid/castslice-e2e/app:1"


def container(
    name: str,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    **fields: Any,
) -> Manifest:
    resources: Manifest = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": IMAGE, "resources": resources, **fields}


def gpu_container(name: str = "app", gpus: str = "1", **fields: Any) -> Manifest:
    """A container asking for whole GPUs the usual way: requests and limits alike."""
    return container(name, requests={"cpu": "100m", GPU: gpus}, limits={GPU: gpus}, **fields)


def pod(
    name: str,
    containers: list[Manifest],
    *,
    annotations: dict[str, str] | None = None,
    init_containers: list[Manifest] | None = None,
    labels: dict[str, str] | None = None,
) -> Manifest:
    metadata: Manifest = {"name": name}
    if annotations is not None:
        metadata["annotations"] = annotations
    if labels is not None:
        metadata["labels"] = labels
    # The projected token volume gets a random name; without it two Pods of the
    # same shape have specs that compare equal.
    spec: Manifest = {"automountServiceAccountToken": False, "containers": containers}
    if init_containers is not None:
        spec["initContainers"] = init_containers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def opted_in(**annotations: str) -> dict[str, str]:
    """`castops.io/optimize: "true"` plus the given annotations (`slice_ratio=` etc.)."""
    keys = {"slice_ratio": SLICE_RATIO, "workload_type": WORKLOAD_TYPE}
    return {OPTIMIZE: "true", **{keys[key]: value for key, value in annotations.items()}}
