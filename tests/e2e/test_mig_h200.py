"""The `mig` backend on H200s as the captured board reports itself, with the real scheduler.

The nodes are labelled exactly as GPU Feature Discovery v0.20.0 labels a node of the H200
SXM read in tests/upstream/h200-sxm-capture/ (NVML's name `NVIDIA H200`, so the product
`NVIDIA-H200`; 143771 MiB; each MIG device's memory in MiB and SMs as NVML reports them),
under the device plugin's `mixed` and `single` strategies and mig-parted v0.15.0's layouts
(tests/mig_nodes.py); on the `dra` stack the nodes publish the MIG devices in ResourceSlices
as the NVIDIA DRA driver v25.12.0 does, with the capture's `productName`. Opted-in Pods of
1/8, 1/4, 1/2 and 1 of a GPU are applied with kubectl and must run where their instance is.
A board the profile table does not know by name (an H200 NVL says `NVIDIA H200 NVL`) is named
by doctor, with the setting that adds it; set so, the Pods run.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kubernetes.client
import pytest

from ..mig_nodes import gpu_node_side, mig_devices, resource_slice
from .kubectl import Kubectl
from .mig_cluster import (
    NO_NODE,
    SHARES,
    TIMEOUT,
    allocations,
    apply,
    placed,
    pod,
    serve_mig_dra,
    start,
)
from .nodes import clear_unscheduled_pods, create_shaped_nodes, delete_nodes, shaped_node
from .pods import GPU, settle
from .registration import APPLIED
from .tools import run_castslice

H200 = {
    "CASTSLICE_BACKEND": "mig",
    "CASTSLICE_SLICES_PER_GPU": "8",
    "CASTSLICE_MIG_GPU_MODELS": "H200",
}
# The captured board's product label, and an H200 NVL's (NVML: `NVIDIA H200 NVL`).
PRODUCT = "NVIDIA-H200"
NVL = "NVIDIA H200 NVL"

__all__ = ["start"]


@contextmanager
def h200_nodes(
    api: kubernetes.client.ApiClient,
    namespace: str,
    strategy: str,
    layouts: list[str],
    nvml_name: str | None = None,
) -> Iterator[dict[str, str]]:
    """One node of one H200 per mig-parted layout, by layout; deleted after."""
    clear_unscheduled_pods(api, namespace)
    run = uuid.uuid4().hex[:6]
    names = {layout: f"h200-{layout.replace('.', '')}-{run}" for layout in layouts}
    manifests = []
    for layout, name in names.items():
        labels, resources = gpu_node_side(strategy, "H200", layout, nvml_name=nvml_name)
        manifests.append(shaped_node(name, labels, resources))
    create_shaped_nodes(api, manifests)
    try:
        yield names
    finally:
        delete_nodes(api, list(names.values()))


def test_the_nodes_carry_the_labels_gfd_gives_the_captured_h200() -> None:
    labels, resources = gpu_node_side("single", "H200", "all-1g.18gb")
    assert labels["nvidia.com/gpu.product"] == f"{PRODUCT}-MIG-1g.18gb"
    assert labels["nvidia.com/gpu.memory"] == "16384"
    assert labels["nvidia.com/gpu.multiprocessors"] == "16"
    assert resources == {GPU: "7"}
    labels, resources = gpu_node_side("mixed", "H200", "all-balanced")
    assert labels["nvidia.com/gpu.product"] == PRODUCT
    assert labels["nvidia.com/mig-3g.71gb.memory"] == "71424"
    assert resources == {
        "nvidia.com/mig-1g.18gb": "2",
        "nvidia.com/mig-2g.35gb": "1",
        "nvidia.com/mig-3g.71gb": "1",
    }


@pytest.mark.parametrize(
    ("strategy", "layouts", "expected"),
    [
        (
            "mixed",
            ["all-balanced", "all-1g.35gb", "all-disabled"],
            {
                "eighth": ("all-balanced", "nvidia.com/mig-1g.18gb"),
                "quarter": ("all-1g.35gb", "nvidia.com/mig-1g.35gb"),
                "half": ("all-balanced", "nvidia.com/mig-3g.71gb"),
                "whole": ("all-disabled", GPU),
            },
        ),
        (
            "single",
            ["all-1g.18gb", "all-1g.35gb", "all-3g.71gb", "all-disabled"],
            {
                "eighth": ("all-1g.18gb", GPU),
                "quarter": ("all-1g.35gb", GPU),
                "half": ("all-3g.71gb", GPU),
                "whole": ("all-disabled", GPU),
            },
        ),
    ],
)
def test_h200_pods_run_on_the_instances_that_hold_their_share(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    namespace: str,
    start: Any,
    strategy: str,
    layouts: list[str],
    expected: dict[str, tuple[str, str]],
) -> None:
    start({**H200, "CASTSLICE_MIG_STACK": strategy})
    with h200_nodes(api, namespace, strategy, layouts) as nodes:
        warnings = apply(kubectl_user, namespace, [pod(n, s) for n, s in SHARES.items()])
        up, _ = settle(api, namespace, runs=4, waits=0, timeout=TIMEOUT)
    where = placed(up)
    for name, (layout, resource) in expected.items():
        assert where[name][0] == nodes[layout], (name, where[name])
        assert where[name][1]["limits"] == {resource: "1"}, (name, where[name])
    eighth = next(p for p in up if p["metadata"]["name"] == "eighth")
    record = json.loads(eighth["metadata"]["annotations"][APPLIED])
    assert record["instance"] == "1g.18gb: 16 GiB, 16 of 132 SMs"
    assert "mig: the Pod gets a MIG instance, 1g.18gb: 16 GiB, 16 of 132 SMs" in warnings


@pytest.mark.kubernetes("1.36")
def test_h200_dra_claims_get_the_devices_the_driver_publishes_for_the_captured_board(
    api: kubernetes.client.ApiClient, kubectl_user: Kubectl, namespace: str, start: Any
) -> None:
    settings = {**H200, "CASTSLICE_MIG_STACK": "dra"}
    resource = serve_mig_dra(api, kubectl_user, namespace, start, "1,2,4", settings)
    run = uuid.uuid4().hex[:6]
    layouts = {"all-balanced": f"h200-dra-balanced-{run}", "all-1g.35gb": f"h200-dra-q-{run}"}
    create_shaped_nodes(api, [shaped_node(name, {}, {}) for name in layouts.values()])
    try:
        for layout, name in layouts.items():
            devices = mig_devices("H200", layout)
            assert {d["attributes"]["productName"]["string"] for d in devices} == {"NVIDIA H200"}
            resource.create_resource_slice(resource_slice(name, devices))
        apply(kubectl_user, namespace, [pod(n, SHARES[n]) for n in ("eighth", "quarter", "half")])
        up, _ = settle(api, namespace, runs=3, waits=0, timeout=TIMEOUT)
        allocated = {
            name: (result["pool"], result["device"].split("-")[3])
            for name, result in allocations(resource, namespace, up).items()
        }
        assert allocated == {
            "eighth": (layouts["all-balanced"], "1g18gb"),
            "quarter": (layouts["all-1g.35gb"], "1g35gb"),
            "half": (layouts["all-balanced"], "3g71gb"),
        }
    finally:
        delete_nodes(api, list(layouts.values()))
        for name in layouts.values():
            resource.delete_collection_resource_slice(field_selector=f"spec.nodeName={name}")


def test_a_board_the_table_does_not_know_is_named_by_doctor_and_runs_once_added(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    namespace: str,
    control_plane: Any,
    start: Any,
) -> None:
    single = {**H200, "CASTSLICE_MIG_STACK": "single", "CASTSLICE_MIG_PROFILES": "1g.18gb"}
    added = {**single, "CASTSLICE_MIG_PRODUCT_NAMES": f"H200={PRODUCT}-NVL"}
    kubeconfig = str(control_plane.kubeconfig)
    start(single)
    with h200_nodes(api, namespace, "single", ["all-1g.18gb", "all-disabled"], NVL) as nodes:
        apply(kubectl_user, namespace, [pod("unknown", 1)])
        settle(api, namespace, runs=0, waits=1, no_room=NO_NODE, timeout=TIMEOUT)
        named = run_castslice(single, "doctor", "--kubeconfig", kubeconfig)
        assert named.returncode == 1, named.stdout
        [line] = [line for line in named.stdout.splitlines() if nodes["all-1g.18gb"] in line]
        assert "a GPU named 'NVIDIA-H200-NVL', which no model of CASTSLICE_MIG_GPU_MODELS" in line
        assert f"set CASTSLICE_MIG_PRODUCT_NAMES=H200={PRODUCT}-NVL" in line
        # Set as doctor says, the Pods CastSlice admits from then on run on the board.
        start(added)
        apply(kubectl_user, namespace, [pod("known", 1)])
        up, [waiting] = settle(api, namespace, runs=1, waits=1, no_room=NO_NODE, timeout=TIMEOUT)
        fixed = run_castslice(added, "doctor", "--kubeconfig", kubeconfig)
    assert [p["metadata"]["name"] for p in up] == ["known"]
    assert up[0]["spec"]["nodeName"] == nodes["all-1g.18gb"]
    assert waiting["metadata"]["name"] == "unknown"
    assert not [line for line in fixed.stdout.splitlines() if "no model of" in line], fixed.stdout
