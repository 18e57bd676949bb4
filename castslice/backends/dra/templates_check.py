"""For backends that claim devices (DRA): which namespaces lack CastSlice's claim templates.

Each namespace with rewritten Pods needs CastSlice's ResourceClaimTemplates:
without one, the resource-claim controller never creates the Pod's claim and the
Pod stays Pending.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from castslice.backends.dra.claim_templates import (
    API_VERSION,
    TEMPLATE_PREFIX,
    default_counts,
    template_name,
)
from castslice.contract import Manifest
from castslice.contract.cluster import Cluster
from castslice.contract.definitions import APPLIED, DecisionRecord
from castslice.contract.findings import Result, failed, passed, warning
from castslice.settings.config import Config

CHECK = "claim templates"
_API = f"/apis/{API_VERSION}"
LISTED = 5


def check_templates(cluster: Cluster, config: Config) -> Result:
    pods = list(cluster.list("/api/v1/pods"))
    templates = list(cluster.list(f"{_API}/resourceclaimtemplates"))
    return assess_templates(config, pods, templates)


def assess_templates(
    config: Config, pods: Iterable[Manifest], templates: Iterable[Manifest]
) -> Result:
    """Which namespaces with rewritten Pods lack which of CastSlice's templates."""
    have: dict[str, set[str]] = {}
    for template in templates:
        metadata = template.get("metadata") or {}
        have.setdefault(metadata.get("namespace") or "", set()).add(metadata.get("name") or "")
    expected = {template_name(config, count) for count in default_counts(config).counts}
    namespaces: set[str] = set()
    stuck: dict[tuple[str, str], list[str]] = {}
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if not _rewritten_by(metadata, config.backend):
            continue
        namespace = metadata.get("namespace") or ""
        namespaces.add(namespace)
        for claim in (pod.get("spec") or {}).get("resourceClaims") or ():
            name = claim.get("resourceClaimTemplateName") or ""
            if name.startswith(TEMPLATE_PREFIX) and name not in have.get(namespace, set()):
                stuck.setdefault((namespace, name), []).append(metadata.get("name") or "")
    if stuck:
        listed = "; ".join(
            f"{namespace}/{name} (Pending: {', '.join(sorted(set(pods))[:LISTED])})"
            for (namespace, name), pods in sorted(stuck.items())[:LISTED]
        )
        missing_in = sorted({namespace for namespace, _ in stuck})
        return failed(
            CHECK,
            f"Pods claim from templates that do not exist, so they stay Pending: {listed}",
            _apply_fix(missing_in),
        )
    if not namespaces:
        return passed(CHECK, f"no Pod CastSlice rewrote for {config.backend} yet; nothing to check")
    lacking = {
        namespace: sorted(expected - have.get(namespace, set()))
        for namespace in sorted(namespaces)
        if expected - have.get(namespace, set())
    }
    if lacking:
        listed = "; ".join(
            f"{namespace} lacks {', '.join(names[:LISTED])}"
            for namespace, names in list(lacking.items())[:LISTED]
        )
        return warning(
            CHECK,
            f"{listed}: opted-in Pods of those slice counts will stay Pending",
            _apply_fix(list(lacking)),
        )
    return passed(
        CHECK,
        f"every namespace with rewritten Pods has the {len(expected)} templates "
        f"({', '.join(sorted(namespaces)[:LISTED])})",
    )


def _rewritten_by(metadata: Manifest, backend: str) -> bool:
    text = (metadata.get("annotations") or {}).get(APPLIED)
    record = DecisionRecord.parse(text) if text is not None else None
    return record is not None and record.backend == backend


def _apply_fix(namespaces: Sequence[str]) -> str:
    flags = " ".join(f"-n {namespace}" for namespace in namespaces[:LISTED])
    return (
        f"castslice claim-templates {flags} | kubectl apply -f - "
        "(with the same CASTSLICE_* settings; add --slices for other slice-ratio values)"
    )
