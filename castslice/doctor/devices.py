"""Checks for backends that claim devices (DRA): devices to share, and the claim templates.

A device can be shared by claims when its driver publishes it with
`allowMultipleAllocations` and the capacity CastSlice's claims ask for
(the NVIDIA DRA driver's `--consumable-shares=S`). Each namespace with
rewritten Pods needs CastSlice's ResourceClaimTemplates: without one, the
resource-claim controller never creates the Pod's claim and the Pod stays Pending.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from kubernetes.utils import parse_quantity

from ..backends import backend_for
from ..claimtemplates import API_VERSION, TEMPLATE_PREFIX, default_counts
from ..config import Config
from ..contract import APPLIED, DecisionRecord
from .cluster import ApiError, Cluster
from .report import Result, failed, passed, warning

Manifest = dict[str, Any]

DEVICES_CHECK = "devices"
TEMPLATES_CHECK = "claim templates"
_API = f"/apis/{API_VERSION}"
LISTED = 5


def check_devices(cluster: Cluster, config: Config) -> Result:
    try:
        device_class: Manifest | None = cluster.get(
            f"{_API}/deviceclasses/{config.dra_device_class}"
        )
    except ApiError as error:
        if error.status != 404:
            raise
        device_class = None
    return assess_devices(config, device_class, list(cluster.list(f"{_API}/resourceslices")))


def assess_devices(
    config: Config, device_class: Manifest | None, slices: Sequence[Manifest]
) -> Result:
    per_gpu = config.slices_per_gpu
    fix = backend_for(config).setup_hint()
    if device_class is None:
        return failed(
            DEVICES_CHECK,
            f"no DeviceClass {config.dra_device_class}: every claim CastSlice makes names it",
            f"{fix}; or set CASTSLICE_DRA_DEVICE_CLASS to the class your driver ships",
        )
    nodes: set[str] = set()
    shareable = 0
    other_sizes: set[str] = set()
    for resource_slice in slices:
        spec = resource_slice.get("spec") or {}
        for device in spec.get("devices") or ():
            capacity = (device.get("capacity") or {}).get(config.dra_capacity)
            if not device.get("allowMultipleAllocations") or capacity is None:
                continue
            shareable += 1
            nodes.add(spec.get("nodeName") or (spec.get("pool") or {}).get("name") or "")
            value = str(capacity.get("value"))
            if _quantity(value) != per_gpu:
                other_sizes.add(value)
    if not shareable:
        return failed(
            DEVICES_CHECK,
            f"no ResourceSlice publishes a shareable device with a {config.dra_capacity} "
            "capacity: opted-in Pods stay Pending",
            fix,
        )
    message = (
        f"{shareable} shareable device{'s' if shareable != 1 else ''} with "
        f"{config.dra_capacity} on {len(nodes)} node{'s' if len(nodes) != 1 else ''}"
    )
    if other_sizes:
        return warning(
            DEVICES_CHECK,
            f"{message}; some publish {config.dra_capacity} {', '.join(sorted(other_sizes))}, "
            f"not {per_gpu} (CASTSLICE_SLICES_PER_GPU), so a share is not s/{per_gpu} of them",
            f"publish {per_gpu} {config.dra_capacity} per device or set "
            "CASTSLICE_SLICES_PER_GPU to what the devices publish",
        )
    if config.sharing_strategy == "mps":
        return warning(
            DEVICES_CHECK,
            f"{message}; CASTSLICE_SHARING_STRATEGY is mps, but the NVIDIA DRA driver refuses "
            "MPS with consumable shares",
            "devices shared by consumable capacity are time-sliced; unset "
            "CASTSLICE_SHARING_STRATEGY",
        )
    return passed(DEVICES_CHECK, message)


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
    backend = backend_for(config)
    expected = {backend.place(count).claim_template for count in default_counts(config).counts}
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
            TEMPLATES_CHECK,
            f"Pods claim from templates that do not exist, so they stay Pending: {listed}",
            _apply_fix(missing_in),
        )
    if not namespaces:
        return passed(
            TEMPLATES_CHECK, f"no Pod CastSlice rewrote for {config.backend} yet; nothing to check"
        )
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
            TEMPLATES_CHECK,
            f"{listed}: opted-in Pods of those slice counts will stay Pending",
            _apply_fix(list(lacking)),
        )
    return passed(
        TEMPLATES_CHECK,
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


def _quantity(value: str) -> float | None:
    try:
        return float(parse_quantity(value))
    except ValueError:
        return None
