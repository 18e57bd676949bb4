"""For backends that claim devices (DRA): whether any node publishes devices to share.

A device can be shared by claims when its driver publishes it with
`allowMultipleAllocations` and the capacity CastSlice's claims ask for
(the NVIDIA DRA driver's `--consumable-shares=S`).
"""

from __future__ import annotations

from collections.abc import Sequence

from castslice.backends.dra.claim_templates import API_VERSION, SHARED_TAINT, memory_quantity
from castslice.contract import Manifest
from castslice.contract.cluster import ApiError, Cluster
from castslice.contract.findings import Result, failed, passed, warning
from castslice.settings.config import Config

CHECK = "devices"
GUARD_CHECK = "extended resource guard"
_API = f"/apis/{API_VERSION}"
# Taint effects that keep a claim without the toleration from being allocated the device.
_KEEPING_EFFECTS = ("NoSchedule", "NoExecute")
LISTED = 5
TAINT_RULE_FIX = (
    "kubectl apply -f infra/gpu-sharing/dra/device-taint-rule.yaml (a DeviceTaintRule "
    f"tainting the driver's devices {SHARED_TAINT}, which CastSlice's templates tolerate)"
)


def setup_hint(config: Config) -> str:
    return (
        "install the NVIDIA DRA driver with featureGates.ConsumableShares=true and "
        f"consumableShares={config.slices_per_gpu} (infra/gpu-sharing/dra/), or set "
        "CASTSLICE_DRA_CAPACITY to the capacity your driver publishes"
    )


def check_devices(cluster: Cluster, config: Config) -> Result:
    try:
        device_class: Manifest | None = cluster.get(
            f"{_API}/deviceclasses/{config.dra_device_class}"
        )
    except ApiError as error:
        if error.status != 404:
            raise
        device_class = None
    return assess_devices(config, device_class, list(cluster.list(f"{_API}/resourceslices")))


def assess_devices(
    config: Config, device_class: Manifest | None, slices: Sequence[Manifest]
) -> Result:
    per_gpu = config.slices_per_gpu
    fix = setup_hint(config)
    if device_class is None:
        return failed(
            CHECK,
            f"no DeviceClass {config.dra_device_class}: every claim CastSlice makes names it",
            f"{fix}; or set CASTSLICE_DRA_DEVICE_CLASS to the class your driver ships",
        )
    nodes: set[str] = set()
    shareable = 0
    other_sizes: set[str] = set()
    smaller_memory: set[str] = set()
    for resource_slice in slices:
        spec = resource_slice.get("spec") or {}
        for device in spec.get("devices") or ():
            capacity = (device.get("capacity") or {}).get(config.dra_capacity)
            if not device.get("allowMultipleAllocations") or capacity is None:
                continue
            shareable += 1
            nodes.add(spec.get("nodeName") or (spec.get("pool") or {}).get("name") or "")
            value = str(capacity.get("value"))
            if _quantity(value) != per_gpu:
                other_sizes.add(value)
            memory = str(((device.get("capacity") or {}).get("memory") or {}).get("value"))
            size = _quantity(memory)
            if (
                config.dra_gpu_memory is not None
                and size is not None
                and size < config.dra_gpu_memory
            ):
                smaller_memory.add(memory)
    if not shareable:
        return failed(
            CHECK,
            f"no ResourceSlice publishes a shareable device with a {config.dra_capacity} "
            "capacity: opted-in Pods stay Pending",
            fix,
        )
    message = (
        f"{shareable} shareable device{'s' if shareable != 1 else ''} with "
        f"{config.dra_capacity} on {len(nodes)} node{'s' if len(nodes) != 1 else ''}"
    )
    if other_sizes:
        return warning(
            CHECK,
            f"{message}; some publish {config.dra_capacity} {', '.join(sorted(other_sizes))}, "
            f"not {per_gpu} (CASTSLICE_SLICES_PER_GPU), so a share is not s/{per_gpu} of them",
            f"publish {per_gpu} {config.dra_capacity} per device or set "
            "CASTSLICE_SLICES_PER_GPU to what the devices publish",
        )
    if smaller_memory and config.dra_gpu_memory is not None:
        return warning(
            CHECK,
            f"{message}; some publish memory {', '.join(sorted(smaller_memory))}, less than "
            f"CASTSLICE_DRA_GPU_MEMORY {memory_quantity(config.dra_gpu_memory)}, so claims "
            "of the last shares ask for more memory than is left and stay Pending",
            "set CASTSLICE_DRA_GPU_MEMORY to the smallest memory the devices publish "
            "(kubectl get resourceslices -o yaml), or unset it",
        )
    if config.sharing_strategy == "mps":
        return warning(
            CHECK,
            f"{message}; CASTSLICE_SHARING_STRATEGY is mps, but the NVIDIA DRA driver refuses "
            "MPS with consumable shares",
            "devices shared by consumable capacity are time-sliced; unset "
            "CASTSLICE_SHARING_STRATEGY",
        )
    return passed(CHECK, message)


def _quantity(value: str) -> float | None:
    # Imported by doctor's check alone: the webhook loads this module with its backend, and
    # the client's import would double its start.
    from kubernetes.utils import parse_quantity

    try:
        return float(parse_quantity(value))
    except ValueError:
        return None


def check_guard(cluster: Cluster, config: Config) -> Result:
    classes = list(cluster.list(f"{_API}/deviceclasses"))
    slices = list(cluster.list(f"{_API}/resourceslices"))
    try:
        rules = list(cluster.list(f"{_API}/devicetaintrules"))
    except ApiError as error:
        # Before Kubernetes 1.37 the API server may not serve DeviceTaintRules at v1.
        if error.status != 404:
            raise
        rules = []
    nodes = list(cluster.list("/api/v1/nodes"))
    return assess_guard(classes, slices, rules, nodes, config.gpu_resource)


def assess_guard(
    classes: Sequence[Manifest],
    slices: Sequence[Manifest],
    rules: Sequence[Manifest],
    nodes: Sequence[Manifest] = (),
    gpu_resource: str = "nvidia.com/gpu",
) -> Result:
    """Whether a Pod that never opted in can be given a share of a device through a
    DeviceClass's `extendedResourceName` (KEP-5004): the scheduler's claim for it asks for
    no capacity, so it takes the capacity's default, and tolerates no device taint.

    Any class with an extended resource counts as reaching every shareable device: its
    selectors are CEL that only the API server evaluates.
    """
    mapped = sorted(
        f"{(c.get('metadata') or {}).get('name')} ({(c.get('spec') or {})['extendedResourceName']})"
        for c in classes
        if (c.get("spec") or {}).get("extendedResourceName")
    )
    unguarded: list[str] = []
    guarded = 0
    sharing_nodes: set[str] = set()
    for resource_slice in slices:
        spec = resource_slice.get("spec") or {}
        if any(d.get("allowMultipleAllocations") for d in spec.get("devices") or ()):
            sharing_nodes.add(spec.get("nodeName") or "")
        driver = spec.get("driver") or ""
        pool = (spec.get("pool") or {}).get("name") or ""
        for device in spec.get("devices") or ():
            if not device.get("allowMultipleAllocations"):
                continue
            name = device.get("name") or ""
            if _keeps_off(device.get("taints") or ()) or any(
                _rule_taints(rule, driver, pool, name) for rule in rules
            ):
                guarded += 1
            else:
                unguarded.append(f"{pool}/{name}")
    plugged = sorted(
        name
        for node in nodes
        if (name := (node.get("metadata") or {}).get("name") or "") in sharing_nodes
        and _quantity(
            str(((node.get("status") or {}).get("allocatable") or {}).get(gpu_resource, 0))
        )
    )
    if plugged:
        return failed(
            GUARD_CHECK,
            f"{'node' if len(plugged) == 1 else 'nodes'} {', '.join(plugged[:LISTED])} "
            f"{'advertises' if len(plugged) == 1 else 'advertise'} "
            f"{gpu_resource} from a device plugin beside shareable devices: the plugin "
            "hands a Pod that never opted in a GPU that claims share",
            "turn the classic NVIDIA device plugin off on the DRA nodes (GPU Operator: "
            "devicePlugin.enabled=false)",
        )
    if not mapped:
        return passed(
            GUARD_CHECK,
            "no DeviceClass maps an extended resource to devices: only claims reach them",
        )
    if unguarded:
        listed = ", ".join(unguarded[:LISTED]) + (" ..." if len(unguarded) > LISTED else "")
        return failed(
            GUARD_CHECK,
            f"{len(unguarded)} shareable device{'s' if len(unguarded) != 1 else ''} ({listed}) "
            f"without the {SHARED_TAINT} taint, reachable through DeviceClass "
            f"{', '.join(mapped)}: a Pod that never opted in and asks for that resource gets "
            "a claim of one share and shares the GPU",
            TAINT_RULE_FIX,
        )
    if not guarded:
        return passed(GUARD_CHECK, "no shareable device: nothing to guard")
    return passed(
        GUARD_CHECK,
        f"{guarded} shareable device{'s' if guarded != 1 else ''} tainted {SHARED_TAINT}: a "
        f"Pod asking for {', '.join(mapped)} without opting in gets none of them (it stays "
        "Pending: cannot allocate all claims)",
    )


def _keeps_off(taints: Sequence[Manifest]) -> bool:
    return any(
        taint.get("key") == SHARED_TAINT and taint.get("effect") in _KEEPING_EFFECTS
        for taint in taints
    )


def _rule_taints(rule: Manifest, driver: str, pool: str, device: str) -> bool:
    spec = rule.get("spec") or {}
    selector = spec.get("deviceSelector")
    if selector is None or not _keeps_off([spec.get("taint") or {}]):
        # Without a selector a rule selects no device.
        return False
    return all(
        selector.get(field) in (None, value)
        for field, value in (("driver", driver), ("pool", pool), ("device", device))
    )
