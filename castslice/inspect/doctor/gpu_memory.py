"""Check: with CASTSLICE_GPU_MEMORY, which GPU nodes enforce the memory limits CastSlice
writes, and why the others do not.

A node enforces them with a driver of branch 615 or later (NVML SetMemoryLimits_v1), whose
GPUs have at least the memory the limits were worked out for, on cgroup v2, with a GPU CDI
spec from nvidia-container-toolkit 1.20.1 or later (its apply-cuda-memory-limits hook).
GPU Feature Discovery's labels say the first two; the GPU Operator's ClusterPolicy, where
there is one, names the toolkit. No object the API server serves names a node's cgroup
version, but the kubelet's version bounds it: from v1.35 the kubelet refuses to start on
cgroup v1 unless told not to. The kernel's version says whether its dmem controller can hold
the hard limit, or the driver its own backend. Where the hook runs and cannot apply the
limits (cgroup v1, an older driver) it fails the container, which is why
CASTSLICE_GPU_MEMORY_ENFORCED_ONLY keeps Pods off such nodes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from castslice.backends import placer_for
from castslice.backends.placer import DRIVER_MAJOR, ENFORCING_DRIVER, GPU_MEMORY, label_count
from castslice.contract import Manifest
from castslice.contract.cluster import ApiError, Cluster
from castslice.contract.findings import Result, failed, passed, warning
from castslice.inspect.doctor.capacity import is_usable
from castslice.settings.config import MEBIBYTE, Config

CHECK = "gpu-memory"
CLUSTER_POLICIES = "/apis/nvidia.com/v1/clusterpolicies"
# The first toolkit with the hook (its CHANGELOG, v1.20.1: "feat: add new CDI hook to set
# CUDA memory limits"); kai-gpu-fractioning asks the GPU Operator for the same.
HOOK_TOOLKIT = (1, 20, 1)
# The first kubelet whose failCgroupV1 defaults to true, so that it refuses to start on a
# cgroup v1 host (k8s.io/kubernetes v1.35.0, pkg/kubelet/apis/config/v1beta1/defaults.go;
# false in v1.34.4: tests/upstream/kubernetes-v1.34.4-v1.35.0-kubelet-fail-cgroupv1.go.txt).
CGROUP_V2_KUBELET = (1, 35)
# The first kernel with the dmem cgroup controller (commit b168ed458dde, "kernel/cgroup: Add
# "dmem" memory accounting cgroup", merged for Linux 6.14; its fixes go to stable "v6.14+").
DMEM_KERNEL = (6, 14)
_KUBELET = "v" + ".".join(map(str, CGROUP_V2_KUBELET))
_DMEM = ".".join(map(str, DMEM_KERNEL))
_NAMES_SHOWN = 3
_FIX_DRIVER = (
    f"install an NVIDIA driver of branch {ENFORCING_DRIVER} or later on the sharing nodes (GPU "
    f"Operator: driver.version={ENFORCING_DRIVER}.<patch>) with nvidia-container-toolkit "
    "1.20.1+ on cgroup v2"
)


def check_gpu_memory(cluster: Cluster, config: Config) -> Result:
    nodes = list(cluster.list("/api/v1/nodes"))
    try:
        policies = list(cluster.list(CLUSTER_POLICIES))
    except ApiError as error:
        # No GPU Operator (no such resource), or no right to read it: nothing to add.
        if error.status not in (403, 404):
            raise
        policies = []
    return assess(config, nodes, policies)


def assess(config: Config, nodes: Sequence[Manifest], policies: Sequence[Manifest]) -> Result:
    assert config.gpu_memory is not None
    unenforced = placer_for(config).memory_limits_unenforced
    if unenforced is not None:
        return warning(CHECK, f"GPU memory limits are written, not enforced: {unenforced}")
    toolkit = _old_toolkit(policies)
    if toolkit:
        return failed(
            CHECK,
            f"GPU memory limits: the GPU Operator's ClusterPolicy runs {toolkit}, which has no "
            "apply-cuda-memory-limits hook: no node applies them",
            "set the ClusterPolicy's toolkit.version to v1.20.1 or later (GPU Operator "
            "v26.7.1+ does by default)",
        )
    needed = config.gpu_memory // MEBIBYTE
    enforcing: list[str] = []
    # Per fact, the nodes it holds for: the cgroup's first, then the kernel's.
    facts: tuple[dict[str, list[str]], dict[str, list[str]]] = ({}, {})
    others: dict[str, list[str]] = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if not is_usable(node) or not _gpu_node(node, labels):
            continue
        name = str((node.get("metadata") or {}).get("name"))
        why = _not_enforcing(labels, needed)
        if why:
            others.setdefault(why, []).append(name)
        else:
            enforcing.append(name)
            for fact, holds in zip(_host_facts(node), facts, strict=True):
                holds.setdefault(fact, []).append(name)
    held = f"driver {ENFORCING_DRIVER}+ with GPUs of at least {needed} MiB"
    found = (
        f"{_count(enforcing)} GPU {_plural(len(enforcing), 'node')} can enforce GPU memory "
        f"limits ({held}{_names(enforcing)})"
    )
    if others:
        found += "; not: " + "; ".join(
            f"{_names(names, lead='')} ({why})" for why, names in others.items()
        )
    hosts = "".join(
        f"; {fact} on {_names(names, lead='')}" for holds in facts for fact, names in holds.items()
    )
    if config.gpu_memory_enforced_only:
        if not enforcing:
            return failed(
                CHECK,
                f"{found}: every Pod given GPU memory limits stays Pending (its node affinity "
                "asks for such a node)",
                f"{_FIX_DRIVER}, or set CASTSLICE_GPU_MEMORY to the GPUs' memory",
            )
        kept = "; Pods given limits are kept off the others" if others else ""
        return passed(CHECK, f"{found}{kept}{hosts}")
    if others:
        return warning(
            CHECK,
            f"{found}: CASTSLICE_GPU_MEMORY_ENFORCED_ONLY=false lets Pods given limits land "
            f"there, where the toolkit's hook, if it runs, fails their containers{hosts}",
            f"set CASTSLICE_GPU_MEMORY_ENFORCED_ONLY=true, or {_FIX_DRIVER}",
        )
    return passed(CHECK, f"{found}{hosts}")


def _gpu_node(node: Manifest, labels: Mapping[str, str]) -> bool:
    """A node GPU Feature Discovery labelled, or one that advertises an NVIDIA GPU resource."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return (
        DRIVER_MAJOR in labels
        or GPU_MEMORY in labels
        or any(key.startswith("nvidia.com/") for key in allocatable)
    )


def _not_enforcing(labels: Mapping[str, str], needed: int) -> str:
    """Why a node's labels say it does not enforce the limits, or ""."""
    major = label_count(labels.get(DRIVER_MAJOR))
    if major is None:
        return f"no {DRIVER_MAJOR} label: GPU Feature Discovery does not label it"
    if major < ENFORCING_DRIVER:
        version = labels.get("nvidia.com/cuda.driver-version.full") or str(major)
        return f"driver {version}, before {ENFORCING_DRIVER}"
    memory = label_count(labels.get(GPU_MEMORY))
    if memory is None:
        return f"no {GPU_MEMORY} label"
    if memory < needed:
        return f"GPUs of {memory} MiB, less than CASTSLICE_GPU_MEMORY"
    return ""


def _host_facts(node: Manifest) -> tuple[str, str]:
    """What the node's kubelet says of its cgroup version, and its kernel of the dmem
    controller (the driver falls back to a backend of its own without it)."""
    info = (node.get("status") or {}).get("nodeInfo") or {}
    kubelet = str(info.get("kubeletVersion") or "")
    release = _release(kubelet)
    if release and release >= CGROUP_V2_KUBELET and not _pre_release(kubelet, release):
        cgroup = f"cgroup v2 (kubelet {_KUBELET}+ refuses cgroup v1 by default)"
    elif release:
        cgroup = f"cgroup version unknown to doctor (kubelet before {_KUBELET})"
    else:
        cgroup = f"cgroup version unknown to doctor (kubelet {kubelet or 'version not reported'})"
    kernel = str(info.get("kernelVersion") or "")
    version = _release(kernel)
    if version is None:
        memory = f"dmem unknown (kernel {kernel or 'version not reported'})"
    elif version >= DMEM_KERNEL:
        memory = f"dmem (kernel {kernel}, {_DMEM}+)"
    else:
        memory = f"no dmem, the driver's own backend (kernel {kernel}, before {_DMEM})"
    return cgroup, memory


def _release(version: str) -> tuple[int, ...] | None:
    """The leading numbers of a version (v1.35.0-gke.1, 6.8.0-1015-gcp, v1.20.1-ubuntu20.04)."""
    found = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", version)
    return tuple(int(part) for part in found.groups() if part is not None) if found else None


def _pre_release(version: str, release: tuple[int, ...]) -> bool:
    """A pre-release of the first kubelet that refuses cgroup v1, which may predate it."""
    first = (*CGROUP_V2_KUBELET, 0)
    return release == first and bool(re.search(r"-(alpha|beta|rc)\b", version))


def _old_toolkit(policies: Sequence[Manifest]) -> str:
    """The toolkit a ClusterPolicy pins below the first with the hook, as "toolkit vX", or ""."""
    for policy in policies:
        version = str(((policy.get("spec") or {}).get("toolkit") or {}).get("version") or "")
        # Image tags carry a distro suffix: v1.20.1-ubuntu20.04.
        release = _release(version)
        if release and release < HOOK_TOOLKIT:
            return f"toolkit {version}"
    return ""


def _count(names: Sequence[str]) -> str:
    return str(len(names)) if names else "no"


def _plural(count: int, noun: str) -> str:
    return noun if count == 1 else f"{noun}s"


def _names(names: Sequence[str], lead: str = ": ") -> str:
    if not names:
        return ""
    more = " …" if len(names) > _NAMES_SHOWN else ""
    return lead + ", ".join(sorted(names)[:_NAMES_SHOWN]) + more
