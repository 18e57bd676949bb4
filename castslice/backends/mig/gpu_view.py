"""What `castslice report` says of MIG instances: a node's MIG GPUs as one place counted in
memory slices (what MIG isolates), named with the instances they are cut into and what each
really is; a Pod's share is its instance's share of the GPU's memory."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

from castslice.backends.answers import NodeGpuView
from castslice.backends.mig.choice import Instance
from castslice.backends.placer import label_count
from castslice.backends.roles import GpuHold, GpuPlace
from castslice.contract import Manifest
from castslice.contract.scheduling import allocatable

# GPU Feature Discovery's count of a node's physical GPUs (k8s-device-plugin v0.20.0).
GPU_COUNT = "nvidia.com/gpu.count"
# GKE: a partition pool time-shared on top advertises each partition once per client.
GKE_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"


class MigGpuView:
    def __init__(
        self,
        inner: NodeGpuView,
        nodes: Sequence[Manifest],
        instance_of: Callable[[str, Mapping[str, str]], Instance | None],
    ) -> None:
        self._inner = inner
        # inner place key -> (the node's MIG place key, the instance its units are, the
        # clients that time-share each instance)
        self._mig: dict[str, tuple[str, Instance, int]] = {}
        self._places: dict[str, GpuPlace] = {}
        by_name = {str((n.get("metadata") or {}).get("name") or ""): n for n in nodes}
        offered: dict[str, list[tuple[Instance, int]]] = {}
        for key, place in inner.places().items():
            node = by_name.get(place.node, {})
            labels = (node.get("metadata") or {}).get("labels") or {}
            instance = instance_of(place.unit, labels)
            if instance is None:
                self._places[key] = place
                continue
            mig_key = f"{place.node} MIG"
            clients = _clients(labels)
            self._mig[key] = (mig_key, instance, clients)
            count = allocatable(node, place.unit) // clients
            offered.setdefault(place.node, []).append((instance, count))
        for node_name, instances in offered.items():
            labels = (by_name[node_name].get("metadata") or {}).get("labels") or {}
            total = instances[0][0].model.memory_total
            units = sum(count * i.profile.memory_slices for i, count in instances)
            gpus = label_count(labels.get(GPU_COUNT)) or -(-units // total)
            kinds = "; ".join(f"{count} × {i.text()}" for i, count in instances)
            key = f"{node_name} MIG"
            clients = _clients(labels)
            # Time-shared instances are counted per client: in 1/clients of a memory slice.
            unit = f"memory slices of MIG instances ({kinds})"
            if clients > 1:
                unit = f"1/{clients} {unit}, each time-shared by {clients} clients"
            self._places[key] = GpuPlace(key, node_name, None, gpus, gpus * total * clients, unit)

    def places(self) -> Mapping[str, GpuPlace]:
        return self._places

    def holds(self, pod: Manifest) -> list[GpuHold]:
        found = []
        for hold in self._inner.holds(pod):
            if hold.place in self._mig:
                key, instance, clients = self._mig[hold.place]
                # One client of an instance time-shared by `clients`: its memory slices, in
                # 1/clients of a slice, as the place counts them.
                slices = hold.units * instance.profile.memory_slices
                share = Fraction(slices, instance.model.memory_total * clients)
                hold = GpuHold(key, slices, share)
            found.append(hold)
        return found


def _clients(labels: Mapping[str, str]) -> int:
    return label_count(labels.get(GKE_CLIENTS)) or 1
