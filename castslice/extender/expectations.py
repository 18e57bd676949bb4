"""Where the extender expects the Pods it scored to go, until the watch shows them there.

kube-scheduler binds in the background and takes the next Pod at once: its own cache
assumes a Pod on the node it chose before the API server shows it bound, so that the next
Pods are scheduled around it (kubernetes/kubernetes, pkg/scheduler/internal/cache/
interface.go, the cache's state machine: Initial, Assumed, Added, Expired, Deleted). The
extender keeps the same states for its own view, each where kube-scheduler keeps it:

- Initial -> Assumed (`AssumePod`): `Expectations.expect`, when the extender's best score
  sends a Pod to a node: its CPU, memory, pool client and GPU shares are counted there.
- Assumed -> Added (`AddPod` confirms the assumed Pod): `settle`, as the watch shows each
  part: the Pod bound on that node (its CPU, memory and clients then counted from the
  watch), its claims allocated (their shares then counted from the watch); once all of
  it is shown, the expectation ends.
- Assumed -> Expired (the assumed Pod's time to live): `expire`, after EXPECTED_FOR
  without the watch showing it bound.
- Assumed -> Initial (`ForgetPod`, the binding failed): `forget`, when the watch shows the
  Pod on another node, done or deleted, or kube-scheduler asks about it again.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from castslice.extender.watching import Watched

# How long a Pod is counted where the extender's best score sent it, if the watch never
# shows it bound there (kube-scheduler placed it elsewhere, or could not bind it).
EXPECTED_FOR = 30.0
EXPECTATION_OUTCOMES = (
    "bound where expected", "bound elsewhere", "lapsed", "devices as expected",
    "devices elsewhere",
)  # fmt: skip


@dataclass
class Expected:
    """A Pod counted on the node the extender's best score sent it to (Assumed). Each part is
    counted until the watch shows it: CPU, memory and pool clients until the Pod is seen on
    the node, the GPU shares until its claims are seen allocated."""

    node: str
    cpu_milli: int
    memory: int
    units: int
    # (the device's place among the node's GPUs, thousandths taken)
    gpus: tuple[tuple[int, int], ...]
    claims: set[tuple[str, str]]
    bound: bool
    until: float


@dataclass
class Expectations:
    """The Pods expected on nodes: Pod uid -> expectation, node -> Pod uids, claim -> Pod uid.
    Each method returns the nodes whose free resources it changed."""

    clock: Callable[[], float] = time.monotonic
    # How expectations ended (`EXPECTATION_OUTCOMES`): whether kube-scheduler follows the
    # extender's best node and the allocator the device first fit predicts, for an
    # operator to read.
    outcomes: Counter[str] = field(default_factory=Counter)
    by_pod: dict[str, Expected] = field(default_factory=dict)
    on: dict[str, set[str]] = field(default_factory=dict)
    by_claim: dict[tuple[str, str], str] = field(default_factory=dict)

    def expect(self, uid: str, expected: Expected) -> str:
        """Initial -> Assumed."""
        self.forget(uid)
        expected.until = self.clock() + EXPECTED_FOR
        self.by_pod[uid] = expected
        self.on.setdefault(expected.node, set()).add(uid)
        for key in expected.claims:
            self.by_claim[key] = uid
        return expected.node

    def forget(self, uid: str) -> str | None:
        """Assumed -> Initial (or the end of Added): the node it was counted on, if any."""
        expected = self.by_pod.pop(uid, None)
        if expected is None:
            return None
        self.on.get(expected.node, set()).discard(uid)
        for key in expected.claims:
            self.by_claim.pop(key, None)
        return expected.node

    def settle(self, uid: str, watched: Watched, deleted: bool = False) -> set[str]:
        """Count no longer what the watch now shows of an expected Pod; forget it once the
        watch shows all of it, or shows it gone, done or on another node."""
        expected = self.by_pod.get(uid)
        if expected is None:
            return set()
        pod = watched.pods.get(uid)
        if pod is not None and pod.node and pod.node != expected.node:
            self.outcomes["bound elsewhere"] += 1
        if deleted or (pod is not None and (pod.done or (pod.node and pod.node != expected.node))):
            return _nodes(self.forget(uid))
        changed = False
        if pod is not None and pod.node and not expected.bound:
            expected.bound = changed = True
            self.outcomes["bound where expected"] += 1
        for key in list(expected.claims):
            claim = watched.claims.get(key)
            if claim is not None and claim.allocated and expected.gpus:
                self.outcomes[
                    "devices as expected"
                    if watched.places(expected.node, claim) == {place for place, _ in expected.gpus}
                    else "devices elsewhere"
                ] += 1
            if claim is None or claim.allocated:
                # Allocated (its shares are counted from the watch now), or deleted.
                expected.claims.discard(key)
                self.by_claim.pop(key, None)
                changed = True
        if expected.bound and not expected.claims:
            return _nodes(self.forget(uid))
        return {expected.node} if changed else set()

    def settle_all(self, watched: Watched) -> set[str]:
        touched: set[str] = set()
        for uid in list(self.by_pod):
            touched |= self.settle(uid, watched)
        return touched

    def expire(self) -> set[str]:
        """Assumed -> Expired, for every expectation past its time."""
        now = self.clock()
        touched: set[str] = set()
        for uid in [uid for uid, expected in self.by_pod.items() if expected.until <= now]:
            if not self.by_pod[uid].bound:
                self.outcomes["lapsed"] += 1
            touched |= _nodes(self.forget(uid))
        return touched

    def taken(
        self, node: str, cpu: int, memory: int, held: int, gpus: list[int]
    ) -> tuple[int, int, int]:
        """What the Pods expected on `node` take that the watch has not shown yet: CPU,
        memory and clients left, and `gpus` (each GPU's free thousandths) lowered in place."""
        for uid in self.on.get(node, ()):
            expected = self.by_pod[uid]
            if not expected.bound:
                cpu -= expected.cpu_milli
                memory -= expected.memory
                held += expected.units
            if expected.claims:
                for place, milli in expected.gpus:
                    if place < len(gpus):
                        gpus[place] = max(0, gpus[place] - milli)
        return cpu, memory, held


def _nodes(node: str | None) -> set[str]:
    return set() if node is None else {node}
