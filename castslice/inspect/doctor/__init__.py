"""`castslice doctor`: checks a live installation against this configuration, read-only.

Each check is one module and one line of output. Nothing is changed in the
cluster: the checks read objects, `/metrics`, and create Pods only as
server-side dry runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from castslice.backends.roles import NodeCheck
from castslice.backends.tools import node_checks_for
from castslice.contract import Manifest
from castslice.contract.cluster import ApiError, Cluster
from castslice.contract.findings import Result, failed
from castslice.inspect.doctor import (
    capacity,
    dry_run,
    endpoint,
    fail_open,
    gpu_memory,
    gpu_nodes,
    likely_cause,
    pending,
    quotas,
    registered_webhook,
    scheduler,
)
from castslice.settings.config import Config

CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


# What a device-plugin backend's nodes must offer: capacity and labels, no Pod waiting for it.
_DEVICE_PLUGIN_CHECKS = (
    NodeCheck(capacity.CHECK, "list nodes and pods", capacity.check_nodes),
    NodeCheck(gpu_nodes.CHECK, "list nodes", gpu_nodes.check_gpu_nodes),
    NodeCheck(pending.CHECK, "list pods", pending.check_pending),
    NodeCheck(quotas.CHECK, "list resourcequotas", quotas.check_quotas),
)


def run_checks(cluster: Cluster, config: Config, name: str, namespace: str) -> list[Result]:
    """Every check, in the order a user would investigate."""
    live: Manifest | None = None
    results: list[Result] = []
    webhook_names = registered_webhook.castslice_webhook_names(
        registered_webhook.expected_configuration(config)
    )
    try:
        live = _read_configuration(cluster, name)
        expected = registered_webhook.expected_configuration(config, live)
        others = [] if live else _holders(cluster, webhook_names)
        results.append(registered_webhook.check_registration(name, live, expected, others))
    except ApiError as error:
        results.append(
            _unreadable(
                registered_webhook.CHECK, error, "get and list mutatingwebhookconfigurations"
            )
        )
    cause = likely_cause.for_endpoint(config, live, webhook_names)
    own = node_checks_for(config).node_checks()
    node_checks = [
        (check.name, check.rights, functools.partial(check.run, cluster, config))
        for check in (own if own is not None else _DEVICE_PLUGIN_CHECKS)
    ]
    checks: Sequence[tuple[str, str, Callable[[], Result]]] = (
        (endpoint.CHECK, "", lambda: cause(endpoint.check_endpoint(cluster, live, webhook_names))),
        (dry_run.CHECK, "", lambda: cause(dry_run.check_dry_run(cluster, config, namespace))),
        *node_checks,
        *(
            [(scheduler.CHECK, "list pods", lambda: scheduler.check_scheduler(cluster, config))]
            if config.scheduler_name
            else []
        ),
        *(
            [
                (
                    gpu_memory.CHECK,
                    "list nodes",
                    lambda: gpu_memory.check_gpu_memory(cluster, config),
                )
            ]
            if config.gpu_memory is not None
            else []
        ),
        (fail_open.CHECK, "", lambda: fail_open.check_fail_open(cluster, webhook_names)),
    )
    for check, rights, run in checks:
        try:
            results.append(run())
        except ApiError as error:
            results.append(_unreadable(check, error, rights))
    return results


def _read_configuration(cluster: Cluster, name: str) -> Manifest | None:
    try:
        return cluster.get(f"{CONFIGURATIONS}/{name}")
    except ApiError as error:
        if error.status == 404:
            return None
        raise


def _holders(cluster: Cluster, webhook_names: Sequence[str]) -> list[str]:
    """Configurations holding CastSlice's webhooks under another name (another variant's)."""
    return registered_webhook.holders_of(cluster.list(CONFIGURATIONS), webhook_names)


def _unreadable(check: str, error: ApiError, rights: str) -> Result:
    fix = f"grant these credentials {rights}" if error.status == 403 and rights else ""
    return failed(check, f"{check}: the API server refused: {error.status} {error.message}", fix)
