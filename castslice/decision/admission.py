"""The admission decision: one AdmissionRequest in, one Outcome out.

The top of the pipeline: a Pod goes to the Pod decision; a workload (Deployment,
Job, an operator's resource) to the workload check, which asks the same Pod decision
about the Pods its templates would produce and only ever warns.
"""

from __future__ import annotations

from castslice.backends import Placer, placer_for
from castslice.contract.review import AdmissionRequest, allowed
from castslice.decision.outcome import Outcome
from castslice.decision.pods import PodDecision
from castslice.decision.workloads import check_workload, is_workload
from castslice.settings.config import Config


class Admission:
    """Decides on reviews of Pods and of workloads for one configuration; safe to share
    between threads."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.backend: Placer = placer_for(config)
        self.pods = PodDecision(config, self.backend)

    def review(self, request: AdmissionRequest) -> Outcome:
        """Never denies; patches only opted-in Pods being created, never a workload."""
        kind = request.get("kind")
        if kind is not None and kind.get("kind") != "Pod" and is_workload(kind):
            return self._review_workload(request)
        return self.pods.review(request)

    def _review_workload(self, request: AdmissionRequest) -> Outcome:
        """Warnings only: what stops the workload's Pods from being sliced as it asks."""
        check = check_workload(request, self.pods, self.config.gpu_resource)
        pods = check.pods
        return Outcome(
            allowed(request["uid"], check.warnings),
            "warned" if check.warnings else "checked",
            check.reason,
            slices=pods.slices if pods else None,
            source=pods.source if pods else None,
            backend=self.backend.name,
            subject=(request.get("kind") or {}).get("kind", "").lower(),
        )
