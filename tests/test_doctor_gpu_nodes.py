"""`castslice doctor`'s GPU node setup check and the likely causes it adds on GKE.

Nodes are shaped as the API server returns them, with the labels and
resources GKE, the NVIDIA device plugin and GPU Feature Discovery give them
(tests/e2e/nodes.py says where each comes from). The live behaviour is proven
in tests/e2e/test_doctor.py.
"""

from __future__ import annotations

import pytest

from castslice.contract import Manifest
from castslice.contract.findings import Status, failed, passed
from castslice.environment import load_config
from castslice.inspect.doctor import gpu_nodes, likely_cause

GKE_STRATEGY = "cloud.google.com/gke-gpu-sharing-strategy"
GKE_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"
GKE_PARTITION = "cloud.google.com/gke-gpu-partition-size"
REPLICAS = "nvidia.com/gpu.replicas"
NVIDIA_STRATEGY = "nvidia.com/gpu.sharing-strategy"
PODS = "pods.castslice.castops.io"


def node(
    name: str, labels: dict[str, str], allocatable: dict[str, str], ready: bool = True
) -> Manifest:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def gke_sharing(name: str, degree: int) -> Manifest:
    return node(
        name,
        {GKE_STRATEGY: "time-sharing", GKE_CLIENTS: str(degree)},
        {"nvidia.com/gpu": str(degree)},
    )


GKE_PLAIN = node("gke-plain", {"cloud.google.com/gke-nodepool": "whole"}, {"nvidia.com/gpu": "1"})
NVIDIA_PLAIN = node("nv-plain", {REPLICAS: "1", NVIDIA_STRATEGY: "none"}, {"nvidia.com/gpu": "1"})


def nvidia_sharing(name: str, degree: int, *, renamed: bool) -> Manifest:
    resource = "nvidia.com/gpu.shared" if renamed else "nvidia.com/gpu"
    labels = {REPLICAS: str(degree), NVIDIA_STRATEGY: "time-slicing"}
    return node(name, labels, {resource: str(degree)})


def test_gke_with_only_sharing_pools_fails_naming_the_presets_that_get_whole_gpus() -> None:
    result = gpu_nodes.assess(load_config({"CASTSLICE_BACKEND": "gke"}), [gke_sharing("s4", 4)])
    assert result.status is Status.FAILED
    assert result.message == (
        "GPU nodes: no Ready node offers nvidia.com/gpu without GPU sharing (no "
        f"{GKE_STRATEGY} label, no {GKE_PARTITION} label): Pods of 2 slices or more "
        "(presets training, batch, inference) stay Pending"
    )
    assert result.fix.startswith("add a GPU node pool without GPU sharing (gcloud container")


def test_gke_with_a_pool_without_sharing_passes() -> None:
    config = load_config({"CASTSLICE_BACKEND": "gke"})
    result = gpu_nodes.assess(config, [gke_sharing("s4", 4), GKE_PLAIN])
    assert result == passed(
        gpu_nodes.CHECK,
        "GPU nodes: 1 node offers nvidia.com/gpu without GPU sharing (no "
        f"{GKE_STRATEGY} label, no {GKE_PARTITION} label) for Pods of 2 slices or more "
        "(presets training, batch, inference)",
    )


def test_a_plain_node_that_is_not_ready_does_not_count() -> None:
    not_ready = node("down", {}, {"nvidia.com/gpu": "1"}, ready=False)
    result = gpu_nodes.assess(load_config({"CASTSLICE_BACKEND": "gke"}), [not_ready])
    assert result.status is Status.FAILED


def test_degrees_that_fit_more_presets_leave_fewer_stuck_and_the_default_is_named() -> None:
    config = load_config(
        {
            "CASTSLICE_BACKEND": "nvidia",
            "CASTSLICE_SHARING_DEGREES": "2,4",
            "CASTSLICE_DEFAULT_SLICES": "3",
        }
    )
    result = gpu_nodes.assess(config, [nvidia_sharing("n4", 4, renamed=True)])
    assert result.message == (
        "GPU nodes: no Ready node offers nvidia.com/gpu without GPU sharing "
        f"({NVIDIA_STRATEGY}=none): Pods of 3 slices or more (preset training; the default "
        "of 3 slices) stay Pending"
    )
    assert "whole-gpu entry" in result.fix


def test_a_gpu_operator_time_slicing_without_renaming_is_named_with_the_fix() -> None:
    config = load_config({"CASTSLICE_BACKEND": "nvidia"})
    nodes = [nvidia_sharing(f"old-{index}", 4, renamed=False) for index in range(4)]
    result = gpu_nodes.assess(config, [*nodes, NVIDIA_PLAIN])
    assert result.status is Status.FAILED
    assert result.message == (
        "GPU nodes: 4 nodes (old-0, old-1, old-2 …) with nvidia.com/gpu.replicas=4 and no "
        "nvidia.com/gpu.shared: time-slicing with renameByDefault: false, so nvidia.com/gpu "
        "counts replicas; shared Pods the nvidia backend selects them for stay Pending"
    )
    assert result.fix.startswith("set renameByDefault: true in those nodes' device plugin config")


def test_renamed_sharing_nodes_and_plain_nodes_pass_on_nvidia() -> None:
    config = load_config({"CASTSLICE_BACKEND": "nvidia"})
    result = gpu_nodes.assess(config, [nvidia_sharing("n4", 4, renamed=True), NVIDIA_PLAIN])
    assert result.status is Status.OK
    assert result.message.startswith("GPU nodes: 1 node offers nvidia.com/gpu without GPU sharing")


def test_the_resource_backend_needs_no_nodes_of_its_own_for_whole_gpus() -> None:
    result = gpu_nodes.assess(load_config({}), [node("r", {}, {"nvidia.com/gpu-shared": "4"})])
    assert result == passed(
        gpu_nodes.CHECK, "GPU nodes: whole-GPU Pods ask for nvidia.com/gpu-shared like the others"
    )


# --- the likely cause on GKE --------------------------------------------------------------


def live(client_config: Manifest) -> Manifest:
    return {"webhooks": [{"name": PODS, "clientConfig": client_config}]}


SERVICE = {"service": {"namespace": "castslice", "name": "castslice", "port": 443}}
URL = {"url": "https://castslice-abc.a.run.app/token"}
UNREACHABLE = failed("endpoint", "endpoint Service castslice/castslice fails", "check the Service")


@pytest.mark.parametrize(
    ("client_config", "cause"),
    [
        (SERVICE, "on a private GKE cluster, allow TCP 8443 from the control plane's address"),
        (URL, "on GKE, the control plane's egress must allow the URL"),
    ],
)
def test_a_failing_endpoint_on_gke_gets_the_platforms_likely_cause(
    client_config: Manifest, cause: str
) -> None:
    add = likely_cause.for_endpoint(
        load_config({"CASTSLICE_BACKEND": "gke"}), live(client_config), [PODS]
    )
    result = add(UNREACHABLE)
    assert result.fix.startswith("check the Service; " + cause)
    assert result.fix.endswith("(docs/deploy.md#gke-network-prerequisites)")
    assert (result.check, result.status, result.message) == (
        UNREACHABLE.check,
        UNREACHABLE.status,
        UNREACHABLE.message,
    )


def test_passing_checks_other_backends_and_mismatched_dry_runs_get_no_cause() -> None:
    gke = likely_cause.for_endpoint(
        load_config({"CASTSLICE_BACKEND": "gke"}), live(SERVICE), [PODS]
    )
    ok = passed("endpoint", "endpoint answers")
    assert gke(ok) is ok
    mismatch = failed("dry-run", "an opted-in GPU Pod came back not as expected", "run it")
    assert gke(mismatch) is mismatch
    unchanged = failed(
        "dry-run", "came back unchanged: CastSlice was not called or failed open", "x"
    )
    assert "private GKE cluster" in gke(unchanged).fix
    nvidia = likely_cause.for_endpoint(
        load_config({"CASTSLICE_BACKEND": "nvidia"}), live(SERVICE), [PODS]
    )
    assert nvidia(UNREACHABLE) is UNREACHABLE
    unregistered = likely_cause.for_endpoint(
        load_config({"CASTSLICE_BACKEND": "gke"}), None, [PODS]
    )
    assert unregistered(UNREACHABLE) is UNREACHABLE


def test_nodes_labelled_mps_whose_devices_are_not_configured_for_mps_are_named() -> None:
    config = load_config({"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_SHARING_STRATEGY": "mps"})
    labels = {REPLICAS: "4", NVIDIA_STRATEGY: "mps", "nvidia.com/mps.capable": "false"}
    broken = node("no-daemon", labels, {"nvidia.com/gpu.shared": "4"})
    working = node(
        "mps", {**labels, "nvidia.com/mps.capable": "true"}, {"nvidia.com/gpu.shared": "4"}
    )
    from castslice.inspect.doctor import capacity

    result = capacity.assess(config, [broken, working, NVIDIA_PLAIN], [])
    assert result.status is Status.FAILED
    assert result.message == (
        "node no-daemon: nvidia.com/gpu.sharing-strategy=mps but nvidia.com/mps.capable=false: "
        "the MPS control daemon does not run there, so no client's memory is limited"
    )
    assert capacity.assess(config, [working, NVIDIA_PLAIN], []).status is not Status.FAILED
