"""The `mig` backend with the real scheduler: Pods of 1/8, 1/4, 1/2 and 1 of a GPU on the
MIG instances that hold them.

Nodes are labelled and advertise exactly as the NVIDIA device plugin and GPU Feature
Discovery v0.20.0 do under the `mixed` and `single` strategies, with mig-parted v0.15.0's
layouts (tests/mig_nodes.py); for the `dra` stack, nodes publish MIG devices in
ResourceSlices as the NVIDIA DRA driver v25.12.0 does, with its `mig.nvidia.com`
DeviceClass. Users' manifests go in through `kubectl apply`; what is checked is where each
Pod runs, what it asks for, and what doctor says before any Pod waits.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kubernetes.client
import pytest

from ..mig_nodes import mig_devices, resource_slice
from .kubectl import Kubectl
from .mig_cluster import (
    MIXED,
    NO_NODE,
    SHARES,
    SINGLE,
    TIMEOUT,
    Manifest,
    allocations,
    apply,
    mig_nodes,
    placed,
    pod,
    serve_mig_dra,
    start,
)
from .nodes import clear_unscheduled_pods, create_shaped_nodes, delete_nodes, shaped_node
from .pods import GPU, settle
from .registration import APPLIED
from .tools import run_castslice

__all__ = ["start"]


def test_mixed_pods_run_on_the_instances_that_hold_them_and_a_plain_pod_on_a_whole_gpu(
    api: kubernetes.client.ApiClient, kubectl_user: Kubectl, namespace: str, start: Any
) -> None:
    start(MIXED)
    shapes = [
        ("mixed", "A100-80GB", "all-balanced", 1),
        ("mixed", "H100-80GB", "all-1g.20gb", 1),
        ("mixed", "A100-80GB", "all-disabled", 2),
    ]
    with mig_nodes(api, namespace, shapes) as nodes:
        manifests = [pod(name, slices) for name, slices in SHARES.items()]
        warnings = apply(kubectl_user, namespace, [*manifests, pod("plain", None)])
        up, _ = settle(api, namespace, runs=5, waits=0, timeout=TIMEOUT)
    where = placed(up)
    assert where["eighth"] == (
        nodes["A100-80GB all-balanced"],
        {"limits": {"nvidia.com/mig-1g.10gb": "1"}, "requests": {"nvidia.com/mig-1g.10gb": "1"}},
    )
    assert where["quarter"][0] == nodes["H100-80GB all-1g.20gb"]
    assert where["quarter"][1]["limits"] == {"nvidia.com/mig-1g.20gb": "1"}
    assert where["half"][0] == nodes["A100-80GB all-balanced"]
    assert where["half"][1]["limits"] == {"nvidia.com/mig-3g.40gb": "1"}
    assert where["whole"][0] == nodes["A100-80GB all-disabled"]
    assert where["whole"][1]["limits"] == {GPU: "1"}
    # Not opted in: exactly as written, and on the whole GPU (MIG GPUs advertise no nvidia.com/gpu).
    plain = next(p for p in up if p["metadata"]["name"] == "plain")
    assert APPLIED not in (plain["metadata"].get("annotations") or {})
    assert where["plain"] == (
        nodes["A100-80GB all-disabled"],
        {"limits": {GPU: "1"}, "requests": {GPU: "1"}},
    )
    record = json.loads(
        next(p for p in up if p["metadata"]["name"] == "half")["metadata"]["annotations"][APPLIED]
    )
    # Each model's 3g.40gb as its boards report it.
    instance = (
        "A100-80GB 3g.40gb: 39.25 GiB, 42 of 98 SMs; H100-80GB 3g.40gb: 39.5 GiB, 60 of 132 SMs"
    )
    assert record["instance"] == instance
    assert f"mig: the Pod gets a MIG instance, {instance}" in warnings


def test_single_pods_run_on_nodes_labelled_with_their_instance(
    api: kubernetes.client.ApiClient, kubectl_user: Kubectl, namespace: str, start: Any
) -> None:
    start(SINGLE)
    shapes = [
        ("single", "A100-80GB", "all-1g.10gb", 1),
        ("single", "H100-80GB", "all-1g.20gb", 1),
        ("single", "H100-80GB", "all-3g.40gb", 1),
        ("single", "A100-80GB", "all-disabled", 1),
    ]
    with mig_nodes(api, namespace, shapes) as nodes:
        apply(kubectl_user, namespace, [pod(name, slices) for name, slices in SHARES.items()])
        up, _ = settle(api, namespace, runs=4, waits=0, timeout=TIMEOUT)
    where = {name: node for name, (node, _) in placed(up).items()}
    assert where == {
        "eighth": nodes["A100-80GB all-1g.10gb"],
        "quarter": nodes["H100-80GB all-1g.20gb"],
        "half": nodes["H100-80GB all-3g.40gb"],
        "whole": nodes["A100-80GB all-disabled"],
    }
    for p in up:
        assert p["spec"]["containers"][0]["resources"]["limits"] == {GPU: "1"}


def test_doctor_names_a_profile_no_node_offers_before_any_pod_waits(
    api: kubernetes.client.ApiClient, namespace: str, control_plane: Any, start: Any
) -> None:
    start(MIXED)
    shapes = [
        ("mixed", "A100-80GB", "all-balanced", 1),
        ("mixed", "H100-80GB", "all-1g.20gb", 1),
        ("mixed", "H100-80GB", "all-7g.80gb", 1),
        ("mixed", "A100-80GB", "all-disabled", 1),
    ]
    kubeconfig = str(control_plane.kubeconfig)
    with mig_nodes(api, namespace, shapes):
        offered = run_castslice(MIXED, "doctor", "--kubeconfig", kubeconfig)
        # strict: half a GPU is 4g.40gb, which no layout here has.
        strict = run_castslice(
            {**MIXED, "CASTSLICE_MIG_FIT": "strict"}, "doctor", "--kubeconfig", kubeconfig
        )
    # The fail-open check counts since the API server started, which tests before this one
    # on the same server may have moved on purpose: every other check must pass.
    failed = [
        line
        for line in offered.stdout.splitlines()
        if line.lstrip().startswith("✗") and "failed open" not in line
    ]
    assert offered.returncode in (0, 1) and not failed, offered.stdout
    [nodes_line] = [line for line in offered.stdout.splitlines() if "nodes offer" in line]
    assert nodes_line.lstrip().startswith("✓"), nodes_line
    assert "nvidia.com/mig-1g.10gb" in nodes_line and "nvidia.com/mig-3g.40gb" in nodes_line
    assert "for Pods of 8 slices or more" in offered.stdout
    assert strict.returncode == 1, strict.stdout
    [missing] = [line for line in strict.stdout.splitlines() if "no Ready node offers" in line]
    assert "no Ready node offers nvidia.com/mig-4g.40gb (for Pods of 4 slices)" in missing
    assert "nvidia.com/mig.config=all-balanced" in strict.stdout


@pytest.mark.kubernetes("1.36")
def test_dra_claims_are_allocated_the_mig_devices_that_hold_them(
    api: kubernetes.client.ApiClient, kubectl_user: Kubectl, namespace: str, start: Any
) -> None:
    resource = serve_mig_dra(api, kubectl_user, namespace, start, "1,2,4")
    run = uuid.uuid4().hex[:6]
    layouts = {"A100-80GB": "all-balanced", "H100-80GB": "all-1g.20gb"}
    names = {model: f"mig-dra-{model.lower()}-{run}" for model in layouts}
    create_shaped_nodes(api, [shaped_node(name, {}, {}) for name in names.values()])
    try:
        for model, name in names.items():
            resource.create_resource_slice(resource_slice(name, mig_devices(model, layouts[model])))
        manifests = [pod(name, SHARES[name]) for name in ("eighth", "quarter", "half")]
        apply(kubectl_user, namespace, manifests)
        up, _ = settle(api, namespace, runs=3, waits=0, timeout=TIMEOUT)
        allocated = {
            name: (result["pool"], result["device"].split("-")[3])
            for name, result in allocations(resource, namespace, up).items()
        }
        assert allocated == {
            "eighth": (names["A100-80GB"], "1g10gb"),
            "quarter": (names["H100-80GB"], "1g20gb"),
            "half": (names["A100-80GB"], "3g40gb"),
        }
    finally:
        delete_nodes(api, list(names.values()))
        for name in names.values():
            resource.delete_collection_resource_slice(field_selector=f"spec.nodeName={name}")


@pytest.mark.kubernetes("1.36")
def test_dra_claims_fall_back_to_the_next_larger_instance_when_the_smallest_are_taken(
    api: kubernetes.client.ApiClient, kubectl_user: Kubectl, namespace: str, start: Any
) -> None:
    resource = serve_mig_dra(api, kubectl_user, namespace, start, "1")
    # One A100-80GB in mig-parted's all-balanced: two 1g.10gb, one 2g.20gb, one 3g.40gb.
    name = f"mig-dra-fallback-{uuid.uuid4().hex[:6]}"
    create_shaped_nodes(api, [shaped_node(name, {}, {})])
    try:
        resource.create_resource_slice(
            resource_slice(name, mig_devices("A100-80GB", "all-balanced"))
        )
        # Two eighths take both 1g.10gb; then the third, and only then, is applied.
        apply(kubectl_user, namespace, [pod("eighth-0", 1), pod("eighth-1", 1)])
        settle(api, namespace, runs=2, waits=0, timeout=TIMEOUT)
        apply(kubectl_user, namespace, [pod("eighth-2", 1)])
        up, _ = settle(api, namespace, runs=3, waits=0, timeout=TIMEOUT)
        allocated = {
            name: (result["request"], result["device"].split("-")[3])
            for name, result in allocations(resource, namespace, up).items()
        }
        assert allocated == {
            "eighth-0": ("gpu/1g-10gb", "1g10gb"),
            "eighth-1": ("gpu/1g-10gb", "1g10gb"),
            # No 1g.10gb left and no 1g.20gb on this layout: the next larger that holds 1/8.
            "eighth-2": ("gpu/2g-20gb", "2g20gb"),
        }
        record = json.loads(
            next(p for p in up if p["metadata"]["name"] == "eighth-2")["metadata"]["annotations"][
                APPLIED
            ]
        )
        assert record["instance"].startswith(
            "A100-80GB 1g.10gb: 9.62 GiB, 14 of 98 SMs; H100-80GB 1g.10gb: 9.75 GiB, 16 of 132 "
            "SMs; if none is free, the first free of 1g.20gb, 2g.20gb, 3g.40gb"
        )
    finally:
        delete_nodes(api, [name])
        resource.delete_collection_resource_slice(field_selector=f"spec.nodeName={name}")


# GKE's partition node pools: "Each GPU partition appears as a regular GPU resource"
# (cloud.google.com/kubernetes-engine/docs/how-to/gpus-multi): the node advertises one
# nvidia.com/gpu per partition and is labelled with its partition size; every GKE node
# names its pool, every GPU node its accelerator (as nodes.py's GKE nodes).
# A partition pool time-shared on top is labelled as GKE's time-sharing pools are, beside its
# partition size: "cloud.google.com/gke-max-shared-clients-per-gpu" and
# "cloud.google.com/gke-gpu-sharing-strategy: time-sharing"
# (cloud.google.com/kubernetes-engine/docs/concepts/timesharing-gpus), and advertises each
# partition once per client, as a time-shared GPU is advertised once per client.
def gke_node(
    name: str,
    pool: str,
    accelerator: str,
    partition: str | None,
    gpus: int,
    clients: int | None = None,
) -> Manifest:
    labels = {
        "cloud.google.com/gke-nodepool": pool,
        "cloud.google.com/gke-accelerator": accelerator,
    }
    if partition is not None:
        labels["cloud.google.com/gke-gpu-partition-size"] = partition
    if clients is not None:
        labels["cloud.google.com/gke-gpu-sharing-strategy"] = "time-sharing"
        labels["cloud.google.com/gke-max-shared-clients-per-gpu"] = str(clients)
        gpus *= clients
    return shaped_node(name, labels, {GPU: str(gpus)})


@contextmanager
def gke_nodes(
    api: kubernetes.client.ApiClient,
    namespace: str,
    partitions: list[str | None],
    time_shared: tuple[str, int] | None = None,
) -> Iterator[dict[str, str]]:
    """One node per partition size (None: whole GPUs, two), A100-80GB, by size or "whole";
    with `time_shared` (size, clients), one more of that size time-shared on top, by
    "shared"."""
    clear_unscheduled_pods(api, namespace)
    run = uuid.uuid4().hex[:6]
    names = {
        size or "whole": f"gke-{(size or 'whole').replace('.', '')}-{run}" for size in partitions
    }
    # A partition pool's node: one GPU cut in as many partitions as one GPU holds (mig-parted).
    per_gpu = {"1g.10gb": 7, "3g.40gb": 2}
    manifests = [
        gke_node(
            names[size or "whole"],
            f"pool-{size or 'whole'}".replace(".", ""),
            "nvidia-a100-80gb",
            size,
            per_gpu[size] if size else 1,
        )
        for size in partitions
    ]
    if time_shared is not None:
        size, clients = time_shared
        names["shared"] = f"gke-ts{size.replace('.', '')}-{run}"
        pool = f"pool-ts{size}".replace(".", "")
        shared = gke_node(names["shared"], pool, "nvidia-a100-80gb", size, per_gpu[size], clients)
        manifests.append(shared)
    create_shaped_nodes(api, manifests)
    try:
        yield names
    finally:
        delete_nodes(api, list(names.values()))


def test_gke_partitions_take_their_share_and_whole_gpus_keep_off_them(
    api: kubernetes.client.ApiClient, kubectl_user: Kubectl, namespace: str, start: Any
) -> None:
    start({**MIXED, "CASTSLICE_MIG_STACK": "gke", "CASTSLICE_MIG_GPU_MODELS": "A100-80GB"})
    with gke_nodes(api, namespace, ["1g.10gb", "3g.40gb", None]) as nodes:
        apply(
            kubectl_user,
            namespace,
            [pod("eighth", 1), pod("half", 4), pod("whole", 8), pod("second-whole", 8)],
        )
        up, [waiting] = settle(api, namespace, runs=3, waits=1, no_room=NO_NODE, timeout=TIMEOUT)
    where = {name: node for name, (node, _) in placed(up).items()}
    assert where["eighth"] == nodes["1g.10gb"]
    assert where["half"] == nodes["3g.40gb"]
    assert nodes["whole"] in where.values()
    # One whole GPU in all: the other whole-GPU Pod waits rather than take a partition.
    assert waiting["metadata"]["name"] in ("whole", "second-whole")


def test_gke_time_shared_partitions_take_only_the_pods_smaller_than_a_partition(
    api: kubernetes.client.ApiClient, kubectl_user: Kubectl, namespace: str, start: Any
) -> None:
    start(
        {
            **MIXED,
            "CASTSLICE_MIG_STACK": "gke",
            "CASTSLICE_MIG_GPU_MODELS": "A100-80GB",
            "CASTSLICE_SLICES_PER_GPU": "16",
            "CASTSLICE_MIG_TIME_SHARED_CLIENTS": "2",
        }
    )
    # 1/16 of a GPU is smaller than 1g.10gb (1/8): 3 such Pods share the time-shared node's
    # 14 clients. 1/8 fills a 1g.10gb: 8 such Pods for the dedicated node's 7 partitions,
    # so one waits rather than share a partition.
    sixteenths = [pod(f"sixteenth-{n}", 1) for n in range(3)]
    eighths = [pod(f"eighth-{n}", 2) for n in range(8)]
    with gke_nodes(api, namespace, ["1g.10gb", "3g.40gb"], ("1g.10gb", 2)) as nodes:
        apply(kubectl_user, namespace, [*sixteenths, *eighths, pod("half", 8)])
        up, [waiting] = settle(api, namespace, runs=11, waits=1, no_room=NO_NODE, timeout=TIMEOUT)
    where = {name: node for name, (node, _) in placed(up).items()}
    assert {where[f"sixteenth-{n}"] for n in range(3)} == {nodes["shared"]}
    assert {node for name, node in where.items() if name.startswith("eighth-")} == {
        nodes["1g.10gb"]
    }
    assert waiting["metadata"]["name"].startswith("eighth-")
    assert where["half"] == nodes["3g.40gb"]
    # The record says what a time-shared Pod really gets.
    shared_pod = next(p for p in up if p["metadata"]["name"] == "sixteenth-0")
    record = json.loads(shared_pod["metadata"]["annotations"][APPLIED])
    assert record["instance"] == (
        "1g.10gb: 9.62 GiB, 14 of 98 SMs, time-shared by up to 2 clients without isolation"
    )


def test_gke_backend_whole_gpu_pods_keep_off_partition_nodes(
    api: kubernetes.client.ApiClient, kubectl_user: Kubectl, namespace: str, start: Any
) -> None:
    start({"CASTSLICE_BACKEND": "gke"})
    with gke_nodes(api, namespace, ["1g.10gb", None]) as nodes:
        training = {"castops.io/optimize": "true", "castops.io/workload-type": "training"}
        pods = [pod("trainer-0", None), pod("trainer-1", None)]
        for manifest in pods:
            manifest["metadata"]["annotations"] = training
        apply(kubectl_user, namespace, pods)
        up, [waiting] = settle(api, namespace, runs=1, waits=1, no_room=NO_NODE, timeout=TIMEOUT)
    assert [p["spec"]["nodeName"] for p in up] == [nodes["whole"]]
    affinity = waiting["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "cloud.google.com/gke-gpu-partition-size", "operator": "DoesNotExist"} in (
        terms[0]["matchExpressions"]
    )
