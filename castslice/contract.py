"""CastSlice's contract as data: the annotations it reads and writes, the workloads whose Pod
templates it reviews, which namespaces are never touched, and the decision record.

The webhook, the registration's CEL, `castslice preview` and policy mode all read
these definitions; none of them spells a key, a kind or a template path itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

# Annotations a user sets on a Pod (or a Pod template).
ANNOTATION_PREFIX = "castops.io/"
OPTIMIZE = "castops.io/optimize"
WORKLOAD_TYPE = "castops.io/workload-type"
SLICE_RATIO = "castops.io/slice-ratio"
USER_ANNOTATIONS = (OPTIMIZE, WORKLOAD_TYPE, SLICE_RATIO)
# What CastSlice writes on a Pod it changed: the decision record.
APPLIED = "castslice.castops.io/applied"
# The policy a registration was generated from, as JSON: what the function must run with.
POLICY_ANNOTATION = "castslice.castops.io/policy"
# The kubelet owns mirror Pods; the API server refuses any change to them.
MIRROR = "kubernetes.io/config.mirror"

# Never sent to CastSlice, whatever the policy says: the cluster's own machinery.
SYSTEM_NAMESPACES = ("kube-system", "kube-node-lease")
# Where CastSlice itself runs in a cluster, unless told otherwise; also never sent.
DEFAULT_NAMESPACE = "castslice"

# Every kind of container a Pod has; a GPU in any of them is rewritten.
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")

# A path segment standing for every value of a map (`spec.replicaSpecs.<name>`).
EACH_VALUE = "*"
# A path segment standing for every item of a list (`spec.replicatedJobs[]`).
EACH_ITEM = "[]"


@dataclass(frozen=True)
class TemplateLocation:
    """Where one Pod template sits in a workload: a path of field names, `EACH_VALUE` and
    `EACH_ITEM`, and the objects on the way whose own annotations never reach the Pods."""

    path: tuple[str, ...]
    # (how a warning names it, its path) for each object between the workload and the template.
    between: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def has_wildcards(self) -> bool:
        return EACH_VALUE in self.path or EACH_ITEM in self.path

    def dotted(self) -> str:
        return ".".join(self.path)


@dataclass(frozen=True)
class WorkloadKind:
    group: str
    version: str
    kind: str
    # The plural the registration's rules name.
    resource: str
    templates: tuple[TemplateLocation, ...]

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.group, self.version, self.kind)


_TEMPLATE = TemplateLocation(("spec", "template"))
WORKLOAD_KINDS: tuple[WorkloadKind, ...] = (
    WorkloadKind("apps", "v1", "Deployment", "deployments", (_TEMPLATE,)),
    WorkloadKind("apps", "v1", "StatefulSet", "statefulsets", (_TEMPLATE,)),
    WorkloadKind("apps", "v1", "DaemonSet", "daemonsets", (_TEMPLATE,)),
    WorkloadKind("apps", "v1", "ReplicaSet", "replicasets", (_TEMPLATE,)),
    WorkloadKind("batch", "v1", "Job", "jobs", (_TEMPLATE,)),
    WorkloadKind(
        "batch",
        "v1",
        "CronJob",
        "cronjobs",
        (
            TemplateLocation(
                ("spec", "jobTemplate", "spec", "template"),
                (("the jobTemplate", ("spec", "jobTemplate")),),
            ),
        ),
    ),
)
WORKLOADS: dict[tuple[str, str, str], WorkloadKind] = {kind.key: kind for kind in WORKLOAD_KINDS}
WORKLOAD_KIND_NAMES = frozenset(kind.kind for kind in WORKLOAD_KINDS)


def workload_kind(group: str | None, version: str | None, kind: str | None) -> WorkloadKind | None:
    return WORKLOADS.get((group or "", version or "", kind or ""))


def templates_at(
    workload: Mapping[str, Any], location: TemplateLocation
) -> Iterator[tuple[tuple[str, ...], Mapping[str, Any]]]:
    """Each Pod template at `location` in `workload`, with its concrete path (map keys and
    list indexes in place of the wildcards), in document order."""
    found: list[tuple[tuple[str, ...], Any]] = [((), workload)]
    for segment in location.path:
        step: list[tuple[tuple[str, ...], Any]] = []
        for where, value in found:
            if segment == EACH_VALUE:
                if isinstance(value, Mapping):
                    step += [((*where, str(key)), item) for key, item in value.items()]
            elif segment == EACH_ITEM:
                if isinstance(value, list):
                    step += [((*where, str(index)), item) for index, item in enumerate(value)]
            elif isinstance(value, Mapping) and segment in value:
                step.append(((*where, segment), value[segment]))
        found = step
    for where, value in found:
        if isinstance(value, Mapping):
            yield where, value


class DecisionRecord(msgspec.Struct, frozen=True):
    """What CastSlice did to a Pod, written on it as APPLIED; a later review leaves it alone.

    The encoding is canonical (msgspec, fields in this order, no spaces), so policy mode's
    CEL writes the same text character for character.
    """

    slices: int
    source: str
    backend: str
    # Container name -> the GPU quantity it asked for before.
    original: dict[str, str]

    def encode(self) -> str:
        return _record_encoder.encode(self).decode()

    @classmethod
    def parse(cls, text: str) -> DecisionRecord | None:
        """The record in `text`, or None when it is not one (a hand-written or damaged value)."""
        try:
            return _record_decoder.decode(text)
        except msgspec.MsgspecError:
            return None


_record_encoder = msgspec.json.Encoder()
_record_decoder = msgspec.json.Decoder(DecisionRecord)


def json_string(text: str) -> str:
    """`text` as the decision record's encoding writes a string."""
    return _record_encoder.encode(text).decode()
