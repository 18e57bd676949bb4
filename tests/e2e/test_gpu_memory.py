"""GPU memory requests and limits on the real API server and scheduler: opted-in Pods on
nodes labelled as GPU Feature Discovery labels H200 and L4 nodes carry the MiB of their
node's GPU, a Pod's own NVIDIA_GPU_MEMORY_LIMIT is replaced, a Pod that did not opt in is
stored as written, and with CASTSLICE_GPU_MEMORY_ENFORCED_ONLY (the default) no fractional
Pod lands on a node whose driver cannot enforce the limits.

The nodes' labels are GFD v0.20.0's: the driver and CUDA versions as its newVersionLabeler
writes them (tests/upstream/k8s-device-plugin-v0.20.0-version-labeler.go.txt), and
`nvidia.com/gpu.memory` in MiB as its resource labeler does (…-resource.go.txt); an H200's
143771 MiB is what nvidia-smi reads on one (driver 580.159.04). On `gke` the nodes carry
GKE's labels only. What no node here can show, a driver enforcing the numbers, the unit
suite's hook test (tests/test_cdi_hook.py) says.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import kubernetes.client
import pytest

from .castslice_server import StartServer
from .cluster import LocalControlPlane
from .gpu_memory import LIMIT, REQUEST, env_of, gfd_labels
from .nodes import (
    GKE_ACCELERATOR,
    GKE_CLIENTS,
    GKE_POOL,
    GKE_STRATEGY,
    NVIDIA_REPLICAS,
    NVIDIA_SHARED,
    NVIDIA_STRATEGY,
    SEED_SHARED,
    clear_unscheduled_pods,
    create_shaped_nodes,
    delete_nodes,
    shaped_node,
)
from .pods import (
    GPU,
    create_pod,
    gpu_container,
    opted_in,
    pod,
    read_pod,
    settle,
    unschedulable,
)
from .registration import APPLIED, register_and_wait
from .tools import run_castslice

H200_MIB = 143771
L4_MIB = 23034
# One GPU's memory as the setting gives it: the H200 pool's.
SETTINGS = {"CASTSLICE_GPU_MEMORY": f"{H200_MIB}Mi"}
BACKEND_SETTINGS = {
    "nvidia": {"CASTSLICE_BACKEND": "nvidia"},
    "resource": {"CASTSLICE_BACKEND": "resource"},
    "gke": {"CASTSLICE_BACKEND": "gke"},
}
# A quarter of an H200, rounded down to whole MiB.
QUARTER = str(H200_MIB // 4)
_TIMEOUT = 60.0


H200_615 = gfd_labels("NVIDIA-H200", H200_MIB, "615.20.03", (13, 4))
H200_580 = gfd_labels("NVIDIA-H200", H200_MIB, "580.159.04", (13, 0))
L4_615 = gfd_labels("NVIDIA-L4", L4_MIB, "615.20.03", (13, 4))
# What each node's kubelet reports of its host, every field the client requires; KWOK's
# node-initialize stage (v0.8.0) keeps the versions it finds and fills in those left empty.
NODE_INFO = {
    "architecture": "amd64",
    "bootID": "",
    "containerRuntimeVersion": "containerd://2.2.0",
    "kernelVersion": "6.8.0-1015-gcp",
    "kubeProxyVersion": "",
    "kubeletVersion": "v1.35.0",
    "machineID": "",
    "operatingSystem": "linux",
    "osImage": "",
    "systemUUID": "",
}


def sharing_side(backend: str, gfd: Mapping[str, str], pool: str) -> tuple[dict, dict]:
    """(labels, capacity) of a node sharing its one GPU 4 ways on `backend`."""
    if backend == "nvidia":
        labels = {**gfd, NVIDIA_REPLICAS: "4", NVIDIA_STRATEGY: "time-slicing"}
        return labels, {NVIDIA_SHARED: "4"}
    if backend == "resource":
        # The shipped resource config: the NVIDIA device plugin with GFD, 4 units per GPU.
        return {**gfd, NVIDIA_REPLICAS: "4", NVIDIA_STRATEGY: "time-slicing"}, {SEED_SHARED: "4"}
    labels = {
        GKE_POOL: pool,
        GKE_ACCELERATOR: "nvidia-h200-141gb",
        GKE_STRATEGY: "time-sharing",
        GKE_CLIENTS: "4",
    }
    return labels, {GPU: "4"}


@contextmanager
def memory_nodes(
    api: kubernetes.client.ApiClient, backend: str, namespace: str
) -> Iterator[dict[str, str]]:
    """An H200 node on driver 615, one on 580 and an L4 on 615 (GKE: two H200 pools), each
    sharing its GPU 4 ways, by role; deleted afterwards."""
    clear_unscheduled_pods(api, namespace)
    run = uuid.uuid4().hex[:6]
    roles = {"h200-615": H200_615, "h200-580": H200_580, "l4-615": L4_615}
    if backend == "gke":
        roles = {"h200-615": {}, "h200-580": {}}
    names = {role: f"mem-{backend}-{role}-{run}" for role in roles}
    manifests = [shaped_node(names[r], *sharing_side(backend, gfd, r)) for r, gfd in roles.items()]
    for manifest in manifests:
        manifest["status"]["nodeInfo"] = dict(NODE_INFO)
    create_shaped_nodes(api, manifests)
    try:
        yield names
    finally:
        delete_nodes(api, list(names.values()))


@pytest.fixture(scope="module", params=sorted(BACKEND_SETTINGS))
def backend(
    request: pytest.FixtureRequest, module_castslice: StartServer, api: kubernetes.client.ApiClient
) -> str:
    name: str = request.param
    register_and_wait(api, module_castslice({**BACKEND_SETTINGS[name], **SETTINGS}))
    return name


def test_fractional_pods_carry_their_share_of_their_nodes_gpu_and_only_where_it_holds(
    api: kubernetes.client.ApiClient, namespace: str, backend: str
) -> None:
    lifted = gpu_container("app", env=[{"name": LIMIT, "value": "999999"}])
    manifests = [pod(f"dev-{n}", [gpu_container("app")], annotations=opted_in()) for n in range(5)]
    manifests.append(pod("lifted", [lifted], annotations=opted_in()))
    # Not opted in; asks for the GPU resource as it is, with a limit of its own.
    plain = pod("plain", [gpu_container("app", env=[{"name": LIMIT, "value": "999999"}])])

    with memory_nodes(api, backend, namespace) as nodes:
        warnings = {}
        for manifest in manifests:
            _, warnings[manifest["metadata"]["name"]] = create_pod(api, namespace, manifest)
        create_pod(api, namespace, plain)
        # nvidia and resource: only the H200 on 615 enforces, 4 clients, and no node offers
        # the plain Pod a whole GPU; gke: both pools take every Pod.
        runs = len(manifests) + 1 if backend == "gke" else 4
        waits = len(manifests) + 1 - runs
        # The plain Pod's whole GPU is refused as the cluster serves plain nvidia.com/gpu:
        # by the device plugin's count, or, once a DRA DeviceClass maps the name
        # (extendedResourceName, as the DRA tests' driver class does), by the allocator.
        up, left = settle(
            api,
            namespace,
            runs=runs,
            waits=waits,
            no_room=("Insufficient", "cannot allocate all claims"),
            timeout=_TIMEOUT,
        )

    for stored in up + left:
        if stored["metadata"]["name"] != "plain":
            assert env_of(stored) == {REQUEST: QUARTER, LIMIT: QUARTER}
    by_name = {p["metadata"]["name"]: p for p in up + left}
    # The Pod's own 999999 is gone: CastSlice's value stands where it stood.
    assert by_name["lifted"]["spec"]["containers"][0]["env"] == [
        {"name": LIMIT, "value": QUARTER},
        {"name": REQUEST, "value": QUARTER},
    ]
    # A Pod that did not opt in is stored exactly as written.
    stored_plain = read_pod(api, namespace, "plain")
    assert stored_plain["spec"]["containers"][0]["env"] == [{"name": LIMIT, "value": "999999"}]
    assert stored_plain["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "100m", GPU: "1"},
        "limits": {GPU: "1"},
    }
    assert APPLIED not in (stored_plain["metadata"].get("annotations") or {})
    assert "affinity" not in stored_plain["spec"]

    placed_on = {p["spec"]["nodeName"] for p in up}
    if backend == "gke":
        assert placed_on == {nodes["h200-615"], nodes["h200-580"]}
        assert "not enforced" in " ".join(warnings["dev-0"])
        return
    # Every fractional Pod runs where the driver enforces its limits, on the GPU whose
    # memory its numbers were worked out for; the rest wait rather than go elsewhere.
    assert placed_on == {nodes["h200-615"]}
    waiting = [p for p in left if p["metadata"]["name"] != "plain"]
    assert len(waiting) == 2
    for stored in waiting:
        message = unschedulable(stored) or ""
        assert "didn't match Pod's node affinity/selector" in message, message
    assert warnings["dev-0"] == [
        f"{backend}: memory limited to {QUARTER} MiB by the driver ({QUARTER} MiB guaranteed)"
    ]


def test_doctor_names_the_nodes_that_enforce_the_limits_and_why_the_others_do_not(
    api: kubernetes.client.ApiClient, control_plane: LocalControlPlane, namespace: str
) -> None:
    env = {**BACKEND_SETTINGS["nvidia"], **SETTINGS}
    with memory_nodes(api, "nvidia", namespace) as nodes:
        done = run_castslice(env, "doctor", "--kubeconfig", str(control_plane.kubeconfig))

    (line,) = [line for line in done.stdout.splitlines() if "GPU memory limits" in line]
    assert line == (
        f"✓ 1 GPU node can enforce GPU memory limits (driver 615+ with GPUs of at least "
        f"{H200_MIB} MiB: {nodes['h200-615']}); not: {nodes['h200-580']} (driver 580.159.04, "
        f"before 615); {nodes['l4-615']} (GPUs of {L4_MIB} MiB, less than CASTSLICE_GPU_MEMORY); "
        "Pods given limits are kept off the others; cgroup v2 (kubelet v1.35+ refuses cgroup v1 "
        f"by default) on {nodes['h200-615']}; no dmem, the driver's own backend (kernel "
        f"6.8.0-1015-gcp, before 6.14) on {nodes['h200-615']}"
    )
