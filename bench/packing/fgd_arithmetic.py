"""FGD's typical Pods and node fragmentation with the paper's simulator's own float steps,
for the port of FGD the extender is measured against (`offline.place_fgd`).

The extender's `typical_pods` and `Scorer` give the same numbers to within a rounding, but
not bit for bit, and FGD's score turns a rounding into a point: it truncates
`sigmoid(gain / 1000) x 100`, so a placement that changes no fragmentation scores 50 when
the two sums agree and 49 when the one after it comes out a unit in the last place above,
and where nodes tie the lowest name wins. So this port repeats the simulator's steps
(hkust-adsl/kubernetes-scheduler-simulator at 8f3d641, `pkg/utils/frag.go`):

- `GetTypicalPods`: the frequency of a typical shape is its count over all Pods, divided
  by the count of the chosen shapes over all Pods (two divisions, not one), and the
  shapes are chosen until they cover `95 x total / 100` Pods;
- `NodeGpuShareFragAmount`: each typical Pod's amount goes to the sum of its quadrant
  (`FragRatioDataMap`, seven of them), and `FragAmountSumExceptQ3` adds those sums in that
  order, leaving out Q3's, instead of adding every amount to one sum.

`artefact_draw frag` runs the simulator's functions themselves; a unit test compares
both, float for float, on the trace's nodes.
"""

from __future__ import annotations

from collections.abc import Iterable

from castslice.extender.fragmentation import (
    NO_ACCESS,
    Q1_LACK_BOTH,
    Q2_LACK_GPU,
    Q3_SATISFIED,
    Q4_LACK_CPU,
    XL_SATISFIED,
    XR_LACK_CPU,
    NodeFree,
    PodShape,
    quadrant,
)

# FragRatioDataMap's order: the order the quadrants' sums are added in.
QUADRANTS = (
    Q1_LACK_BOTH,
    Q2_LACK_GPU,
    Q3_SATISFIED,
    Q4_LACK_CPU,
    XL_SATISFIED,
    XR_LACK_CPU,
    NO_ACCESS,
)
_INDEX = {name: index for index, name in enumerate(QUADRANTS)}
# The experiments' typicalPodsConfig (scripts/generate_config_and_run.py).
POPULARITY_PERCENT = 95
# Fragmentations remembered at most; past it they are forgotten at once.
_REMEMBERED = 200_000


def gpu_type(pod: PodShape) -> str:
    """The shape's models as the simulator's `GpuType` string."""
    return "|".join(pod.models)


def typical_pods(observed: Iterable[PodShape]) -> list[tuple[PodShape, float]]:
    """`GetTypicalPods` (every Pod counted once, CPU-only ones too; steps of one shape)."""
    counts: dict[PodShape, float] = {}
    total = 0.0
    for shape in observed:
        counts[shape] = counts.get(shape, 0.0) + 1.0
        total += 1.0
    # sort.Reverse over (Percentage, PodResource.Less): a total order, so a stable sort
    # reversed gives the same list.
    ranked = sorted(
        counts,
        key=lambda shape: (
            counts[shape], shape.cpu_milli, shape.gpu_milli, shape.gpus, gpu_type(shape)
        ),
        reverse=True,
    )  # fmt: skip
    expected = float(POPULARITY_PERCENT) * total / 100.0
    chosen, covered = 0, 0.0
    while covered < expected:
        covered += counts[ranked[chosen]]
        chosen += 1
    if chosen >= len(ranked):
        return [(shape, counts[shape] / total) for shape in ranked]
    return [(shape, (counts[shape] / total) / (covered / total)) for shape in ranked[:chosen]]


class SimulatorFragmentation:
    """`NodeGpuShareFragAmountScore` over the typical Pods of `known`, each node's
    remembered while its free GPUs, model, CPU and memory stay the same."""

    def __init__(self, known: Iterable[PodShape]) -> None:
        self.typical = typical_pods(known)
        self._remembered: dict[tuple[tuple[int, ...], str, int, int], float] = {}

    def fragmentation(self, node: NodeFree) -> float:
        key = (node.gpu_milli, node.model, node.cpu_milli, node.memory)
        found = self._remembered.get(key)
        if found is not None:
            return found
        sums = [0.0] * len(QUADRANTS)
        total = sum(node.gpu_milli)
        for pod, frequency in self.typical:
            where = quadrant(node, pod)
            if where == Q3_SATISFIED:
                short = sum(left for left in node.gpu_milli if left < pod.gpu_milli)
                sums[_INDEX[Q2_LACK_GPU]] += frequency * short
                sums[_INDEX[Q3_SATISFIED]] += frequency * (total - short)
            else:
                sums[_INDEX[where]] += frequency * total
        amount = 0.0
        for index, value in enumerate(sums):
            if index != _INDEX[Q3_SATISFIED]:
                amount += value
        if len(self._remembered) >= _REMEMBERED:
            self._remembered.clear()
        self._remembered[key] = amount
        return amount
