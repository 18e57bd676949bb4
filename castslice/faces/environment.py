"""The configuration read from the CASTSLICE_* environment, validated once at start."""

from __future__ import annotations

from collections.abc import Mapping

from castslice.backends import BACKENDS, backend_class
from castslice.settings.config import (
    DEFAULT_PRESETS,
    MAX_GPU_MEMORY,
    MAX_SHARING_DEGREE,
    MAX_SLICE_RATIO_CEILING,
    MEBIBYTE,
    SHARING_STRATEGIES,
    Config,
    ConfigError,
)
from castslice.settings.names import (
    MIN_PATH_TOKEN_LENGTH,
    extended_resource_problem,
    is_capacity_name,
    is_dns_subdomain,
    is_path_token,
    parse_bounded_int,
)
from castslice.settings.policy_file import PolicyError, load_policy, read_policy_file
from castslice.settings.rules import Policy

# Set by Cloud Run (services, functions, jobs) and Knative Serving, whose URLs are public.
_SERVERLESS_VARIABLES = ("K_SERVICE", "K_CONFIGURATION", "K_REVISION", "CLOUD_RUN_JOB")


def load_config(environ: Mapping[str, str]) -> Config:
    """Build the configuration from CASTSLICE_* variables; raise ConfigError on any bad value."""
    backend = _choice(environ, "CASTSLICE_BACKEND", Config.backend, tuple(BACKENDS))
    gpu = _extended_resource(environ, "CASTSLICE_GPU_RESOURCE", Config.gpu_resource)
    shared = _extended_resource(
        environ, "CASTSLICE_SHARED_RESOURCE", backend_class(backend).default_shared_resource(gpu)
    )
    if shared == gpu:
        raise ConfigError(
            f"CASTSLICE_SHARED_RESOURCE and CASTSLICE_GPU_RESOURCE are both {gpu!r}; "
            "the shared resource must differ from the one it replaces"
        )
    max_ratio = _positive_int(
        environ, "CASTSLICE_MAX_SLICE_RATIO", Config.max_slice_ratio, MAX_SLICE_RATIO_CEILING
    )
    presets = _presets(environ, max_ratio)
    return Config(
        shared_resource=shared,
        gpu_resource=gpu,
        presets=presets,
        default_slices=_positive_int(
            environ, "CASTSLICE_DEFAULT_SLICES", Config.default_slices, max_ratio
        ),
        max_slice_ratio=max_ratio,
        path_token=_path_token(environ),
        backend=backend,
        slices_per_gpu=_positive_int(
            environ, "CASTSLICE_SLICES_PER_GPU", Config.slices_per_gpu, max_ratio
        ),
        sharing_degrees=_sharing_degrees(environ),
        sharing_strategy=_choice(
            environ, "CASTSLICE_SHARING_STRATEGY", Config.sharing_strategy, SHARING_STRATEGIES
        ),
        policy=_policy(environ, presets, max_ratio),
        metrics=_metrics(environ),
        metrics_port=_positive_int(environ, "CASTSLICE_METRICS_PORT", Config.metrics_port, 65535),
        dra_device_class=_device_class(
            environ, "CASTSLICE_DRA_DEVICE_CLASS", Config.dra_device_class
        ),
        dra_capacity=_capacity_name(environ, "CASTSLICE_DRA_CAPACITY", Config.dra_capacity),
        dra_gpu_memory=_gpu_memory(environ, "CASTSLICE_DRA_GPU_MEMORY"),
    )


def _value(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    if value is not None and not value.strip():
        raise ConfigError(f"{name} is set but empty; unset it to use the default")
    return value


def _extended_resource(environ: Mapping[str, str], name: str, default: str) -> str:
    value = _value(environ, name)
    if value is None:
        return default
    value = value.strip()
    problem = extended_resource_problem(value)
    if problem:
        raise ConfigError(f"{name}={value!r} is not a valid extended resource name: {problem}")
    return value


def _positive_int(environ: Mapping[str, str], name: str, default: int, upper: int) -> int:
    value = _value(environ, name)
    if value is None:
        return default
    number = parse_bounded_int(value.strip(), upper)
    if number is None:
        raise ConfigError(f"{name}={value!r} must be a whole number from 1 to {upper}")
    return number


def _presets(environ: Mapping[str, str], max_ratio: int) -> dict[str, int]:
    name = "CASTSLICE_PRESETS"
    value = _value(environ, name)
    if value is None:
        value = DEFAULT_PRESETS
    presets: dict[str, int] = {}
    for entry in value.split(","):
        key, equals, count = (part.strip() for part in entry.partition("="))
        if not equals or not key:
            raise ConfigError(
                f"{name}: entry {entry.strip()!r} is not of the form type=slices, "
                f"as in {DEFAULT_PRESETS}"
            )
        slices = parse_bounded_int(count, max_ratio)
        if slices is None:
            raise ConfigError(
                f"{name}: the slice count of {key!r} must be a whole number from 1 to {max_ratio}"
            )
        if key in presets:
            raise ConfigError(f"{name}: workload type {key!r} is listed twice")
        presets[key] = slices
    return presets


def _choice(environ: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    value = _value(environ, name)
    if value is None:
        return default
    if value.strip() not in choices:
        raise ConfigError(f"{name}={value!r} must be one of: {', '.join(choices)}")
    return value.strip()


def _sharing_degrees(environ: Mapping[str, str]) -> tuple[int, ...]:
    name = "CASTSLICE_SHARING_DEGREES"
    value = _value(environ, name)
    if value is None:
        return Config.sharing_degrees
    degrees: list[int] = []
    for entry in value.split(","):
        degree = parse_bounded_int(entry.strip(), MAX_SHARING_DEGREE)
        if degree is None or degree < 2:
            raise ConfigError(
                f"{name}: {entry.strip()!r} is not a clients-per-GPU count; want whole numbers "
                f"from 2 to {MAX_SHARING_DEGREE} separated by commas, as in 4 or 2,4,8"
            )
        if degree in degrees:
            raise ConfigError(f"{name}: {degree} is listed twice")
        degrees.append(degree)
    return tuple(sorted(degrees))


def _policy(
    environ: Mapping[str, str], presets: Mapping[str, int], max_ratio: int
) -> Policy | None:
    inline = _value(environ, "CASTSLICE_POLICY")
    path = _value(environ, "CASTSLICE_POLICY_FILE")
    if inline is not None and path is not None:
        raise ConfigError("CASTSLICE_POLICY and CASTSLICE_POLICY_FILE are both set; set one")
    if path is not None:
        origin = f"CASTSLICE_POLICY_FILE ({path})"
        try:
            text = read_policy_file(path)
        except PolicyError as error:  # it names the path
            raise ConfigError(f"CASTSLICE_POLICY_FILE: {error}") from None
    elif inline is not None:
        origin, text = "CASTSLICE_POLICY", inline
    else:
        return None
    try:
        return load_policy(text, presets, max_ratio, origin=origin)
    except PolicyError as error:
        raise ConfigError(str(error)) from None


def _path_token(environ: Mapping[str, str]) -> str | None:
    name = "CASTSLICE_PATH_TOKEN"
    value = _value(environ, name)
    if value is None:
        return None
    if not is_path_token(value):
        raise ConfigError(
            f"{name} must be at least {MIN_PATH_TOKEN_LENGTH} characters from "
            "A-Z a-z 0-9 . _ ~ - (it is the last segment of the webhook URL)"
        )
    return value


def _metrics(environ: Mapping[str, str]) -> bool:
    name = "CASTSLICE_METRICS"
    value = _value(environ, name)
    if value is None or value.strip().lower() == "false":
        return False
    if value.strip().lower() != "true":
        raise ConfigError(f"{name}={value!r} must be true or false")
    platform = next((variable for variable in _SERVERLESS_VARIABLES if variable in environ), None)
    if platform is not None:
        raise ConfigError(
            f"{name}=true is refused on Cloud Run and Knative ({platform} is set): the "
            "service's URL is public there and Prometheus metrics are for a cluster's own "
            "Prometheus; use the log-based metrics instead"
        )
    return True


def _device_class(environ: Mapping[str, str], name: str, default: str) -> str:
    value = _value(environ, name)
    if value is None:
        return default
    value = value.strip()
    if not is_dns_subdomain(value):
        raise ConfigError(
            f"{name}={value!r} is not a DeviceClass name: a lowercase DNS subdomain "
            "such as gpu.nvidia.com"
        )
    return value


def _capacity_name(environ: Mapping[str, str], name: str, default: str) -> str:
    value = _value(environ, name)
    if value is None:
        return default
    value = value.strip()
    if not is_capacity_name(value):
        raise ConfigError(
            f"{name}={value!r} is not a device capacity name: at most 32 letters, digits "
            "or '_', not starting with a digit, optionally after a domain and '/', "
            "as in shares"
        )
    return value


# Whole binary units only: each claim's share is then a whole number of MiB, which the
# Helm chart's templates compute exactly as CastSlice does.
_MEMORY_UNITS = {"Mi": MEBIBYTE, "Gi": 2**30, "Ti": 2**40}


def _gpu_memory(environ: Mapping[str, str], name: str) -> int | None:
    """The quantity in bytes, or None when unset."""
    value = _value(environ, name)
    if value is None:
        return None
    value = value.strip()
    number, unit = value[:-2], value[-2:]
    # A leading zero is refused, as the chart's schema does: 080Gi is a typo.
    count = None if number.startswith("0") else parse_bounded_int(number, MAX_GPU_MEMORY)
    size = count * _MEMORY_UNITS[unit] if count is not None and unit in _MEMORY_UNITS else None
    if size is None or size > MAX_GPU_MEMORY:
        raise ConfigError(
            f"{name}={value!r} must be one GPU's memory as a whole number of Mi, Gi or Ti "
            "from 1Mi to 1024Ti, such as 80Gi or 24576Mi"
        )
    return size
