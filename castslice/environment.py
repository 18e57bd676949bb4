"""The configuration read from the CASTSLICE_* environment, validated once at start."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from castslice.backends import BACKENDS, backend_class
from castslice.settings import chart_values as chart
from castslice.settings.config import (
    DEFAULT_PRESETS,
    MEMORY_UNITS,
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
            value = KINDS[entry.kind].parse(self, entry, text)
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


def choices(entry: Setting) -> tuple[str, ...]:
    """What a choice may be: for CASTSLICE_BACKEND the backend table's names, which the
    settings cannot import."""
    found = tuple(BACKENDS) if entry.variable == BACKEND else entry.choices
    assert found is not None, entry.variable
    return found


def _choice(read: _Reader, entry: Setting, value: str) -> str:
    if value.strip() not in choices(entry):
        raise ConfigError(f"{entry.variable}={value!r} must be one of: {', '.join(choices(entry))}")
    return value.strip()


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


Schema = Callable[[Setting, int | None, tuple[str, ...]], dict[str, Any]]
TemplateLines = Callable[[Setting], list[str]]


@dataclass(frozen=True)
class SettingKind:
    """Everything that depends on a setting's kind, in one place: how its variable is read,
    and for a kind the chart sets, what its value may be (JSON Schema), how a template
    writes it back as the variable's text, how it checks a bound by another setting and
    what else the schema cannot state, and the command line's placeholder for it."""

    parse: Callable[[_Reader, Setting, str], Any]
    schema: Schema | None = None
    chart_text: TemplateLines = chart.string_text
    bound_check: TemplateLines | None = None
    chart_checks: TemplateLines | None = None
    metavar: str = "NAME"


KINDS: dict[Kind, SettingKind] = {
    Kind.CHOICE: SettingKind(_choice, chart.choice_schema),
    Kind.COUNT: SettingKind(
        _count, chart.count_schema, chart.count_text, chart.count_bound, metavar="N"
    ),
    Kind.COUNTS: SettingKind(
        _counts, chart.counts_schema, chart.counts_text, chart.counts_bound, metavar="M,..."
    ),
    Kind.RESOURCE: SettingKind(
        _extended_resource, chart.resource_schema, chart_checks=chart.resource_checks
    ),
    Kind.PRESETS: SettingKind(
        _presets,
        chart.presets_schema,
        chart.presets_text,
        chart.presets_bound,
        chart.presets_checks,
        metavar="T=N,...",
    ),
    Kind.PATH_TOKEN: SettingKind(_path_token, chart.path_token_schema),
    Kind.BOOLEAN: SettingKind(_metrics, chart.boolean_schema, chart.boolean_text),
    Kind.DNS_SUBDOMAIN: SettingKind(_device_class, chart.dns_subdomain_schema),
    Kind.CAPACITY: SettingKind(_capacity_name, chart.capacity_schema),
    Kind.MEMORY: SettingKind(_gpu_memory, chart.memory_schema, metavar="QUANTITY"),
    Kind.POLICY: SettingKind(_not_in_the_environment),
    Kind.NAMESPACES: SettingKind(_not_in_the_environment, chart.namespaces_schema),
}
