"""For backends that claim devices (DRA): whether any node publishes devices to share.

A device can be shared by claims when its driver publishes it with
`allowMultipleAllocations` and the capacity CastSlice's claims ask for
(the NVIDIA DRA driver's `--consumable-shares=S`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from castslice.backends.dra.claim_templates import API_VERSION
from castslice.contract.cluster import ApiError, Cluster
from castslice.contract.findings import Result, failed, passed, warning
from castslice.settings.config import Config

Manifest = dict[str, Any]

CHECK = "devices"
_API = f"/apis/{API_VERSION}"


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
