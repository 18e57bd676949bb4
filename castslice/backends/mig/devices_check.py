"""Doctor's check for the `dra` stack: the NVIDIA DRA driver publishes a MIG device of every
profile the settings can give (`type: mig` and `profile` attributes, NVIDIA/k8s-dra-driver-gpu
v25.12.0, cmd/gpu-kubelet-plugin/deviceinfo.go), and its `mig.nvidia.com` DeviceClass exists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from castslice.backends.mig import product_names
from castslice.backends.mig.choice import Instance
from castslice.backends.mig.devices import API_VERSION, DRIVER, MIG_CLASS
from castslice.contract import Manifest
from castslice.contract.cluster import ApiError, Cluster
from castslice.contract.findings import Result, failed, passed
from castslice.settings.config import Config

CHECK = "mig devices"
RIGHTS = "get deviceclasses and list resourceslices"
_API = f"/apis/{API_VERSION}"


def published(slices: Sequence[Manifest]) -> set[tuple[str, str]]:
    """(profile, productName) of every MIG device the NVIDIA driver publishes."""
    found = set()
    for resource_slice in slices:
        spec = resource_slice.get("spec") or {}
        if spec.get("driver") != DRIVER:
            continue
        for device in spec.get("devices") or ():
            attributes = device.get("attributes") or {}
            if (attributes.get("type") or {}).get("string") != "mig":
                continue
            profile = (attributes.get("profile") or {}).get("string")
            product = (attributes.get("productName") or {}).get("string") or ""
            if profile:
                found.add((profile, product))
    return found


def assess(
    config: Config,
    needed: Sequence[tuple[list[Instance], list[int]]],
    device_class: Manifest | None,
    slices: Sequence[Manifest],
    fix: str,
) -> Result:
    if device_class is None:
        return failed(
            CHECK,
            f"no DeviceClass {MIG_CLASS}: every MIG claim CastSlice makes names it",
            "install the NVIDIA DRA driver (its chart ships the class)",
        )
    offered = published(slices)
    missing = []
    for instances, counts in needed:
        if not any(
            (i.profile.name, name) in offered for i in instances for name in i.model.nvml_names
        ):
            names = " or ".join(f"{i.model.name} {i.profile.name}" for i in instances)
            missing.append(f"no MIG device {names} is published (for {_counts(counts)})")
    by_product: dict[str, list[str]] = {}
    for profile, product in sorted(offered):
        by_product.setdefault(product, []).append(profile)
    for product, listed in by_product.items():
        unknown = product_names.unrecognised(config, product, listed, exact=True)
        if unknown is not None:
            missing.append(unknown)
    if missing:
        return failed(CHECK, "; ".join(missing), fix)
    profiles = ", ".join(sorted({profile for profile, _ in offered}))
    return passed(CHECK, f"MIG devices of {profiles} are published")


def _counts(counts: list[int]) -> str:
    if len(counts) == 1:
        return f"Pods of {counts[0]} slice{'' if counts[0] == 1 else 's'}"
    return f"Pods of {counts[0]}-{counts[-1]} slices"


def check(
    needed: Callable[[], Sequence[tuple[list[Instance], list[int]]]], fix: str
) -> Callable[[Cluster, Config], Result]:
    """The check for the instances `needed` gives, with `fix` for what is missing."""

    def run(cluster: Cluster, config: Config) -> Result:
        try:
            device_class: Manifest | None = cluster.get(f"{_API}/deviceclasses/{MIG_CLASS}")
        except ApiError as error:
            if error.status != 404:
                raise
            device_class = None
        slices = list(cluster.list(f"{_API}/resourceslices"))
        return assess(config, needed(), device_class, slices, fix)

    return run
