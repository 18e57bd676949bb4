"""`castslice doctor`'s GPU memory check: which GPU nodes enforce the limits CastSlice writes
and why the others do not, from GPU Feature Discovery's labels (v0.20.0's newVersionLabeler
and resource labeler, tests/upstream/) and the GPU Operator's ClusterPolicy.

The floor (driver 615) is tied to a real node: tests/upstream/h200-sxm-driver-580/ is one
NVIDIA H200 on driver 580.159.04, its `nvidia-smi` query and every `nvml*` symbol its
libnvidia-ml exports.

What the kubelet reports of its host (`status.nodeInfo`) comes from Kubernetes' own example
Node (tests/upstream/kubernetes-v1.35.0-node-example/) and, for a kernel with dmem, the
same H200 node's `uname -r` (tests/upstream/h200-sxm-driver-580/host.txt, on cgroup v2)."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path
from typing import Any

import pytest

from castslice.contract.findings import Status
from castslice.environment import load_config
from castslice.inspect.doctor import gpu_memory

Manifest = dict[str, Any]

UPSTREAM = Path(__file__).parent / "upstream"
DRIVER_580 = UPSTREAM / "h200-sxm-driver-580"
NODE_EXAMPLE = json.loads(
    (UPSTREAM / "kubernetes-v1.35.0-node-example" / "node_example.json").read_text()
)
# `uname -r` and `stat -fc %T /sys/fs/cgroup` on the H200 node.
_, H200_KERNEL, H200_CGROUP_FS, _ = (DRIVER_580 / "host.txt").read_text().splitlines()

SETTINGS = {"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_GPU_MEMORY": "143771Mi"}


def node(
    name: str,
    driver: str | None,
    memory: int | None,
    ready: bool = True,
    kubelet: str = "v1.35.0",
    kernel: str = "6.8.0-1015-gcp",
) -> Manifest:
    labels = {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    if driver is not None:
        labels["nvidia.com/cuda.driver-version.major"] = driver.split(".")[0]
        labels["nvidia.com/cuda.driver-version.full"] = driver
    if memory is not None:
        labels["nvidia.com/gpu.memory"] = str(memory)
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu.shared": "4"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "nodeInfo": {
                **NODE_EXAMPLE["status"]["nodeInfo"],
                "kubeletVersion": kubelet,
                "kernelVersion": kernel,
            },
        },
    }


CPU_NODE = {
    "metadata": {"name": "cpu", "labels": {}},
    "status": {"allocatable": {"cpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
}
H200_615 = node("h200-615", "615.20.03", 143771)
H200_580 = node("h200-580", "580.159.04", 143771)
L4_615 = node("l4-615", "615.20.03", 23034)
UNLABELLED = node("bare", None, None)


def test_names_the_nodes_that_enforce_and_why_the_others_do_not() -> None:
    nodes = [
        H200_615,
        H200_580,
        L4_615,
        UNLABELLED,
        CPU_NODE,
        node("down", "615.1.2", 143771, ready=False),
    ]

    result = gpu_memory.assess(load_config(SETTINGS), nodes, [])

    assert result.status is Status.OK
    assert result.message == (
        "1 GPU node can enforce GPU memory limits (driver 615+ with GPUs of at least 143771 "
        "MiB: h200-615); not: h200-580 (driver 580.159.04, before 615); l4-615 (GPUs of 23034 "
        "MiB, less than CASTSLICE_GPU_MEMORY); bare (no nvidia.com/cuda.driver-version.major "
        "label: GPU Feature Discovery does not label it); Pods given limits are kept off the "
        "others; cgroup v2 (kubelet v1.35+ refuses cgroup v1 by default) on h200-615; no dmem, "
        "the driver's own backend (kernel 6.8.0-1015-gcp, before 6.14) on h200-615"
    )


def test_fails_when_no_node_enforces_because_every_fractional_pod_would_wait() -> None:
    result = gpu_memory.assess(load_config(SETTINGS), [H200_580, L4_615], [])

    assert result.status is Status.FAILED
    assert result.message.startswith("no GPU nodes can enforce GPU memory limits")
    assert "every Pod given GPU memory limits stays Pending" in result.message
    assert "driver.version=615.<patch>" in result.fix


def test_warns_when_pods_may_land_where_the_hook_would_fail_their_containers() -> None:
    config = load_config({**SETTINGS, "CASTSLICE_GPU_MEMORY_ENFORCED_ONLY": "false"})

    result = gpu_memory.assess(config, [H200_615, H200_580], [])

    assert result.status is Status.WARNING
    assert "h200-580 (driver 580.159.04, before 615)" in result.message
    assert "fails their containers" in result.message
    assert result.fix.startswith("set CASTSLICE_GPU_MEMORY_ENFORCED_ONLY=true")


def test_a_gpu_operator_whose_toolkit_has_no_hook_fails() -> None:
    policy = {"spec": {"toolkit": {"version": "v1.19.0-ubuntu20.04"}}}

    result = gpu_memory.assess(load_config(SETTINGS), [H200_615], [policy])

    assert result.status is Status.FAILED
    assert "toolkit v1.19.0-ubuntu20.04, which has no apply-cuda-memory-limits hook" in (
        result.message
    )


def test_a_gpu_operator_with_the_hook_adds_nothing() -> None:
    policy = {"spec": {"toolkit": {"version": "v1.20.1-ubuntu20.04"}}}

    result = gpu_memory.assess(load_config(SETTINGS), [H200_615], [policy])

    assert result.status is Status.OK


def test_on_gke_it_says_the_limits_are_not_enforced() -> None:
    config = load_config({**SETTINGS, "CASTSLICE_BACKEND": "gke"})

    result = gpu_memory.assess(config, [H200_615], [])

    assert result.status is Status.WARNING
    assert result.message == (
        "GPU memory limits are written, not enforced: GKE runs no nvidia-container-toolkit hook"
    )


def test_a_real_h200_on_driver_580_has_no_memory_limit_call_and_is_not_enforcing() -> None:
    (gpu,) = csv.DictReader((DRIVER_580 / "query.csv").open(), skipinitialspace=True)
    symbols = (DRIVER_580 / "nvml-all-symbols.txt").read_text().split()
    version = gpu["driver_version"]
    # GPU Feature Discovery's labels of this node: newVersionLabeler splits the driver's
    # version on dots; gpu.memory is NVML's total memory in MiB.
    major, minor, revision = version.split(".")
    labels = {
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": revision,
        "nvidia.com/cuda.driver-version.full": version,
        "nvidia.com/gpu.memory": gpu["memory.total [MiB]"].removesuffix(" MiB"),
        "nvidia.com/gpu.product": gpu["name"].replace(" ", "-"),
    }
    captured = node("h200-580-captured", None, None)
    captured["metadata"]["labels"].update(labels)

    result = gpu_memory.assess(load_config(SETTINGS), [captured], [])

    assert len(symbols) == 404 and "nvmlDeviceGetMemoryInfo" in symbols
    assert not [name for name in symbols if "MemoryLimit" in name]
    assert result.status is Status.FAILED
    assert result.message.startswith(
        "no GPU nodes can enforce GPU memory limits (driver 615+ with GPUs of at least 143771 "
        "MiB); not: h200-580-captured (driver 580.159.04, before 615)"
    )


def labelled_like_h200_615(manifest: Manifest) -> Manifest:
    """`manifest` as GPU Feature Discovery labels an H200 on driver 615."""
    labelled = copy.deepcopy(manifest)
    labelled["metadata"]["labels"] = H200_615["metadata"]["labels"]
    return labelled


def test_kubernetes_example_node_has_neither_fact_by_its_versions() -> None:
    example = labelled_like_h200_615(NODE_EXAMPLE)

    result = gpu_memory.assess(load_config(SETTINGS), [example], [])

    assert result.status is Status.OK
    assert result.message.endswith(
        "; cgroup version unknown to doctor (kubelet before v1.35) on e2e-test-wojtekt-node-etd6"
        "; no dmem, the driver's own backend (kernel 3.16.0-0.bpo.4-amd64, before 6.14) on "
        "e2e-test-wojtekt-node-etd6"
    )


def test_says_per_node_what_its_kubelet_and_kernel_tell_of_cgroup_v2_and_dmem() -> None:
    nodes = [
        node("gke-a", "615.20.03", 143771, kubelet="v1.35.0-gke.1795000"),
        node("gke-b", "615.20.03", 143771, kubelet="v1.35.0-gke.1795000"),
        node("h200-host", "615.20.03", 143771, kubelet="v1.34.4", kernel=H200_KERNEL),
        node("h200-580", "580.159.04", 143771, kernel=H200_KERNEL),
    ]

    result = gpu_memory.assess(load_config(SETTINGS), nodes, [])

    assert H200_CGROUP_FS == "cgroup2fs"
    assert result.status is Status.OK
    assert result.message.endswith(
        "Pods given limits are kept off the others"
        "; cgroup v2 (kubelet v1.35+ refuses cgroup v1 by default) on gke-a, gke-b"
        "; cgroup version unknown to doctor (kubelet before v1.35) on h200-host"
        "; no dmem, the driver's own backend (kernel 6.8.0-1015-gcp, before 6.14) on gke-a, gke-b"
        "; dmem (kernel 6.18.44-fc-v1252-gpu, 6.14+) on h200-host"
    )


@pytest.mark.parametrize(
    ("kubelet", "cgroup"),
    [
        ("v1.35.0", "cgroup v2 (kubelet v1.35+ refuses cgroup v1 by default)"),
        ("v1.37.2+k3s1", "cgroup v2 (kubelet v1.35+ refuses cgroup v1 by default)"),
        ("v1.34.4", "cgroup version unknown to doctor (kubelet before v1.35)"),
        ("v1.35.0-alpha.1", "cgroup version unknown to doctor (kubelet before v1.35)"),
        ("v1.35.1-rc.0", "cgroup v2 (kubelet v1.35+ refuses cgroup v1 by default)"),
        ("kwok-v0.7.0", "cgroup version unknown to doctor (kubelet kwok-v0.7.0)"),
    ],
)
def test_only_a_kubelet_from_v1_35_proves_cgroup_v2(kubelet: str, cgroup: str) -> None:
    result = gpu_memory.assess(
        load_config(SETTINGS), [node("n", "615.20.03", 143771, kubelet=kubelet)], []
    )

    assert f"; {cgroup} on n;" in result.message


@pytest.mark.parametrize(
    ("kernel", "dmem"),
    [
        ("6.14.0-1007-aws", "dmem (kernel 6.14.0-1007-aws, 6.14+)"),
        ("6.13.12", "no dmem, the driver's own backend (kernel 6.13.12, before 6.14)"),
        (
            "5.15.0-1057-aws",
            "no dmem, the driver's own backend (kernel 5.15.0-1057-aws, before 6.14)",
        ),
        ("", "dmem unknown (kernel version not reported)"),
    ],
)
def test_the_kernel_from_6_14_has_the_dmem_controller(kernel: str, dmem: str) -> None:
    result = gpu_memory.assess(
        load_config(SETTINGS), [node("n", "615.20.03", 143771, kernel=kernel)], []
    )

    assert result.message.endswith(f"; {dmem} on n")


def test_when_pods_may_land_anywhere_it_still_says_the_enforcing_nodes_facts() -> None:
    config = load_config({**SETTINGS, "CASTSLICE_GPU_MEMORY_ENFORCED_ONLY": "false"})

    result = gpu_memory.assess(config, [H200_615, H200_580], [])

    assert result.status is Status.WARNING
    assert result.message.endswith(
        "fails their containers; cgroup v2 (kubelet v1.35+ refuses cgroup v1 by default) on "
        "h200-615; no dmem, the driver's own backend (kernel 6.8.0-1015-gcp, before 6.14) on "
        "h200-615"
    )
