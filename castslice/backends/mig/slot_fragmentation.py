"""Which node, GPU and placement a MIG instance should take: the one that fragments the
free MIG slots least.

FGD's idea (Weng et al., USENIX ATC '23; its GPU-share port is castslice/extender/
fragmentation.py) over NVIDIA's placement slots instead of GPU thousandths, in the spirit of
Zambianco, Fasol and Doriguzzi-Corin, "An Online Fragmentation-Aware GPU Scheduler for
Multi-Tenant MIG-based Clouds" (arXiv 2511.18906v1): a greedy scheduler that, for each
arriving workload, picks the GPU and MIG slice that make fragmentation grow least. The
measure below is FGD's form, not that paper's metric:

- a GPU's fragmentation for a profile is its free memory slices that no further instance
  of that profile could take (every placement of the profile that is still free, as many as
  its free compute slices allow: NVIDIA's placements of one profile never overlap, so that
  count is exact);
- a node's fragmentation for a typical request (a profile on `gpus` GPUs, with the CPU and
  memory it needs of the host) is the sum over its GPUs, or all its free slices when fewer
  than `gpus` of its GPUs take the profile or the host lacks the CPU or memory (FGD's
  quadrants: a GPU no request can reach for want of CPU is lost as surely);
- a node's fragmentation is that, weighted by how often each typical request comes;
- a placement's cost is how much it makes its node's fragmentation grow, and the least
  costly placement of the cluster wins (ties: the first node, GPU and placement).

The placements are layouts.STARTS (NVML's, checked against NVIDIA's sources by
tests/test_mig_layouts.py). Whether the host's CPU and memory fit the request placed is
the caller's to check.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from castslice.backends.mig.layouts import GpuState, put, remove, starts
from castslice.backends.mig.profiles import GpuModel, Profile


class Request(NamedTuple):
    """What a Pod takes: one `profile` instance on each of `gpus` GPUs of one node."""

    profile: Profile
    gpus: int = 1


class Host(NamedTuple):
    """A node's CPU and memory: what it has left, or what a request needs of it."""

    cpu_milli: int = 0
    memory_mib: int = 0

    def holds(self, need: Host) -> bool:
        return self.cpu_milli >= need.cpu_milli and self.memory_mib >= need.memory_mib


# The requests a cluster typically sees, each with what it needs of the host and how often
# it comes (summing to 1).
Typical = Sequence[tuple[Request, Host, float]]


class Move(NamedTuple):
    """Where a request goes on one node: the GPUs (by index) and each one's placement start,
    and how much the node's fragmentation grows (0 where nobody measured it)."""

    growth: float
    gpus: tuple[int, ...]
    starts: tuple[int, ...]


def free_slices(model: GpuModel, state: GpuState) -> int:
    return model.memory_total - state.taken.bit_count()


def room(model: GpuModel, state: GpuState, profile: Profile) -> int:
    """How many more `profile` instances the GPU takes."""
    free = sum(1 for start in starts(model, profile) if put(model, state, profile, start))
    return min(free, (model.compute_total - state.compute) // profile.compute_slices)


def gpu_fragmentation(model: GpuModel, state: GpuState, profile: Profile) -> int:
    """The GPU's free memory slices that no more `profile` instances could take."""
    return free_slices(model, state) - profile.memory_slices * room(model, state, profile)


def node_fragmentation(
    model: GpuModel, gpus: Sequence[GpuState], typical: Typical, host: Host | None = None
) -> float:
    """The node's free slices the typical requests could not use, weighted by how often
    each comes (`host`: what the node has left of CPU and memory; None: enough for all)."""
    return _lost(model, gpus, typical, _fits(typical, host))


Fits = tuple[bool, ...]


def _fits(typical: Typical, host: Host | None) -> Fits:
    return tuple(host is None or host.holds(need) for _, need, _ in typical)


def _lost(model: GpuModel, gpus: Sequence[GpuState], typical: Typical, fits: Fits) -> float:
    total = 0.0
    for (request, _, weight), fit in zip(typical, fits, strict=True):
        hosts = sum(1 for state in gpus if room(model, state, request.profile))
        if fit and hosts >= request.gpus:
            lost = sum(gpu_fragmentation(model, state, request.profile) for state in gpus)
        else:
            lost = sum(free_slices(model, state) for state in gpus)
        total += weight * lost
    return total


def apply(
    model: GpuModel, gpus: Sequence[GpuState], request: Request, move: Move
) -> tuple[GpuState, ...]:
    """The node's GPUs once `move` has placed `request`."""
    after = list(gpus)
    for index, start in zip(move.gpus, move.starts, strict=True):
        placed = put(model, after[index], request.profile, start)
        if placed is None:
            raise ValueError(f"GPU {index} has no free {request.profile.name} at slice {start}")
        after[index] = placed
    return tuple(after)


def release(gpus: Sequence[GpuState], request: Request, move: Move) -> tuple[GpuState, ...]:
    """The node's GPUs once the Pod `move` placed with `request` has left (`apply` undone)."""
    after = list(gpus)
    for index, start in zip(move.gpus, move.starts, strict=True):
        after[index] = remove(after[index], request.profile, start)
    return tuple(after)


def first_fit(model: GpuModel, gpus: Sequence[GpuState], request: Request) -> Move | None:
    """The first GPUs that take the request, each at its first free placement."""
    chosen: list[int] = []
    chosen_starts: list[int] = []
    for index, state in enumerate(gpus):
        start = next(
            (s for s in starts(model, request.profile) if put(model, state, request.profile, s)),
            None,
        )
        if start is not None:
            chosen.append(index)
            chosen_starts.append(start)
            if len(chosen) == request.gpus:
                return Move(0.0, tuple(chosen), tuple(chosen_starts))
    return None


class SlotFragmentation:
    """The least fragmenting placement on a node, for one GPU model and typical mix.

    Nodes in the same state have the same answer, which is remembered: a cluster has few
    distinct states of a node's GPUs.
    """

    def __init__(self, model: GpuModel, typical: Typical) -> None:
        self.model = model
        self.typical = tuple(typical)
        self._fragmentation: dict[tuple[tuple[GpuState, ...], Fits], float] = {}
        self._moves: dict[tuple[tuple[GpuState, ...], Request | None, Fits, Fits], Move | None] = {}

    def fragmentation(self, gpus: Sequence[GpuState], host: Host | None = None) -> float:
        return self._fragmentation_of(gpus, _fits(self.typical, host))

    def _fragmentation_of(self, gpus: Sequence[GpuState], fits: Fits) -> float:
        # A node's GPUs are alike to the measure in any order; of its CPU and memory, only
        # which typical requests they hold matters.
        key = (tuple(sorted(gpus)), fits)
        found = self._fragmentation.get(key)
        if found is None:
            found = self._fragmentation[key] = _lost(self.model, key[0], self.typical, fits)
        return found

    def best(
        self, gpus: tuple[GpuState, ...], request: Request | None, host: Host | None = None,
        need: Host | None = None,
    ) -> Move | None:  # fmt: skip
        """The move on this node that makes its fragmentation grow least, or None: the
        node's GPUs cannot take the request (`request`: None for a Pod that asks no GPU,
        whose CPU can still strand the node's GPUs; `host`: the node's CPU and memory left,
        `need`: the Pod's; None: plenty, nothing)."""
        before = after = _fits(self.typical, host)
        if host is not None and need is not None:
            left = Host(host.cpu_milli - need.cpu_milli, host.memory_mib - need.memory_mib)
            after = _fits(self.typical, left)
        key = (gpus, request, before, after)
        if key not in self._moves:
            self._moves[key] = self._best(gpus, request, before, after)
        return self._moves[key]

    def _best(
        self,
        gpus: tuple[GpuState, ...],
        request: Request | None,
        fits_before: Fits,
        fits_after: Fits,
    ) -> Move | None:
        before = self._fragmentation_of(gpus, fits_before)
        if request is None:
            return Move(self._fragmentation_of(gpus, fits_after) - before, (), ())
        model, profile = self.model, request.profile
        if request.gpus > 1:
            # Several GPUs: the first that take it (in the trace every such request is of
            # whole GPUs, which are alike); only the node is chosen by fragmentation.
            candidates = [first_fit(model, gpus, request)]
        else:
            seen: set[GpuState] = set()
            candidates = []
            for index, state in enumerate(gpus):
                if state in seen:
                    continue
                seen.add(state)
                for start in starts(model, profile):
                    if put(model, state, profile, start) is not None:
                        candidates.append(Move(0.0, (index,), (start,)))
        best: Move | None = None
        for move in candidates:
            if move is None:
                continue
            placed = apply(model, gpus, request, move)
            growth = self._fragmentation_of(placed, fits_after) - before
            if best is None or growth < best.growth:
                best = move._replace(growth=growth)
        return best
