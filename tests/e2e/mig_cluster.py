"""What the end-to-end MIG tests share: their settings, the Pods they apply, MIG nodes as the
NVIDIA device plugin and GPU Feature Discovery show them (tests/mig_nodes.py), and the mig
backend's dra stack served with the NVIDIA DRA driver's `mig.nvidia.com` DeviceClass."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import kubernetes.client
import pytest
import yaml

from castslice.contract import Manifest

from ..mig_nodes import gpu_node_side
from .castslice_server import StartServer
from .dra import delete_taint_rule, ensure_device_class
from .kubectl import Kubectl
from .nodes import clear_unscheduled_pods, create_shaped_nodes, delete_nodes, shaped_node
from .pods import gpu_pod, opted_in
from .registration import register_and_wait
from .tools import REPO_ROOT, run_castslice

MIXED = {
    "CASTSLICE_BACKEND": "mig",
    "CASTSLICE_SLICES_PER_GPU": "8",
    "CASTSLICE_MIG_GPU_MODELS": "A100-80GB,H100-80GB",
}
SINGLE = {**MIXED, "CASTSLICE_MIG_STACK": "single"}
DRA = {**MIXED, "CASTSLICE_MIG_STACK": "dra"}
TIMEOUT = 60.0
# The scheduler's message for a Pod no node can take, whatever the reasons it lists.
NO_NODE = "nodes are available"
# 1/8, 1/4, 1/2 and 1 of a GPU at S = 8.
SHARES = {"eighth": 1, "quarter": 2, "half": 4, "whole": 8}


def pod(name: str, slices: int | None, gpus: int = 1) -> Manifest:
    annotations = None if slices is None else opted_in(slice_ratio=str(slices))
    return gpu_pod(name, annotations, gpus)


@contextmanager
def mig_nodes(
    api: kubernetes.client.ApiClient,
    namespace: str,
    shapes: list[tuple[str, str, str, int]],
) -> Iterator[dict[str, str]]:
    """Nodes of (strategy, model, mig-parted layout, GPUs), by `<model> <layout>`; deleted after."""
    clear_unscheduled_pods(api, namespace)
    run = uuid.uuid4().hex[:6]
    names = {
        f"{model} {layout}": f"mig-{model.lower()}-{layout.replace('.', '')}-{run}"
        for _, model, layout, _ in shapes
    }
    manifests = [
        shaped_node(names[f"{model} {layout}"], *gpu_node_side(strategy, model, layout, gpus))
        for strategy, model, layout, gpus in shapes
    ]
    create_shaped_nodes(api, manifests)
    try:
        yield names
    finally:
        delete_nodes(api, list(names.values()))


def apply(kubectl: Kubectl, namespace: str, manifests: list[Manifest]) -> str:
    return kubectl.apply(namespace, yaml.safe_dump_all(manifests))


def placed(pods: list[Manifest]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Pod name -> (node, its container's limits) as the API server stored them."""
    return {
        p["metadata"]["name"]: (p["spec"]["nodeName"], p["spec"]["containers"][0]["resources"])
        for p in pods
    }


@pytest.fixture(scope="module")
def start(module_castslice: StartServer, api: kubernetes.client.ApiClient) -> Any:
    def registered(settings: Mapping[str, str]) -> None:
        register_and_wait(api, module_castslice(settings))

    return registered


# The DeviceClass the NVIDIA DRA driver's chart installs for MIG devices, copied from
# tests/upstream/k8s-dra-driver-gpu-v25.12.0-deviceclass-mig.yaml with the chart's
# conditionals dropped and its API version rendered for resource.k8s.io/v1.
def mig_device_class() -> Manifest:
    text = (
        REPO_ROOT / "tests/upstream/k8s-dra-driver-gpu-v25.12.0-deviceclass-mig.yaml"
    ).read_text()
    lines = [line for line in text.splitlines() if not line.startswith("{{")]
    rendered = "\n".join(lines).replace(
        '{{ include "nvidia-dra-driver-gpu.resourceApiVersion" . }}', "resource.k8s.io/v1"
    )
    manifest: Manifest = yaml.safe_load(rendered)
    return manifest


def serve_mig_dra(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    namespace: str,
    start: Any,
    slices: str,
    settings: Mapping[str, str] = DRA,
) -> kubernetes.client.ResourceV1Api:
    """CastSlice serving the mig backend's dra stack (`settings`), with the driver's
    `mig.nvidia.com` DeviceClass and the claim templates of these slice counts in the
    namespace."""
    start(settings)
    # The dra backend's guard taints every device of the driver for its own claims alone;
    # MIG devices are not shared between claims and need none.
    delete_taint_rule(api)
    resource = kubernetes.client.ResourceV1Api(api)
    try:
        resource.create_device_class(mig_device_class())
    except kubernetes.client.ApiException as error:
        if error.status != 409:
            raise
    ensure_device_class(api)
    templates = run_castslice(settings, "claim-templates", "-n", namespace, "--slices", slices)
    kubectl_user.run("apply", "-f", "-", stdin=templates.stdout)
    clear_unscheduled_pods(api, namespace)
    return resource


def allocations(
    resource: kubernetes.client.ResourceV1Api, namespace: str, pods: list[Manifest]
) -> dict[str, Manifest]:
    """Each Pod's one allocated device result, by Pod name."""
    found = {}
    for p in pods:
        [status] = p["status"]["resourceClaimStatuses"]
        claim = resource.read_namespaced_resource_claim(
            status["resourceClaimName"], namespace, _preload_content=False
        )
        [result] = json.loads(claim.data)["status"]["allocation"]["devices"]["results"]
        found[p["metadata"]["name"]] = result
    return found
