"""Configuration, read from the environment and validated once at start."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .enrolment import Policy

DEFAULT_PRESETS = "training=4,inference=2,batch=2,dev=1"
SHARING_STRATEGIES = ("time-slicing", "mps")
# The name the NVIDIA device plugin gives a shared GPU with `renameByDefault: true`.
NVIDIA_SHARED_SUFFIX = ".shared"
# Far above any sharing degree a device plugin or GKE offers; keeps the selector values short.
MAX_SHARING_DEGREE = 1000
# Bounds the admin-chosen maximum so quantities and warnings stay short.
MAX_SLICE_RATIO_CEILING = 1_000_000
# A token shorter than this can be guessed; it is the only thing keeping the URL private.
MIN_PATH_TOKEN_LENGTH = 16
# Set by Cloud Run (services, functions, jobs) and Knative Serving, whose URLs are public.
_SERVERLESS_VARIABLES = ("K_SERVICE", "K_CONFIGURATION", "K_REVISION", "CLOUD_RUN_JOB")

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_PATH_TOKEN = re.compile(r"[A-Za-z0-9._~-]+")


class ConfigError(ValueError):
    """An environment variable has a value CastSlice cannot use; the message names it."""


@dataclass(frozen=True)
class Config:
    # Empty means the backend's own default (see default_shared_resource).
    shared_resource: str = ""
    gpu_resource: str = "nvidia.com/gpu"
    presets: Mapping[str, int] = field(
        default_factory=lambda: {"training": 4, "inference": 2, "batch": 2, "dev": 1}
    )
    default_slices: int = 1
    max_slice_ratio: int = 1000
    path_token: str | None = None
    backend: str = "resource"
    slices_per_gpu: int = 4
    sharing_degrees: tuple[int, ...] = (4,)
    sharing_strategy: str = "time-slicing"
    # The enrolment policy (CASTSLICE_POLICY or CASTSLICE_POLICY_FILE); None: annotations only.
    policy: Policy | None = None
    metrics: bool = False
    metrics_port: int = 9090
    # The `dra` backend: the DeviceClass claims name, the device capacity that counts
    # shares, and the memory of one GPU in bytes (None: claims ask for no memory).
    dra_device_class: str = "gpu.nvidia.com"
    dra_capacity: str = "shares"
    dra_gpu_memory: int | None = None

    def __post_init__(self) -> None:
        if not self.shared_resource:
            shared = default_shared_resource(self.backend, self.gpu_resource)
            object.__setattr__(self, "shared_resource", shared)


def default_shared_resource(backend: str, gpu_resource: str) -> str:
    if backend == "nvidia":
        return gpu_resource + NVIDIA_SHARED_SUFFIX
    return "nvidia.com/gpu-shared"


def load_config(environ: Mapping[str, str]) -> Config:
    """Build the configuration from CASTSLICE_* variables; raise ConfigError on any bad value."""
    # Imported here: the backends read Config, so config cannot import them at load.
    from .backends import BACKENDS

    backend = _choice(environ, "CASTSLICE_BACKEND", Config.backend, tuple(BACKENDS))
    gpu = _extended_resource(environ, "CASTSLICE_GPU_RESOURCE", Config.gpu_resource)
    shared = _extended_resource(
        environ, "CASTSLICE_SHARED_RESOURCE", default_shared_resource(backend, gpu)
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
        dra_device_class=_dns_subdomain(
            environ, "CASTSLICE_DRA_DEVICE_CLASS", Config.dra_device_class
        ),
        dra_capacity=_capacity_name(environ, "CASTSLICE_DRA_CAPACITY", Config.dra_capacity),
        dra_gpu_memory=_memory(environ, "CASTSLICE_DRA_GPU_MEMORY"),
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


def extended_resource_problem(name: str) -> str | None:
    """Why `name` cannot be a Kubernetes extended resource, or None when it can.

    Mirrors the API server's rules: a qualified name `domain/name` outside the
    kubernetes.io domain, usable behind the `requests.` quota prefix.
    """
    domain, slash, local = name.partition("/")
    if not slash:
        return "it needs a domain prefix, as in example.com/gpu"
    if len(domain) > 253 or not _DNS_SUBDOMAIN.fullmatch(domain):
        return f"the prefix {domain!r} is not a lowercase DNS subdomain"
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return "the kubernetes.io domain is reserved for native resources"
    if len(local) > 63 or not _QUALIFIED_NAME.fullmatch(local):
        return (
            f"the name {local!r} must be 1-63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def _positive_int(environ: Mapping[str, str], name: str, default: int, upper: int) -> int:
    value = _value(environ, name)
    if value is None:
        return default
    number = parse_bounded_int(value.strip(), upper)
    if number is None:
        raise ConfigError(f"{name}={value!r} must be a whole number from 1 to {upper}")
    return number


def parse_bounded_int(text: str, upper: int) -> int | None:
    """The value of `text` if it is ASCII digits only and from 1 to `upper`, else None."""
    if not text.isascii() or not text.isdigit():
        return None
    # Bounding the length first keeps int() away from huge digit strings.
    digits = text.lstrip("0")
    if not digits or len(digits) > len(str(upper)):
        return None
    number = int(digits)
    return number if number <= upper else None


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
    from .enrolment import PolicyError, load_policy, read_policy_file

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
    if len(value) < MIN_PATH_TOKEN_LENGTH or not _PATH_TOKEN.fullmatch(value):
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


def _dns_subdomain(environ: Mapping[str, str], name: str, default: str) -> str:
    value = _value(environ, name)
    if value is None:
        return default
    value = value.strip()
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ConfigError(
            f"{name}={value!r} is not a DeviceClass name: a lowercase DNS subdomain "
            "such as gpu.nvidia.com"
        )
    return value


# A device capacity's name: a C identifier of at most 32 characters, optionally behind a
# DNS domain (resource.k8s.io/v1 QualifiedName, as for device attributes).
_CAPACITY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")


def _capacity_name(environ: Mapping[str, str], name: str, default: str) -> str:
    value = _value(environ, name)
    if value is None:
        return default
    value = value.strip()
    domain, slash, local = value.rpartition("/")
    if (slash and (len(domain) > 63 or not _DNS_SUBDOMAIN.fullmatch(domain))) or not (
        _CAPACITY_NAME.fullmatch(local)
    ):
        raise ConfigError(
            f"{name}={value!r} is not a device capacity name: at most 32 letters, digits "
            "or '_', not starting with a digit, optionally after a domain and '/', "
            "as in shares"
        )
    return value


# Far above any GPU's memory (1 PiB); keeps quantities short. Below 1 MiB is a typo.
_MAX_GPU_MEMORY = 2**50
MEBIBYTE = 2**20


def _memory(environ: Mapping[str, str], name: str) -> int | None:
    """The quantity in bytes, or None when unset."""
    value = _value(environ, name)
    if value is None:
        return None
    value = value.strip()
    # Only read when set: the Kubernetes client is slow to import.
    from kubernetes.utils.quantity import parse_quantity

    try:
        quantity = parse_quantity(value)
    except ValueError:
        quantity = None
    if quantity is None or not MEBIBYTE <= quantity <= _MAX_GPU_MEMORY:
        raise ConfigError(
            f"{name}={value!r} must be one GPU's memory as a Kubernetes quantity "
            "such as 80Gi or 24576Mi"
        )
    return int(quantity)
