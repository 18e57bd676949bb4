"""What the extender knows of the cluster, under one lock: the watches' tables (watching.py:
how GPUs are read, as DRA devices or as sharing node pools), the Pods expected where the
extender sent them (expectations.py) and each node's free resources (free_view.py), read to
score a Pod against the typical Pods seen.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from castslice.contract import Manifest
from castslice.extender.expectations import EXPECTATION_OUTCOMES, Expectations, Expected
from castslice.extender.fragmentation import (
    NodeFree,
    PodShape,
    RareShapes,
    Scorer,
    scoring_typical_pods,
    tie_broken,
)
from castslice.extender.free_view import FreeView
from castslice.extender.watching import Pools, Watched, uid_of

# The typical Pods are learnt again once the Pods seen have grown by this share: between
# two lessons the node fragmentations and scores computed stay valid and are remembered.
_RELEARN = 1.05
# The kinds whose changes change the GPUs each model has.
_GPU_KINDS = ("nodes", "resourceslices")
# Scores remembered per node (one per Pod shape asked about) at most; past it they are
# forgotten at once.
_SCORES_PER_NODE = 256


class ClusterView:
    """The cluster as the watches last said; every public method takes the lock."""

    def __init__(
        self,
        capacity: str,
        shares_per_gpu: int,
        gpu_resource: str = "nvidia.com/gpu",
        pools: Pools | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.watched = Watched(capacity, shares_per_gpu, gpu_resource, pools)
        self.expectations = Expectations(clock)
        self.frees = FreeView(self.watched, self.expectations)
        self._lock = threading.Lock()
        self._typical: list[tuple[PodShape, float]] | None = None
        self._learnt_from = 0
        self._gpus_per_model: dict[str, int] = {}
        self._cpu_per_gpu = 0.0
        # Each node with nothing placed on it, for the rare shapes.
        self._empty: list[NodeFree] = []
        # Whether `_gpus_per_model`, `_cpu_per_gpu` and `_empty` are still the nodes': no
        # node or ResourceSlice changed since.
        self._gpus_counted = False
        self._scorer = Scorer([], {})
        # A number per Pod shape asked about, so each node's remembered scores are looked
        # up by a small integer rather than by hashing the shape once per node.
        self._shape_numbers: dict[PodShape, int] = {}

    @property
    def pools(self) -> Pools | None:
        """A pool backend's pools; None: GPUs are DRA devices."""
        return self.watched.pools

    @property
    def clock(self) -> Callable[[], float]:
        return self.expectations.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self.expectations.clock = clock

    @property
    def outcomes(self) -> Counter[str]:
        """How expectations ended (`EXPECTATION_OUTCOMES`)."""
        return self.expectations.outcomes

    # ---- watch events

    def replace(self, kind: str, items: Iterable[Manifest]) -> None:
        """A fresh list of `kind`: drop what was known of it, then add every item."""
        with self._lock:
            self.watched.replace(kind, items)
            self._gpus_counted = self._gpus_counted and kind not in _GPU_KINDS
            self.frees.known.clear()
            self.frees.forget(self.expectations.settle_all(self.watched))

    def apply(self, kind: str, event: str, item: Manifest) -> None:
        with self._lock:
            self._apply(kind, event, item)

    def _apply(self, kind: str, event: str, item: Manifest) -> None:
        self.frees.forget(self.watched.record(kind, event, item))
        self._gpus_counted = self._gpus_counted and kind not in _GPU_KINDS
        metadata = item.get("metadata") or {}
        if kind == "resourceclaims":
            key = (metadata.get("namespace") or "", metadata.get("name") or "")
            uid = self.expectations.by_claim.get(key)
            if uid is not None:
                self.frees.forget(self.expectations.settle(uid, self.watched))
        elif kind == "pods":
            uid = uid_of(item)
            if uid in self.expectations.by_pod:
                deleted = event == "DELETED"
                self.frees.forget(self.expectations.settle(uid, self.watched, deleted))

    # ---- reading

    def typical(self) -> list[tuple[PodShape, float]]:
        with self._lock:
            return self._typical_locked()

    def _typical_locked(self) -> list[tuple[PodShape, float]]:
        watched = self.watched
        watched.resolve()
        # Nodes that join or leave change what a model's pinned Pods want of it.
        gpus_per_model, cpu_per_gpu = self._gpus_per_model, self._cpu_per_gpu
        if not self._gpus_counted:
            gpus_per_model, cpu_per_gpu = watched.gpus_per_model(), watched.cpu_per_gpu()
            self._empty = [self.frees.empty(name) for name in watched.nodes]
            self._gpus_counted = True
        if (
            self._typical is None
            or watched.resolved >= self._learnt_from * _RELEARN
            or gpus_per_model != self._gpus_per_model
            or cpu_per_gpu != self._cpu_per_gpu
            or watched.departed != self._scorer.rare.first
        ):
            shapes = [pod.shape for pod in watched.pods.values() if pod.shape is not None]
            self._typical = scoring_typical_pods(shapes, cpu_per_gpu)
            self._learnt_from = watched.resolved = len(shapes)
            self._gpus_per_model, self._cpu_per_gpu = gpus_per_model, cpu_per_gpu
            # Rare shapes from every Pod seen, gone ones too: the few tasks that need the
            # largest nodes come seldom, and seldom while a Pod that could take their node
            # is scored.
            rare = RareShapes.of(watched.seen, self._empty, watched.departed)
            self._scorer = Scorer(self._typical, gpus_per_model, cpu_per_gpu, rare)
            # Every score was over the old typical Pods; the free resources stay.
            for known in self.frees.known.values():
                known.scores.clear()
            self._shape_numbers.clear()
        return self._typical

    def rare(self) -> RareShapes:
        """The rare shapes the scores keep nodes for, and how (`fragmentation.RareShapes`)."""
        with self._lock:
            self._typical_locked()
            return self._scorer.rare

    def gpus_per_model(self) -> dict[str, int]:
        """The GPUs of each model the nodes have, as the scores weigh pinned Pods against."""
        with self._lock:
            return self.watched.gpus_per_model()

    def free(self, node_name: str) -> NodeFree | None:
        with self._lock:
            return self.frees.of(node_name).free

    def recounted(self, node_name: str) -> NodeFree | None:
        """The node's free resources counted again over every Pod and claim, as `free`
        must find them (for an operator's check and the tests)."""
        with self._lock:
            return self.frees.recount([node_name]).get(node_name)

    def shape(self, pod: Manifest) -> PodShape | None:
        """What `pod` asks of a node as the view scores it (None: a claim not seen yet)."""
        read = self.watched.read_pod(pod)
        with self._lock:
            return self.watched.shape(read)

    def missing_claims(self, pod: Manifest) -> list[tuple[str, str]]:
        """The claims `pod` names that the view has not seen (yet)."""
        read = self.watched.read_pod(pod)
        with self._lock:
            return [
                (read.namespace, name)
                for name in read.claims
                if name and (read.namespace, name) not in self.watched.claims
            ]

    def scores(self, pod: Manifest, node_names: Sequence[str]) -> list[tuple[str, int]]:
        """Each node's score for placing `pod` there (nodes the view does not know: 0).

        A Pod whose claims are not known gets 0 everywhere: no opinion.
        """
        read = self.watched.read_pod(pod)
        with self._lock:
            self.frees.forget(self.expectations.expire())
            self._typical_locked()
            shape = self.watched.shape(read)
            if shape is None:
                return [(name, 0) for name in node_names]
            number = self._shape_numbers.setdefault(shape, len(self._shape_numbers))
            scorer, scored = self._scorer, []
            for name in node_names:
                known = self.frees.of(name)
                score = known.scores.get(number)
                if score is None:
                    if known.free is None:
                        score = 0
                    else:
                        if len(known.scores) >= _SCORES_PER_NODE:
                            known.scores.clear()
                        score = known.scores[number] = scorer.score(known.free, shape)
                scored.append((name, score))
            return scored

    def prioritize(self, pod: Manifest, node_names: Sequence[str]) -> list[tuple[str, int]]:
        """The extender's answer: `scores`, ties broken by name (`tie_broken`); and the Pod
        counted on the best of them until the watch shows where it went (expectations.py),
        since kube-scheduler takes the best total and the extender's is the only score
        the shipped profile leaves that tells nodes apart."""
        uid = uid_of(pod)
        with self._lock:
            # A Pod tried again is scored without its own earlier expectation.
            self.frees.forget(_nodes(self.expectations.forget(uid)))
            # The watch often trails kube-scheduler by the very Pod it asks about (its claim
            # statuses not shown yet). Scored without it, the typical Pods would be learnt
            # from one Pod fewer or not depending on that race, which moves where the next
            # relearning falls and so the scores: the Pod as kube-scheduler sends it counts.
            known = self.watched.pods.get(uid)
            if known is None or (
                known.shape is None and known.claims != self.watched.read_pod(pod).claims
            ):
                self._apply("pods", "MODIFIED", pod)
        scored = tie_broken(self.scores(pod, node_names))
        best = max(scored, key=lambda item: item[1], default=None)
        if best is not None and best[1] > 0:
            self.expect(pod, best[0])
        return scored

    def expect(self, pod: Manifest, node_name: str) -> None:
        """Count `pod` on `node_name` until the watch shows it there (expectations.py): its
        GPU shares on the devices the allocator's first fit gives it."""
        uid = uid_of(pod)
        watched = self.watched
        read = watched.read_pod(pod)
        with self._lock:
            self.frees.forget(_nodes(self.expectations.forget(uid)))
            shape = watched.shape(read)
            node = watched.nodes.get(node_name)
            if read.node or read.done or shape is None or node is None:
                return
            free = self.frees.of(node_name).free
            assert free is not None
            claims = {
                key
                for claim_name in read.claims
                if (claim := watched.claims.get(key := (read.namespace, claim_name)))
                and not claim.allocated
            }
            gpus: tuple[tuple[int, int], ...] = ()
            if watched.pools is None and claims and shape.gpus:
                fitting = [
                    place for place, left in enumerate(free.gpu_milli) if left >= shape.gpu_milli
                ][: shape.gpus]
                gpus = tuple((place, shape.gpu_milli) for place in fitting)
            units = read.holds.get(node.resource, 0)
            expected = Expected(
                node_name, read.cpu_milli, read.memory, units, gpus, claims, False, 0.0
            )
            self.frees.forget([self.expectations.expect(uid, expected)])

    def summary(self) -> dict[str, Any]:
        """Each node's free CPU and GPU thousandths, and the typical shapes: what the
        extender believes, for an operator (and a test) to read."""
        with self._lock:
            frees = {
                name: free for name in self.watched.nodes if (free := self.frees.of(name).free)
            }
            typical = self._typical_locked()
            rare = self._scorer.rare.shapes
            outcomes = self.expectations.outcomes
        return {
            "nodes": {
                name: {"cpuMilli": free.cpu_milli, "memory": free.memory,
                       "gpuMilli": list(free.gpu_milli)}
                for name, free in sorted(frees.items())
            },
            "typicalPods": [
                {"cpuMilli": shape.cpu_milli, "gpuMilli": shape.gpu_milli, "gpus": shape.gpus,
                 "models": list(shape.models), "memory": shape.memory, "frequency": frequency}
                for shape, frequency in typical
            ],
            "rarePods": [
                {"cpuMilli": shape.cpu_milli, "gpuMilli": shape.gpu_milli, "gpus": shape.gpus,
                 "models": list(shape.models), "memory": shape.memory}
                for shape in rare
            ],
            "expectations": {name: outcomes[name] for name in EXPECTATION_OUTCOMES},
        }  # fmt: skip


def _nodes(node: str | None) -> list[str]:
    return [] if node is None else [node]
