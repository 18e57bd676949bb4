"""The server's first words: where it listens, the settings it runs with, the names it ignores.

Written once, when the server starts and before any review: a line left for later (a
thread, a timer) may never run where the CPU is throttled between requests (Cloud Run's
request-based billing). functions-framework's command imports main.py before it binds, so
main.py writes the line with the address the command is about to bind
(`functions_framework_address`); gunicorn under castslice.serve.tls binds first and writes
it from its `when_ready` hook with the sockets it holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath

from castslice import __version__
from castslice.environment import unknown_settings
from castslice.serve.log import write_log
from castslice.settings.config import Config, memory_quantity
from castslice.settings.table import (
    BACKEND,
    SETTINGS,
    Kind,
    config_value,
    idle_reason,
)

# functions-framework's defaults (functions_framework/_cli.py: --host, --port).
_DEFAULT_HOST = "0.0.0.0"
_DEFAULT_PORT = "8080"


def announce(config: Config, environ: Mapping[str, str], listening: Sequence[str]) -> None:
    """One INFO line with the effective settings; a WARNING line naming unknown settings,
    and one naming settings that do nothing with this backend or stack."""
    write_log("INFO", "castslice starting", listening=list(listening), **settings_fields(config))
    unknown = unknown_settings(environ)
    if unknown:
        write_log(
            "WARNING",
            "CASTSLICE_* names that are not settings, ignored: "
            + "; ".join(str(name) for name in unknown),
            unknownSettings=[{"name": name.name, "closest": name.closest} for name in unknown],
        )
    idle = idle_settings(config, environ)
    if idle:
        write_log(
            "WARNING",
            f"settings that do nothing with {BACKEND}={config.backend}, ignored: "
            + "; ".join(f"{name} ({why})" for name, why in idle),
            idleSettings=[{"name": name, "why": why} for name, why in idle],
        )


def idle_settings(config: Config, environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(variable, why) of each setting set that does nothing with this configuration."""
    found = []
    for entry in SETTINGS:
        why = idle_reason(entry, config)
        if entry.in_environment and environ.get(entry.variable) and why is not None:
            found.append((entry.variable, why))
    return found


def settings_fields(config: Config) -> dict[str, object]:
    """What the configuration decided, never a secret: the path token only as set or not."""
    return {
        "version": __version__,
        "backend": config.backend,
        "slicesPerGpu": config.slices_per_gpu,
        "sharingDegrees": list(config.sharing_degrees),
        "sharingStrategy": config.sharing_strategy,
        "gpuResource": config.gpu_resource,
        "sharedResource": config.shared_resource,
        "presets": dict(config.presets),
        "defaultSlices": config.default_slices,
        "maxSliceRatio": config.max_slice_ratio,
        "policyRules": None if config.policy is None else len(config.policy.rules),
        "pathToken": "set" if config.path_token else "unset",
        "metricsPort": config.metrics_port if config.metrics else None,
        "schedulerName": config.scheduler_name,
        "gpuMemory": None if config.gpu_memory is None else memory_quantity(config.gpu_memory),
        "gpuMemoryEnforcedOnly": (
            config.gpu_memory_enforced_only if config.gpu_memory is not None else None
        ),
        **_backend_fields(config),
    }


def _backend_fields(config: Config) -> dict[str, object]:
    """The settings of the chosen backend (and stack) alone, each under its variable's
    name in camelCase (CASTSLICE_MIG_GPU_MODELS: migGpuModels)."""
    fields: dict[str, object] = {}
    for entry in SETTINGS:
        if entry.used_by is None or idle_reason(entry, config) is not None:
            continue
        value = config_value(config, entry.variable)
        if entry.kind is Kind.MEMORY and isinstance(value, int):
            value = memory_quantity(value)
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = {key: list(names) for key, names in value.items()} or None
        first, *rest = entry.variable.removeprefix("CASTSLICE_").lower().split("_")
        fields[first + "".join(word.capitalize() for word in rest)] = value
    return fields


def functions_framework_address(argv: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """The URL functions-framework's command binds next, or None when it is not the command.

    Its --host and --port, else HOST and PORT, else 0.0.0.0:8080, as its command reads them.
    """
    program = PurePath(argv[0]) if argv else PurePath()
    # `functions-framework …` or `python -m functions_framework …`.
    if program.name != "functions-framework" and program.parent.name != "functions_framework":
        return None
    host = environ.get("HOST") or _DEFAULT_HOST
    port = environ.get("PORT") or _DEFAULT_PORT
    arguments = list(argv[1:])
    for index, argument in enumerate(arguments):
        name, equals, value = argument.partition("=")
        if not equals and index + 1 < len(arguments):
            value = arguments[index + 1]
        if name == "--host":
            host = value
        elif name == "--port":
            port = value
    return f"http://{host}:{port}"
