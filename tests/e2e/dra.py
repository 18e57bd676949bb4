"""Fake GPU nodes for the `dra` backend: devices published as the NVIDIA DRA driver does.

The kubelet plugin of kubernetes-sigs/dra-driver-nvidia-gpu, run with the
`ConsumableShares` feature gate and `--consumable-shares=4`, publishes one
ResourceSlice per node (driver `gpu.nvidia.com`, a pool named after the node)
whose GPUs carry `allowMultipleAllocations: true`, a `shares` capacity of 4
with request policy default 1, min 1, max 4, step 1, and their `memory` with
default 0, min 0, step 1Mi, max the GPU's memory (the driver's
demo/specs/consumable-shares/README.md and its consumable-capacity guide). Its
Helm chart ships the DeviceClass `gpu.nvidia.com` selecting them. Here the
slices are written once, at node creation, as that plugin would; KWOK plays
the kubelet, so no claim is ever prepared on a node, only allocated.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import kubernetes.client
import yaml

from castslice.contract import Manifest

from ..procs import wait_until
from .nodes import Pool, clear_unscheduled_pods, create_nodes, delete_nodes
from .tools import REPO_ROOT

DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = DRIVER
SHARES = 4
# A T4, as the driver reads it from NVML.
_MEMORY = "15Gi"
_MEMORY_MIB = "15360Mi"
_GROUP, _VERSION = "resource.k8s.io", "v1"
TAINT_RULE_FILE = REPO_ROOT / "infra/gpu-sharing/dra/device-taint-rule.yaml"


# The DeviceClass the driver's chart installs for full GPUs, as `helm template` renders it
# for a cluster serving resource.k8s.io/v1: kubernetes-sigs/dra-driver-nvidia-gpu,
# deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-gpu.yaml, chart 0.5.0-dev
# (commit 95932046). `extendedResourceName` serves Pods asking plain nvidia.com/gpu from it.
DEVICE_CLASS_YAML = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.nvidia.com
spec:
  selectors:
  - cel:
      expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
  extendedResourceName: nvidia.com/gpu
"""  # noqa: E501 (the chart's expression, on its one line)


def device_class() -> Manifest:
    manifest: Manifest = yaml.safe_load(DEVICE_CLASS_YAML)
    return manifest


def gpu_device(index: int) -> Manifest:
    return {
        "name": f"gpu-{index}",
        "allowMultipleAllocations": True,
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{uuid.uuid4()}"},
            "index": {"int": index},
            "minor": {"int": index},
            "productName": {"string": "Tesla T4"},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Turing"},
            "cudaComputeCapability": {"version": "7.5.0"},
            "driverVersion": {"version": "580.95.5"},
            "cudaDriverVersion": {"version": "13.0.0"},
        },
        "capacity": {
            "memory": {
                "value": _MEMORY,
                "requestPolicy": {
                    "default": "0",
                    "validRange": {"min": "0", "max": _MEMORY_MIB, "step": "1Mi"},
                },
            },
            "shares": {
                "value": str(SHARES),
                "requestPolicy": {
                    "default": "1",
                    "validRange": {"min": "1", "max": str(SHARES), "step": "1"},
                },
            },
        },
    }


def resource_slice(node: str, node_uid: str, gpus: int) -> Manifest:
    return {
        "apiVersion": f"{_GROUP}/{_VERSION}",
        "kind": "ResourceSlice",
        "metadata": {
            "generateName": f"{node}-{DRIVER}-",
            # As the kubelet plugin does: the slice goes with its node.
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node,
                    "uid": node_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [gpu_device(index) for index in range(gpus)],
        },
    }


def ensure_device_class(api: kubernetes.client.ApiClient) -> None:
    resource = kubernetes.client.ResourceV1Api(api)
    try:
        resource.create_device_class(device_class())
    except kubernetes.client.ApiException as error:
        if error.status != 409:
            raise


def taint_rule() -> Manifest:
    """The DeviceTaintRule CastSlice ships for the driver's devices (infra/gpu-sharing/dra/)."""
    rule: Manifest = yaml.safe_load(TAINT_RULE_FILE.read_text())
    return rule


def ensure_taint_rule(api: kubernetes.client.ApiClient) -> None:
    try:
        kubernetes.client.ResourceV1Api(api).create_device_taint_rule(taint_rule())
    except kubernetes.client.ApiException as error:
        if error.status != 409:
            raise


def delete_taint_rule(api: kubernetes.client.ApiClient) -> None:
    try:
        kubernetes.client.ResourceV1Api(api).delete_device_taint_rule(
            taint_rule()["metadata"]["name"]
        )
    except kubernetes.client.ApiException as error:
        if error.status != 404:
            raise


def create_dra_nodes(api: kubernetes.client.ApiClient, gpus: list[int]) -> list[str]:
    """One node per entry, with that many shareable GPUs in its ResourceSlice; no device plugin."""
    ensure_device_class(api)
    nodes = create_nodes(
        api, "dra", [Pool(f"dra{i}", None, gpus_per_node=n) for i, n in enumerate(gpus)]
    )
    core = kubernetes.client.CoreV1Api(api)
    resource = kubernetes.client.ResourceV1Api(api)
    try:
        for node, count in zip(nodes, gpus, strict=True):
            stored = core.read_node(node.name)
            resource.create_resource_slice(resource_slice(node.name, stored.metadata.uid, count))
    except BaseException:
        delete_nodes(api, [node.name for node in nodes])
        raise
    return [node.name for node in nodes]


def wait_for_unallocated_claims_of_gone_pods(
    api: kubernetes.client.ApiClient, keep_namespace: str
) -> None:
    """Return once no unallocated ResourceClaim outside `keep_namespace` belongs to a Pod
    that is gone.

    A busy kube-scheduler may learn of a deleted Pending Pod after the next test's node
    appears, and try it there: while the Pod's claim exists, it allocates the claim on the
    new devices before binding fails, and those shares are taken while the test's own Pods
    are placed. Once the claim is gone, nothing can be allocated for that Pod.
    """
    core = kubernetes.client.CoreV1Api(api)
    resource = kubernetes.client.ResourceV1Api(api)

    def gone() -> bool:
        claims = resource.list_resource_claim_for_all_namespaces().items
        pods = {pod.metadata.uid for pod in core.list_pod_for_all_namespaces().items}
        return not any(
            claim.metadata.namespace != keep_namespace
            and not (claim.status and claim.status.allocation)
            and any(
                owner.kind == "Pod" and owner.uid not in pods
                for owner in claim.metadata.owner_references or []
            )
            for claim in claims
        )

    wait_until(gone, timeout=60.0, what="the claims of deleted Pending Pods to go", interval=0.2)


@contextmanager
def dra_nodes(
    api: kubernetes.client.ApiClient, gpus: list[int], namespace: str
) -> Iterator[list[str]]:
    """DRA GPU nodes for one test whose Pods live in `namespace`; deleted (with their slices)."""
    clear_unscheduled_pods(api, namespace)
    wait_for_unallocated_claims_of_gone_pods(api, namespace)
    names = create_dra_nodes(api, gpus)
    try:
        yield names
    finally:
        delete_nodes(api, names)
        resource = kubernetes.client.ResourceV1Api(api)
        for name in names:
            resource.delete_collection_resource_slice(field_selector=f"spec.nodeName={name}")
