"""Check: GPU quotas still hold once CastSlice renames the GPU resource.

An opted-in Pod on a backend that renames the GPU resource (`resource`, `nvidia`)
no longer asks for `nvidia.com/gpu`, so a ResourceQuota on that alone stops
counting it: the namespace needs a quota on the shared resource too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kubernetes.utils import parse_quantity

from castslice.backends.tools import node_checks_for
from castslice.contract import Manifest
from castslice.contract.cluster import Cluster
from castslice.contract.findings import Result, failed, passed
from castslice.settings.config import Config

CHECK = "quotas"
LISTED = 5
SUGGESTED_NAME = "castslice-shared"


def check_quotas(cluster: Cluster, config: Config) -> Result:
    return assess(config, list(cluster.list("/api/v1/resourcequotas")))


def assess(config: Config, quotas: Sequence[Manifest]) -> Result:
    backend = node_checks_for(config)
    gpu, shared = config.gpu_resource, backend.quota_resource()
    if shared is None:
        return passed(
            CHECK,
            f"GPU quotas: the {backend.name} backend keeps {gpu}, so quotas on it count "
            "opted-in Pods too",
        )
    limited: dict[str, int] = {}
    covered: set[str] = set()
    for quota in quotas:
        namespace = quota["metadata"]["namespace"]
        hard = (quota.get("spec") or {}).get("hard") or {}
        for key in (f"requests.{gpu}", gpu):
            if key in hard:
                gpus = _count(hard[key])
                limited[namespace] = min(gpus, limited.get(namespace, gpus))
        if f"requests.{shared}" in hard or shared in hard:
            covered.add(namespace)
    uncovered = sorted(namespace for namespace in limited if namespace not in covered)
    if not limited:
        return passed(CHECK, f"GPU quotas: no namespace limits {gpu}")
    if not uncovered:
        return passed(CHECK, f"GPU quotas: {_namespaces_limit(len(limited))} {gpu} and {shared}")
    listed = ", ".join(f"{ns} ({gpu}: {limited[ns]})" for ns in uncovered[:LISTED])
    more = f" and {len(uncovered) - LISTED} more" if len(uncovered) > LISTED else ""
    first = uncovered[0]
    fix = (
        f"kubectl -n {first} create quota {SUGGESTED_NAME} "
        f"--hard=requests.{shared}={limited[first] * backend.quota_units_per_gpu()}"
    )
    if len(uncovered) > 1:
        fix += (
            f" ({backend.quota_units_per_gpu()} per GPU of the quota), and likewise in the others"
        )
    return failed(
        CHECK,
        f"GPU quotas: {_namespaces_limit(len(uncovered))} {gpu} but not {shared}, "
        "which opted-in Pods ask for instead, so they escape the "
        f"quota: {listed}{more}",
        fix,
    )


def _namespaces_limit(count: int) -> str:
    return "1 namespace limits" if count == 1 else f"{count} namespaces limit"


def _count(value: object) -> int:
    try:
        return math.floor(parse_quantity(value))
    except ValueError:
        return 0
