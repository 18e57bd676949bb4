"""GPU memory limits on the `dra` backend with the real scheduler and resource-claim
controller: a claim's consumed capacity, s of S shares of one device, is the share its
container is limited to, and with CASTSLICE_GPU_MEMORY_ENFORCED_ONLY no Pod's claim is
allocated on a node whose driver cannot enforce it.

The nodes publish GPUs as the NVIDIA DRA driver does with `--consumable-shares=4` (dra.py:
a T4, 15360 MiB) and carry GPU Feature Discovery v0.20.0's driver and memory labels
(test_gpu_memory.py's gfd_labels), one on driver 615, one on 580.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import kubernetes.client
import pytest

from .castslice_server import StartServer
from .dra import ensure_device_class, ensure_taint_rule, resource_slice
from .dra import wait_for_unallocated_claims_of_gone_pods as wait_for_claims
from .gpu_memory import LIMIT, REQUEST, env_of, gfd_labels
from .kubectl import Kubectl
from .nodes import clear_unscheduled_pods, create_shaped_nodes, delete_nodes, shaped_node
from .pods import Manifest, create_pod, gpu_container, opted_in, pod, settle, unschedulable
from .registration import register_and_wait
from .tools import run_castslice

pytestmark = pytest.mark.kubernetes("1.36")

T4_MIB = 15360
SETTINGS = {"CASTSLICE_BACKEND": "dra", "CASTSLICE_GPU_MEMORY": f"{T4_MIB}Mi"}
_TIMEOUT = 60.0


@pytest.fixture(scope="module", autouse=True)
def dra_castslice(module_castslice: StartServer, api: kubernetes.client.ApiClient) -> None:
    ensure_taint_rule(api)
    register_and_wait(api, module_castslice(SETTINGS))


@contextmanager
def labelled_dra_nodes(api: kubernetes.client.ApiClient, namespace: str) -> Iterator[dict]:
    """A one-GPU DRA node on driver 615 and one on 580, by driver; deleted with their slices."""
    clear_unscheduled_pods(api, namespace)
    wait_for_claims(api, namespace)
    ensure_device_class(api)
    run = uuid.uuid4().hex[:6]
    drivers = {"615": "615.20.03", "580": "580.95.05"}
    names = {major: f"mem-dra-{major}-{run}" for major in drivers}
    create_shaped_nodes(
        api,
        [
            shaped_node(names[major], gfd_labels("Tesla-T4", T4_MIB, driver, (13, 0)), {})
            for major, driver in drivers.items()
        ],
    )
    core = kubernetes.client.CoreV1Api(api)
    resource = kubernetes.client.ResourceV1Api(api)
    try:
        for name in names.values():
            uid = core.read_node(name).metadata.uid
            resource.create_resource_slice(resource_slice(name, uid, 1))
        yield names
    finally:
        delete_nodes(api, list(names.values()))
        for name in names.values():
            resource.delete_collection_resource_slice(field_selector=f"spec.nodeName={name}")


def test_each_claims_share_is_its_containers_limit_and_only_where_it_holds(
    api: kubernetes.client.ApiClient, kubectl_user: Kubectl, namespace: str
) -> None:
    templates = run_castslice(SETTINGS, "claim-templates", "-n", namespace, "--slices", "1,2")
    kubectl_user.run("apply", "-f", "-", stdin=templates.stdout)
    # 5 shares asked of the 615 node's 4: whichever the scheduler takes first, 3 Pods fit.
    manifests: list[Manifest] = [
        pod(f"quarter-{n}", [gpu_container("app")], annotations=opted_in()) for n in range(3)
    ]
    manifests.append(pod("half", [gpu_container("app")], annotations=opted_in(slice_ratio="2")))

    with labelled_dra_nodes(api, namespace) as nodes:
        for manifest in manifests:
            create_pod(api, namespace, manifest)
        up, left = settle(
            api, namespace, runs=3, waits=1, no_room="cannot allocate all claims", timeout=_TIMEOUT
        )

    assert {p["spec"]["nodeName"] for p in up} == {nodes["615"]}
    quarter, half = str(T4_MIB // 4), str(T4_MIB // 2)
    for stored in up + left:
        expected = half if stored["metadata"]["name"] == "half" else quarter
        assert env_of(stored) == {REQUEST: expected, LIMIT: expected}
    message = unschedulable(left[0]) or ""
    assert "didn't match Pod's node affinity/selector" in message, message
