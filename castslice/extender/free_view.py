"""Each node's free CPU, memory and GPU shares as the extender scores them: what the watches
show (watching.py) less what the Pods expected there take (expectations.py), remembered per
node, with its scores, until an event touches the node.

Where GPUs are shared by node pools, the view knows only how many clients a node's Pods
hold, and spreads them over its GPUs as the NVIDIA device plugin's default allocation
policy does (`distributed`: each client to the GPU with the fewest, NVIDIA/k8s-device-plugin
internal/rm/allocate.go, commit 046b76bb).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from castslice.extender.expectations import Expectations
from castslice.extender.fragmentation import MILLI, NodeFree
from castslice.extender.watching import Watched


def spread_clients(gpus: int, clients: int, held: int) -> tuple[int, ...]:
    """Each GPU's free thousandths when `held` of its node's `clients`-per-GPU clients are
    taken, spread as the device plugin's `distributed` policy spreads them (each to the GPU
    with the fewest), most free first: the GPU the next client gets comes first."""
    if not gpus:
        return ()
    fewest, more = divmod(max(held, 0), gpus)
    taken = [min(clients, fewest + (index < more)) for index in range(gpus)]
    return tuple(sorted(((clients - used) * MILLI // clients for used in taken), reverse=True))


@dataclass
class Known:
    """A node's free resources and its scores per Pod shape, valid until an event touches
    the node or the typical Pods are learnt again."""

    free: NodeFree | None
    # Pod shape's number (`ClusterView._shape_numbers`) -> score
    scores: dict[int, int] = field(default_factory=dict)


@dataclass
class FreeView:
    """What is known of each node; an event that touches a node forgets its entry."""

    watched: Watched
    expectations: Expectations
    known: dict[str, Known] = field(default_factory=dict)

    def forget(self, nodes: Iterable[str]) -> None:
        for name in nodes:
            self.known.pop(name, None)

    def of(self, name: str) -> Known:
        known = self.known.get(name)
        if known is None:
            known = self.known[name] = Known(self._free(name))
        return known

    def _free(self, name: str) -> NodeFree | None:
        """The node's free resources from its own Pods and devices (what `recount` counts
        over the whole cluster)."""
        watched = self.watched
        node = watched.nodes.get(name)
        if node is None:
            return None
        cpu, memory, held = node.cpu_milli, node.memory, 0
        for uid in watched.pods_on.get(name, ()):
            pod = watched.pods[uid]
            if not pod.done:
                cpu -= pod.cpu_milli
                memory -= pod.memory
                held += pod.holds.get(node.resource, 0)
        gpus: list[int] = []
        if watched.pools is None:
            gpus = [
                max(0, offered - watched.consumed.get(key, 0)) * MILLI // offered
                for key, offered in watched.devices_of(name)
            ]
        return self._node_free(name, cpu, memory, held, gpus)

    def recount(self, names: Sequence[str]) -> dict[str, NodeFree]:
        """Every named node's free resources in one pass over Pods and claims."""
        watched = self.watched
        wanted = set(names)
        cpu = {name: node.cpu_milli for name, node in watched.nodes.items() if name in wanted}
        memory = {name: node.memory for name, node in watched.nodes.items() if name in wanted}
        held = dict.fromkeys(cpu, 0)
        for pod in watched.pods.values():
            if pod.node in cpu and not pod.done:
                cpu[pod.node] -= pod.cpu_milli
                memory[pod.node] -= pod.memory
                held[pod.node] += pod.holds.get(watched.nodes[pod.node].resource, 0)
        consumed: dict[str, int] = {}
        for claim in watched.claims.values():
            for key, shares in claim.allocated:
                consumed[key] = consumed.get(key, 0) + shares
        gpus: dict[str, list[int]] = {name: [] for name in cpu}
        if watched.pools is None:
            for slice_name in sorted(watched.slices):
                node_name, devices = watched.slices[slice_name]
                if node_name in gpus:
                    gpus[node_name] += [
                        max(0, offered - consumed.get(key, 0)) * MILLI // offered
                        for key, offered in devices
                    ]
        return {
            name: self._node_free(name, cpu[name], memory[name], held[name], gpus[name])
            for name in cpu
        }

    def empty(self, name: str) -> NodeFree:
        """The node's resources with nothing placed on it."""
        node = self.watched.nodes[name]
        if self.watched.pools is not None:
            gpus = spread_clients(node.gpus, node.clients, 0)
            return NodeFree(node.cpu_milli, gpus, node.model, node.memory, node.pool)
        gpus = (MILLI,) * len(self.watched.devices_of(name))
        return NodeFree(node.cpu_milli, gpus, node.model, node.memory)

    def _node_free(self, name: str, cpu: int, memory: int, held: int, gpus: list[int]) -> NodeFree:
        """The node's free resources from what its Pods and claims leave, less what the
        Pods expected there take that the watch has not shown yet."""
        node = self.watched.nodes[name]
        cpu, memory, held = self.expectations.taken(name, cpu, memory, held, gpus)
        if self.watched.pools is not None:
            return NodeFree(
                cpu, spread_clients(node.gpus, node.clients, held), node.model, memory, node.pool
            )
        return NodeFree(cpu, tuple(gpus), node.model, memory)
