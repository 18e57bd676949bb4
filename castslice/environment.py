"""The configuration read from the CASTSLICE_* environment, validated once at start."""

from __future__ import annotations

import difflib
import fnmatch
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from castslice.backends import SETTING_CHOICES, foreign_profiles, placer_class
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
    GPU_MEMORY,
    GPU_RESOURCE,
    MAX_SLICE_RATIO,
    SCHEDULER_NAME,
    SETTINGS,
    STRICT_SETTINGS,
    Kind,
    Setting,
    environment_text,
    setting,
)

# Set by Cloud Run (services, functions, jobs) and Knative Serving, whose URLs are public.
_SERVERLESS_VARIABLES = ("K_SERVICE", "K_CONFIGURATION", "K_REVISION", "CLOUD_RUN_JOB")


PREFIX = "CASTSLICE_"
# The project's own variables that are no settings: the test suite's and the release
# build's (docs/development.md). The application never reads them, so they are never
# taken for a misspelt setting. A new one belongs under CASTSLICE_E2E_ or in this list.
DEVELOPMENT_VARIABLES = (
    "CASTSLICE_E2E_*",
    "CASTSLICE_UPDATE_GOLDEN",
    "CASTSLICE_FUZZ_EXAMPLES",
    "CASTSLICE_KUBE_CACHE",
    "CASTSLICE_HELM_CACHE",
    "CASTSLICE_TOOLKIT_CACHE",
    "CASTSLICE_CLOUD_BUILD_STEP",
    "CASTSLICE_ARTEFACT_DRAW",
)
KNOWN_SETTINGS = tuple(entry.variable for entry in SETTINGS if entry.in_environment)
# What the kubelet sets for each Service in a Pod's namespace (enableServiceLinks, on by
# default): a Service named castslice-report gives the names <PREFIX>REPORT_SERVICE_HOST and
# <PREFIX>REPORT_PORT=tcp://10.0.0.7:9100. Such a name is passed over only when its value
# has the kubelet's form too, so CASTSLICE_METRIC_PORT=9191 is still a misspelling.
_SERVICE_LINK = re.compile(
    r"_(?:(?P<host>SERVICE_HOST)|(?P<port>SERVICE_PORT(?:_[A-Z0-9_]+)?)"
    r"|(?P<url>PORT(?:_[0-9]+_(?:TCP|UDP|SCTP))?)|(?P<number>PORT_[0-9]+_(?:TCP|UDP|SCTP)_PORT)"
    r"|(?P<proto>PORT_[0-9]+_(?:TCP|UDP|SCTP)_PROTO)|(?P<address>PORT_[0-9]+_(?:TCP|UDP|SCTP)_ADDR))$"
)


class UnknownSetting(NamedTuple):
    """A CASTSLICE_* name in the environment that is no setting, and the setting nearest it."""

    name: str
    closest: str | None

    @property
    def hint(self) -> str:
        if self.closest is None:
            return "no setting is close; docs/configuration.md lists them"
        return f"did you mean {self.closest}?"

    def __str__(self) -> str:
        return f"{self.name} ({self.hint})"


def unknown_settings(environ: Mapping[str, str]) -> tuple[UnknownSetting, ...]:
    """Every CASTSLICE_* name the application would ignore: a misspelt or retired setting.

    The variable's value is never looked at, except to tell a Service link the kubelet
    set from a setting someone wrote.
    """
    unknown = []
    for name in sorted(environ):
        if not name.startswith(PREFIX) or name in KNOWN_SETTINGS:
            continue
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in DEVELOPMENT_VARIABLES):
            continue
        if _is_service_link(name, environ[name]):
            continue
        unknown.append(UnknownSetting(name, _closest(name)))
    return tuple(unknown)


def _closest(name: str) -> str | None:
    # Compared without the prefix every name shares, which would make any two look alike.
    suffixes = {known.removeprefix(PREFIX): known for known in KNOWN_SETTINGS}
    match = difflib.get_close_matches(name.removeprefix(PREFIX), suffixes, n=1, cutoff=0.6)
    return suffixes[match[0]] if match else None


def _is_service_link(name: str, value: str) -> bool:
    shape = _SERVICE_LINK.search(name)
    if shape is None:
        return False
    kind = shape.lastgroup
    if kind in ("host", "address"):
        return _is_ip_address(value)
    if kind in ("port", "number"):
        return value.isascii() and value.isdigit()
    if kind == "proto":
        return value in ("tcp", "udp", "sctp")
    scheme, separator, rest = value.partition("://")
    return bool(separator) and scheme in ("tcp", "udp", "sctp") and ":" in rest


def _is_ip_address(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def load_config(environ: Mapping[str, str]) -> Config:
    """Build the configuration from CASTSLICE_* variables; raise ConfigError on any bad value.

    A CASTSLICE_* name that is no setting is ignored here (its callers warn of it, see
    unknown_settings), or refused under CASTSLICE_STRICT_SETTINGS=true.
    """
    read = _Reader(environ)
    if read(STRICT_SETTINGS):
        unknown = unknown_settings(environ)
        if unknown:
            raise ConfigError(
                f"{STRICT_SETTINGS}=true refuses names that are not settings: "
                + "; ".join(str(name) for name in unknown)
            )
    backend = read(BACKEND)
    gpu = read(GPU_RESOURCE)
    shared = read("CASTSLICE_SHARED_RESOURCE", placer_class(backend).default_shared_resource(gpu))
    if shared == gpu:
        raise ConfigError(
            f"CASTSLICE_SHARED_RESOURCE and CASTSLICE_GPU_RESOURCE are both {gpu!r}; "
            "the shared resource must differ from the one it replaces"
        )
    max_ratio = read(MAX_SLICE_RATIO)
    presets = read("CASTSLICE_PRESETS")
    config = Config(
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
        gpu_memory=read(GPU_MEMORY),
        gpu_memory_enforced_only=read("CASTSLICE_GPU_MEMORY_ENFORCED_ONLY"),
        scheduler_name=read(SCHEDULER_NAME),
        mig_gpu_models=read("CASTSLICE_MIG_GPU_MODELS"),
        mig_profiles=read("CASTSLICE_MIG_PROFILES"),
        mig_stack=read("CASTSLICE_MIG_STACK"),
        mig_fit=read("CASTSLICE_MIG_FIT"),
        mig_whole_gpu=read("CASTSLICE_MIG_WHOLE_GPU"),
        mig_time_shared_clients=read("CASTSLICE_MIG_TIME_SHARED_CLIENTS"),
        mig_product_names=read("CASTSLICE_MIG_PRODUCT_NAMES") or {},
    )
    refusal = foreign_profiles(config)
    if refusal is not None:
        raise ConfigError(refusal)
    if config.metrics:
        _refuse_on_serverless(environ)
    _refuse_what_the_backend_cannot_take(read, backend)
    return config


def _refuse_what_the_backend_cannot_take(read: _Reader, backend: str) -> None:
    for entry in SETTINGS:
        if entry.backend_refusal is None or read.read.get(entry.variable) is None:
            continue
        refusal = getattr(placer_class(backend), entry.backend_refusal)
        if refusal:
            raise ConfigError(f"{entry.variable} is set, but with {BACKEND}={backend} {refusal}")


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
    """What a choice may be: for what the backends name (their own names, the MIG profile
    table's models and profiles) the backend table's, which the settings cannot import."""
    found = SETTING_CHOICES.get(entry.variable, entry.choices)
    assert found is not None, entry.variable
    return found


def _choice(read: _Reader, entry: Setting, value: str) -> str:
    if value.strip() not in choices(entry):
        raise ConfigError(
            f"{entry.variable}={value!r} must be one of: {', '.join(choices(entry))}"
            + _did_you_mean(value.strip(), choices(entry))
        )
    return value.strip()


def _did_you_mean(given: str, allowed: tuple[str, ...]) -> str:
    """`; did you mean H200?` for `h200`, or nothing where no choice is near. A choice inside
    what was given is no answer: a GH200 is not an H200."""
    same = [choice for choice in allowed if choice.casefold() == given.casefold()]
    close = difflib.get_close_matches(given, allowed, n=3, cutoff=0.75)
    near = same or [c for c in close if c.casefold() not in given.casefold()]
    return f"; did you mean {near[0]}?" if near else ""


def _some_choices(read: _Reader, entry: Setting, value: str) -> tuple[str, ...]:
    allowed = choices(entry)
    chosen: list[str] = []
    for item in (item.strip() for item in value.split(",")):
        if item not in allowed:
            raise ConfigError(
                f"{entry.variable}: {item!r} is not one of: {', '.join(allowed)} "
                f"(comma-separated){_did_you_mean(item, allowed)}"
            )
        if item in chosen:
            raise ConfigError(f"{entry.variable}: {item} is listed twice")
        chosen.append(item)
    return tuple(chosen)


def _product_names(read: _Reader, entry: Setting, value: str) -> dict[str, tuple[str, ...]]:
    """MODEL=NAME entries: more names a model's boards report (NVML's name, or GPU Feature
    Discovery's `nvidia.com/gpu.product`), each given to one model."""
    models = choices(entry)
    found: dict[str, tuple[str, ...]] = {}
    owner: dict[str, str] = {}
    for item in value.split(","):
        model, equals, name = (part.strip() for part in item.partition("="))
        if not equals or not name or any(c in name for c in "\t\n\r"):
            raise ConfigError(
                f"{entry.variable}: entry {item.strip()!r} is not of the form MODEL=NAME, "
                "as in H200=NVIDIA H200 NVL"
            )
        if model not in models:
            raise ConfigError(
                f"{entry.variable}: {model!r} is not one of: {', '.join(models)}"
                + _did_you_mean(model, models)
            )
        if name in owner:
            raise ConfigError(f"{entry.variable}: {name!r} is given to {owner[name]} already")
        owner[name] = model
        found[model] = (*found.get(model, ()), name)
    return found


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


def _boolean(read: _Reader, entry: Setting, value: str) -> bool:
    if value.strip().lower() == "false":
        return False
    if value.strip().lower() != "true":
        raise ConfigError(f"{entry.variable}={value!r} must be true or false")
    return True


def _refuse_on_serverless(environ: Mapping[str, str]) -> None:
    platform = next((variable for variable in _SERVERLESS_VARIABLES if variable in environ), None)
    if platform is not None:
        raise ConfigError(
            f"CASTSLICE_METRICS=true is refused on Cloud Run and Knative ({platform} is set): "
            "the service's URL is public there and Prometheus metrics are for a cluster's own "
            "Prometheus; use the log-based metrics instead"
        )


def _device_class(read: _Reader, entry: Setting, value: str) -> str:
    name = entry.variable
    value = value.strip()
    if not is_dns_subdomain(value):
        raise ConfigError(
            f"{name}={value!r} is not {entry.noun}: a lowercase DNS subdomain "
            "(lowercase letters, digits, '-' and '.'), as gpu.nvidia.com"
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


@dataclass(frozen=True)
class SettingKind:
    """How a setting of a kind is read from its variable, and the command line's placeholder
    for it. What the chart makes of the kind is beside it in
    castslice.render.chart_values.CHART_KINDS, which the webhook never loads."""

    parse: Callable[[_Reader, Setting, str], Any]
    metavar: str = "NAME"


KINDS: dict[Kind, SettingKind] = {
    Kind.CHOICE: SettingKind(_choice),
    Kind.CHOICES: SettingKind(_some_choices, metavar="NAME,..."),
    Kind.COUNT: SettingKind(_count, metavar="N"),
    Kind.COUNTS: SettingKind(_counts, metavar="M,..."),
    Kind.RESOURCE: SettingKind(_extended_resource),
    Kind.PRESETS: SettingKind(_presets, metavar="T=N,..."),
    Kind.PRODUCT_NAMES: SettingKind(_product_names, metavar="MODEL=NAME,..."),
    Kind.PATH_TOKEN: SettingKind(_path_token),
    Kind.BOOLEAN: SettingKind(_boolean),
    Kind.DNS_SUBDOMAIN: SettingKind(_device_class),
    Kind.CAPACITY: SettingKind(_capacity_name),
    Kind.MEMORY: SettingKind(_gpu_memory, metavar="QUANTITY"),
    Kind.POLICY: SettingKind(_not_in_the_environment),
    Kind.NAMESPACES: SettingKind(_not_in_the_environment),
}
