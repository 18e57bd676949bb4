"""The platform's common reason why the API server cannot reach the webhook, added to a failure.

The endpoint and dry-run checks see that calls fail; the backend knows what on
its platform usually blocks them (on GKE: firewall rules and control-plane egress).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from castslice.backends.tools import node_checks_for
from castslice.contract import Manifest
from castslice.contract.findings import Result
from castslice.inspect.doctor.dry_run import CHECK as CHECK_DRY_RUN
from castslice.inspect.doctor.dry_run import NOT_CALLED
from castslice.inspect.doctor.endpoint import castslice_client_configs
from castslice.settings.config import Config


def for_endpoint(
    config: Config, live: Manifest | None, webhook_names: Sequence[str]
) -> Callable[[Result], Result]:
    """A function that adds the likely cause to a failed result of a check of the endpoint."""
    client_configs = castslice_client_configs(live, webhook_names)
    backend = node_checks_for(config)
    cause = backend.unreachable_endpoint_cause(client_configs[0]) if client_configs else ""

    def add(result: Result) -> Result:
        if result.ok or not cause:
            return result
        if result.check == CHECK_DRY_RUN and NOT_CALLED not in result.message:
            return result  # rewritten otherwise than expected: the settings differ
        fix = f"{result.fix}; {cause}" if result.fix else cause
        return dataclasses.replace(result, fix=fix)

    return add
