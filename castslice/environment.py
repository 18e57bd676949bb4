"""The configuration read from the CASTSLICE_* environment, validated once at start."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from castslice.backends import SETTING_CHOICES, backend_class
from castslice.settings.config import (
    DEFAULT_PRESETS,
    MEBIBYTE,
    Config,
    ConfigError,
)
from castslice.settings.enrolment_policy import PolicyError, load_policy, read_policy_file
from castslice.settings.names import (
    MIN_PATH_TOKEN_LENGTH,
    extended_resource_problem,
    is_capacity_name,
    is_dns_subdomain,
    is_path_token,
    parse_bounded_int,
)
from castslice.settings.rules import Policy
from castslice.settings.table import (
    BACKEND,
    GPU_RESOURCE,
    MAX_SLICE_RATIO,
    Kind,
    Setting,
    environment_text,
    setting,
)

# Set by Cloud Run (services, functions, jobs) and Knative Serving, whose URLs are public.
_SERVERLESS_VARIABLES = ("K_SERVICE", "K_CONFIGURATION", "K_REVISION", "CLOUD_RUN_JOB")


def load_config(environ: Mapping[str, str]) -> Config:
    """Build the configuration from CASTSLICE_* variables; raise ConfigError on any bad value."""
    read = _Reader(environ)
    backend = read(BACKEND)
    gpu = read(GPU_RESOURCE)
    shared = read("CASTSLICE_SHARED_RESOURCE", backend_class(backend).default_shared_resource(gpu))
    if shared == gpu:
        raise ConfigError(
            f"CASTSLICE_SHARED_RESOURCE and CASTSLICE_GPU_RESOURCE are both {gpu!r}; "
            "the shared resource must differ from the one it replaces"
        )
    max_ratio = read(MAX_SLICE_RATIO)
    presets = read("CASTSLICE_PRESETS")
    return Config(
        shared_resource=shared,
        gpu_resource=gpu,
        presets=presets,
        default_slices=read("CASTSLICE_DEFAULT_SLICES"),
        max_slice_ratio=max_ratio,
        path_token=read("CASTSLICE_PATH_TOKEN"),
        backend=backend,
        slices_per_gpu=read("CASTSLICE_SLICES_PER_GPU"),
        sharing_degrees=read("CASTSLICE_SHARING_DEGREES"),
        sharing_strategy=read("CASTSLICE_SHARING_STRATEGY"),
        policy=_policy(environ, presets, max_ratio),
        metrics=read("CASTSLICE_METRICS"),
        metrics_port=read("CASTSLICE_METRICS_PORT"),
        dra_device_class=read("CASTSLICE_DRA_DEVICE_CLASS"),
        dra_capacity=read("CASTSLICE_DRA_CAPACITY"),
        dra_gpu_memory=read("CASTSLICE_DRA_GPU_MEMORY"),
        mig_gpu_models=read("CASTSLICE_MIG_GPU_MODELS"),
        mig_profiles=read("CASTSLICE_MIG_PROFILES"),
        mig_stack=read("CASTSLICE_MIG_STACK"),
        mig_fit=read("CASTSLICE_MIG_FIT"),
        mig_whole_gpu=read("CASTSLICE_MIG_WHOLE_GPU"),
    )


_FROM_TABLE = object()


class _Reader:
    """Each variable parsed as its kind in the settings table says, within its bounds."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.read: dict[str, Any] = {}

    def __call__(self, variable: str, default: Any = _FROM_TABLE) -> Any:
        entry = setting(variable)
        text = _value(self.environ, variable)
        if text is None and not isinstance(entry.maximum, str):
            value = entry.default if default is _FROM_TABLE else default
            value = tuple(value) if isinstance(value, list) else value
        else:
            # A bound set by another setting holds for the default too.
            if text is None:
                text = environment_text(entry.default)
            value = _PARSERS[entry.kind](self, entry, text)
        self.read[variable] = value
        return value

    def upper(self, entry: Setting) -> int:
        bound = entry.maximum
        if isinstance(bound, str):
            return self.read[bound] if bound in self.read else self(bound)
        assert bound is not None, entry.variable
        return bound

    def environ_has(self, name: str) -> bool:
        return name in self.environ


def _value(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    if value is not None and not value.strip():
        raise ConfigError(f"{name} is set but empty; unset it to use the default")
    return value


def _extended_resource(read: _Reader, entry: Setting, value: str) -> str:
    value = value.strip()
    problem = extended_resource_problem(value)
    if problem:
        raise ConfigError(
            f"{entry.variable}={value!r} is not a valid extended resource name: {problem}"
        )
    return value


def _count(read: _Reader, entry: Setting, value: str) -> int:
    upper = read.upper(entry)
    number = parse_bounded_int(value.strip(), upper)
    if number is None or number < entry.minimum:
        raise ConfigError(
            f"{entry.variable}={value!r} must be a whole number from {entry.minimum} to {upper}"
        )
    return number


def _presets(read: _Reader, entry: Setting, value: str) -> dict[str, int]:
    name, most = entry.variable, read.upper(entry)
    presets: dict[str, int] = {}
    for item in value.split(","):
        key, equals, count = (part.strip() for part in item.partition("="))
        if not equals or not key:
            raise ConfigError(
                f"{name}: entry {item.strip()!r} is not of the form type=slices, "
                f"as in {DEFAULT_PRESETS}"
            )
        slices = parse_bounded_int(count, most)
        if slices is None:
            raise ConfigError(
                f"{name}: the slice count of {key!r} must be a whole number from 1 to {most}"
            )
        if key in presets:
            raise ConfigError(f"{name}: workload type {key!r} is listed twice")
        presets[key] = slices
    return presets


def _choices_of(entry: Setting) -> tuple[str, ...]:
    # What the backends name (their own names, MIG profiles) the settings cannot import.
    choices = SETTING_CHOICES.get(entry.variable, entry.choices)
    assert choices is not None, entry.variable
    return choices


def _choice(read: _Reader, entry: Setting, value: str) -> str:
    choices = _choices_of(entry)
    if value.strip() not in choices:
        raise ConfigError(f"{entry.variable}={value!r} must be one of: {', '.join(choices)}")
    return value.strip()


def _some_choices(read: _Reader, entry: Setting, value: str) -> tuple[str, ...]:
    choices = _choices_of(entry)
    chosen: list[str] = []
    for item in (item.strip() for item in value.split(",")):
        if item not in choices:
            raise ConfigError(
                f"{entry.variable}: {item!r} is not one of: {', '.join(choices)} (comma-separated)"
            )
        if item in chosen:
            raise ConfigError(f"{entry.variable}: {item} is listed twice")
        chosen.append(item)
    return tuple(chosen)


def _counts(read: _Reader, entry: Setting, value: str) -> tuple[int, ...]:
    name, upper = entry.variable, read.upper(entry)
    counts: list[int] = []
    for item in value.split(","):
        count = parse_bounded_int(item.strip(), upper)
        if count is None or count < entry.minimum:
            raise ConfigError(
                f"{name}: {item.strip()!r} is not {entry.noun}; want whole numbers "
                f"from {entry.minimum} to {upper} separated by commas, as in 4 or 2,4,8"
            )
        if count in counts:
            raise ConfigError(f"{name}: {count} is listed twice")
        counts.append(count)
    return tuple(sorted(counts))


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


def _path_token(read: _Reader, entry: Setting, value: str) -> str:
    if not is_path_token(value):
        raise ConfigError(
            f"{entry.variable} must be at least {MIN_PATH_TOKEN_LENGTH} characters from "
            "A-Z a-z 0-9 . _ ~ - (it is the last segment of the webhook URL)"
        )
    return value


def _metrics(read: _Reader, entry: Setting, value: str) -> bool:
    name = entry.variable
    if value.strip().lower() == "false":
        return False
    if value.strip().lower() != "true":
        raise ConfigError(f"{name}={value!r} must be true or false")
    platform = next(
        (variable for variable in _SERVERLESS_VARIABLES if read.environ_has(variable)), None
    )
    if platform is not None:
        raise ConfigError(
            f"{name}=true is refused on Cloud Run and Knative ({platform} is set): the "
            "service's URL is public there and Prometheus metrics are for a cluster's own "
            "Prometheus; use the log-based metrics instead"
        )
    return True


def _device_class(read: _Reader, entry: Setting, value: str) -> str:
    name = entry.variable
    value = value.strip()
    if not is_dns_subdomain(value):
        raise ConfigError(
            f"{name}={value!r} is not a DeviceClass name: a lowercase DNS subdomain "
            "such as gpu.nvidia.com"
        )
    return value


def _capacity_name(read: _Reader, entry: Setting, value: str) -> str:
    name = entry.variable
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
MEMORY_UNITS = {"Mi": MEBIBYTE, "Gi": 2**30, "Ti": 2**40}


def _gpu_memory(read: _Reader, entry: Setting, value: str) -> int:
    """The quantity in bytes."""
    name, most = entry.variable, read.upper(entry)
    value = value.strip()
    number, unit = value[:-2], value[-2:]
    # A leading zero is refused, as the chart's schema does: 080Gi is a typo.
    count = None if number.startswith("0") else parse_bounded_int(number, most)
    size = count * MEMORY_UNITS[unit] if count is not None and unit in MEMORY_UNITS else None
    if size is None or size > most:
        raise ConfigError(
            f"{name}={value!r} must be one GPU's memory as a whole number of Mi, Gi or Ti "
            "from 1Mi to 1024Ti, such as 80Gi or 24576Mi"
        )
    return size


def _not_in_the_environment(read: _Reader, entry: Setting, value: str) -> None:
    raise AssertionError(f"{entry.variable} is read by its own code, not the table's parsers")


_PARSERS: dict[Kind, Callable[[_Reader, Setting, str], Any]] = {
    Kind.CHOICE: _choice,
    Kind.CHOICES: _some_choices,
    Kind.COUNT: _count,
    Kind.COUNTS: _counts,
    Kind.RESOURCE: _extended_resource,
    Kind.PRESETS: _presets,
    Kind.PATH_TOKEN: _path_token,
    Kind.BOOLEAN: _metrics,
    Kind.DNS_SUBDOMAIN: _device_class,
    Kind.CAPACITY: _capacity_name,
    Kind.MEMORY: _gpu_memory,
    Kind.POLICY: _not_in_the_environment,
    Kind.NAMESPACES: _not_in_the_environment,
}
