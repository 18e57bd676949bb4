"""The backends' answers to the tools (roles.py), one per backend, each asked for by its
role: `castslice doctor`, `report`, `plan`, `claim-templates`, `policy` and the scheduler
extender start here; the webhook never does (a `forbidden` contract in pyproject.toml)."""

from __future__ import annotations

from castslice.backends.answers import Tools
from castslice.backends.dra.tools import DraTools
from castslice.backends.gke.tools import GkeTools
from castslice.backends.mig.tools import MODEL_PROFILES as MIG_MODEL_PROFILES
from castslice.backends.mig.tools import MigTools
from castslice.backends.mig.tools import (
    foreign_profiles_chart_check as foreign_profiles_chart_check,
)
from castslice.backends.nvidia.tools import NvidiaTools
from castslice.backends.resource.tools import ResourceTools
from castslice.backends.roles import (
    ExtenderView,
    GpuAccounts,
    NodeChecks,
    Plans,
    PolicyPools,
    Templates,
)
from castslice.settings.config import Config

# What render writes of the MIG profile table (the chart's rule, Terraform's table).
__all__ = ["MIG_MODEL_PROFILES", "foreign_profiles_chart_check"]

TOOLS: dict[str, type[Tools]] = {
    "resource": ResourceTools,
    "nvidia": NvidiaTools,
    "gke": GkeTools,
    "dra": DraTools,
    "mig": MigTools,
}


def node_checks_for(config: Config) -> NodeChecks:
    return TOOLS[config.backend](config)


def gpu_accounts_for(config: Config) -> GpuAccounts:
    return TOOLS[config.backend](config)


def plans_for(config: Config) -> Plans:
    return TOOLS[config.backend](config)


def templates_for(config: Config) -> Templates:
    return TOOLS[config.backend](config)


def policy_pools_for(config: Config) -> PolicyPools:
    return TOOLS[config.backend](config)


def extender_view_for(config: Config) -> ExtenderView:
    return TOOLS[config.backend](config)


def extender_backends() -> list[str]:
    """The backends whose GPUs the scheduler extender can score (`ExtenderView.extender_gpus`)."""
    return sorted(name for name, tools in TOOLS.items() if tools.extender_gpus is not None)


def tools_for(config: Config) -> Tools:
    """Every role's answers at once, for a caller that asks several (a benchmark, a test)."""
    return TOOLS[config.backend](config)
