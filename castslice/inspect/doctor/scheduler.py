"""Check: with CASTSLICE_SCHEDULER_NAME, a scheduler of that name is running.

The webhook writes the name into every Pod it rewrites and never waits on the scheduler;
if no scheduler answers to it, those Pods stay Pending for ever without a word: no
scheduler ever tries them, so none records a PodScheduled condition. That silence is
what this check looks for.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from castslice.contract import Manifest
from castslice.contract.cluster import Cluster
from castslice.contract.findings import Result, failed, passed
from castslice.settings.config import Config

CHECK = "scheduler"
LISTED = 5
# A scheduler tries a new Pod within seconds; a minute of silence is not a busy queue.
UNTRIED_AFTER = datetime.timedelta(seconds=60)


def check_scheduler(cluster: Cluster, config: Config) -> Result:
    assert config.scheduler_name
    pods = cluster.list(
        "/api/v1/pods",
        [("fieldSelector", f"spec.schedulerName={config.scheduler_name},status.phase=Pending")],
    )
    return assess(config.scheduler_name, list(pods), datetime.datetime.now(datetime.UTC))


def assess(name: str, pods: Sequence[Manifest], now: datetime.datetime) -> Result:
    untried = [
        f"{pod['metadata'].get('namespace')}/{pod['metadata'].get('name')}"
        for pod in pods
        if _untried(pod, name) and now - _created(pod) >= UNTRIED_AFTER
    ]
    if not untried:
        return passed(CHECK, f"no Pod waits untried for the scheduler {name}")
    listed = ", ".join(untried[:LISTED])
    more = f" and {len(untried) - LISTED} more" if len(untried) > LISTED else ""
    return failed(
        CHECK,
        f"{len(untried)} Pod{'s' if len(untried) != 1 else ''} for the scheduler {name} "
        f"Pending over {UNTRIED_AFTER.seconds} s and never tried: no scheduler of that name "
        f"is running: {listed}{more}",
        f"start it (the chart's extender.scheduler.enabled) or unset CASTSLICE_SCHEDULER_NAME; "
        f"kubectl get pods -A --field-selector spec.schedulerName={name} lists its Pods",
    )


def _untried(pod: Manifest, name: str) -> bool:
    spec = pod.get("spec") or {}
    if spec.get("schedulerName") != name or spec.get("nodeName"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return not any(condition.get("type") == "PodScheduled" for condition in conditions)


def _created(pod: Manifest) -> datetime.datetime:
    stamp = (pod.get("metadata") or {}).get("creationTimestamp") or ""
    try:
        return datetime.datetime.fromisoformat(stamp)
    except ValueError:
        # A Pod without a readable stamp is counted as just created: never blamed.
        return datetime.datetime.max.replace(tzinfo=datetime.UTC)
