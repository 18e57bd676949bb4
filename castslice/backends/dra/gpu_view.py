"""Which device each claim was allocated: the one platform that names the physical GPU.

The scheduler writes a claim's allocation in its status (`status.allocation.devices
.results[]`: driver, pool, device, and for a shared device its `shareID` and the
`consumedCapacity`); the ResourceSlices say how much of that capacity each device has.
A Pod names its claims in `status.resourceClaimStatuses` (and a claim made for a plain
GPU request through a DeviceClass's extended resource name, in
`status.extendedResourceClaimStatus`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction

from castslice.backends.dra.claim_templates import API_VERSION
from castslice.backends.roles import GpuHold, GpuPlace
from castslice.contract import Manifest
from castslice.contract.cluster import Cluster
from castslice.contract.scheduling import count
from castslice.settings.config import Config

_API = f"/apis/{API_VERSION}"


class DeviceView:
    def __init__(
        self, config: Config, claims: Sequence[Manifest], slices: Sequence[Manifest]
    ) -> None:
        self._capacity = config.dra_capacity
        self._claims = {
            (claim["metadata"].get("namespace"), claim["metadata"].get("name")): claim
            for claim in claims
        }
        # driver/pool/device -> (node, units of the capacity it offers)
        self._devices: dict[str, tuple[str, int]] = {}
        for resource_slice in slices:
            spec = resource_slice.get("spec") or {}
            pool = (spec.get("pool") or {}).get("name") or ""
            for device in spec.get("devices") or ():
                offered = (device.get("capacity") or {}).get(self._capacity) or {}
                key = _device_key(spec.get("driver") or "", pool, device.get("name") or "")
                self._devices[key] = (spec.get("nodeName") or "", count(offered.get("value")) or 1)
        self._places: dict[str, GpuPlace] = {}

    def places(self) -> Mapping[str, GpuPlace]:
        return self._places

    def holds(self, pod: Manifest) -> list[GpuHold]:
        metadata = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName") or ""
        found = []
        for claim_name in _claim_names(pod):
            claim = self._claims.get((metadata.get("namespace"), claim_name))
            allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or ():
                place = self._place(result, node)
                consumed = (result.get("consumedCapacity") or {}).get(self._capacity)
                # A device allocated without consumable capacity is the claim's alone.
                units = count(consumed) if consumed is not None else place.units
                found.append(
                    GpuHold(place.key, units, Fraction(units, place.units), result.get("shareID"))
                )
        return found

    def _place(self, result: Manifest, pod_node: str) -> GpuPlace:
        pool, device = result.get("pool") or "", result.get("device") or ""
        key = _device_key(result.get("driver") or "", pool, device)
        if key not in self._places:
            node, units = self._devices.get(key, ("", 1))
            node = node or pod_node
            shown = device if pool == node else f"{pool}/{device}"
            self._places[key] = GpuPlace(key, node, shown, 1, units, self._capacity)
        return self._places[key]


def read_device_view(cluster: Cluster, config: Config) -> DeviceView:
    return DeviceView(
        config,
        list(cluster.list(f"{_API}/resourceclaims")),
        list(cluster.list(f"{_API}/resourceslices")),
    )


def _claim_names(pod: Manifest) -> Iterator[str]:
    status = pod.get("status") or {}
    for claim in status.get("resourceClaimStatuses") or ():
        if claim.get("resourceClaimName"):
            yield claim["resourceClaimName"]
    extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if extended:
        yield extended


def _device_key(driver: str, pool: str, device: str) -> str:
    return f"{driver}/{pool}/{device}"
