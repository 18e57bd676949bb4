"""Every CASTSLICE_* setting in one table: its variable, its chart value, its kind, its range,
its default and the rules it keeps with other settings.

castslice.environment validates the environment with it; castslice.render.chart_and_docs
writes from it the chart's values.schema.json, its documented defaults in values.yaml, the
template helper that refuses what a schema cannot state, and docs/configuration.md's table.
A bound that names another setting (`maximum="CASTSLICE_MAX_SLICE_RATIO"`) is a rule
between the two, checked wherever the table is.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from castslice.settings.config import (
    DEFAULT_PRESETS,
    MAX_GKE_SHARED_CLIENTS,
    MAX_GPU_MEMORY,
    MAX_SHARING_DEGREE,
    MAX_SLICE_RATIO_CEILING,
    MIG_FITS,
    MIG_STACKS,
    MIG_WHOLE_GPU,
    MIN_GKE_SHARED_CLIENTS,
    SHARING_STRATEGIES,
    Config,
)


class Kind(Enum):
    """What a setting's text is; each kind has one parser (environment) and one schema."""

    # One of `choices` (for CASTSLICE_BACKEND: the backend table's names, which only a
    # face may know).
    CHOICE = "choice"
    # Some of `choices` (or of what the backends name, as for CHOICE), comma-separated,
    # each once.
    CHOICES = "choices"
    # A whole number from `minimum` to `maximum`.
    COUNT = "count"
    # Whole numbers from `minimum` to `maximum`, comma-separated, each once.
    COUNTS = "counts"
    # An extended resource name, domain/name, outside kubernetes.io.
    RESOURCE = "resource"
    # type=slices, comma-separated, each type once; each count from 1 to `maximum`.
    PRESETS = "presets"
    # A URL path segment of at least MIN_PATH_TOKEN_LENGTH unreserved characters.
    PATH_TOKEN = "path-token"
    BOOLEAN = "boolean"
    # A lowercase DNS subdomain (a DeviceClass name).
    DNS_SUBDOMAIN = "dns-subdomain"
    # A device capacity's qualified name.
    CAPACITY = "capacity"
    # MODEL=NAME, comma-separated: names for `choices` (the MIG profile table's models).
    PRODUCT_NAMES = "product-names"
    # A whole number of Mi, Gi or Ti up to `maximum` bytes.
    MEMORY = "memory"
    # The enrolment policy, as text or as a file's path; the chart writes it itself.
    POLICY = "policy"
    # Namespace names (a list of DNS labels); the chart's alone.
    NAMESPACES = "namespaces"


# The upper bound of every slice count, the rule CASTSLICE_MAX_SLICE_RATIO keeps with them.
MAX_SLICE_RATIO = "CASTSLICE_MAX_SLICE_RATIO"
BACKEND = "CASTSLICE_BACKEND"
GPU_RESOURCE = "CASTSLICE_GPU_RESOURCE"
STRICT_SETTINGS = "CASTSLICE_STRICT_SETTINGS"
SCHEDULER_NAME = "CASTSLICE_SCHEDULER_NAME"
GPU_MEMORY = "CASTSLICE_GPU_MEMORY"


@dataclass(frozen=True)
class Setting:
    # The environment variable, or for a setting of the chart alone its value's path.
    variable: str
    # The chart's value (a dotted path) or None: the chart does not set it.
    value: str | None
    kind: Kind
    # The application's default, as the chart's values.yaml writes it (None: unset).
    default: object
    # What docs/configuration.md says it does (Markdown).
    meaning: str
    # The default as docs/configuration.md says it, where the value alone does not.
    default_text: str | None = None
    # A comment for values.yaml above the value, where its name does not say enough.
    chart_note: str | None = None
    minimum: int = 1
    # An int, or the variable of the setting that bounds this one.
    maximum: int | str | None = None
    choices: tuple[str, ...] | None = None
    # The variable of a setting this one may never equal (with this one's default derived
    # from it through the backend when unset).
    differs_from: str | None = None
    # A number the chart keeps for itself (the webhook's own port).
    reserved: int | None = None
    # What one entry of a COUNTS setting is, for its refusal.
    noun: str = "a count"
    # The command line's flag for it (castslice.cli.flags), or None: none.
    flag: str | None = None
    # What the flag sets, for the command line's help.
    flag_help: str = ""
    # The chart keeps the value in a Secret: the Deployment reads it from there, and the
    # environment block (templates/_settings.tpl) leaves it out.
    secret: bool = False
    # The variable of a boolean setting without which the chart leaves this one out.
    chart_when: str | None = None
    # The Backend attribute saying why a backend refuses this setting when it is set (None
    # there: the backend takes it); the application and the chart refuse the same.
    backend_refusal: str | None = None
    # The backend whose setting this is (None: every backend's), and the value another
    # setting must have for it to do anything, e.g. ("CASTSLICE_MIG_STACK", ("gke",)).
    used_by: str | None = None
    used_when: tuple[str, tuple[str, ...]] | None = None

    @property
    def in_environment(self) -> bool:
        return self.variable.startswith("CASTSLICE_")


SETTINGS: tuple[Setting, ...] = (
    Setting(
        BACKEND, "backend", Kind.CHOICE, Config.backend,
        "How Pods share GPUs: `resource`, `nvidia`, `gke`, `dra` or `mig` "
        "([backends.md](backends.md)). "
        "With `nvidia` and `gke`, Pods that get whole GPUs (by default every preset but `dev`) "
        "need GPU nodes without sharing ([backends.md](backends.md#whole-gpu-pods)).",
        chart_note="docs/backends.md",
        flag="--backend",
        flag_help="how Pods are placed",
    ),
    Setting(
        "CASTSLICE_SLICES_PER_GPU", "slicesPerGpu", Kind.COUNT, Config.slices_per_gpu,
        "Slices that make one whole GPU (`S`). With 4, `training` (4) is one GPU, `inference` "
        "(2) half, `dev` (1) a quarter. 1 to `CASTSLICE_MAX_SLICE_RATIO`.",
        maximum=MAX_SLICE_RATIO,
        flag="--slices-per-gpu",
        flag_help="slices that make one GPU",
    ),
    Setting(
        "CASTSLICE_SHARING_DEGREES", "sharingDegrees", Kind.COUNTS, list(Config.sharing_degrees),
        "Clients per GPU that your sharing nodes offer (NVIDIA `replicas`, GKE "
        "`max-shared-clients-per-gpu`), comma-separated, each 2 to 1000, e.g. `2,4`. "
        "Not used by `resource`.",
        chart_note="Clients per GPU of the node pools or device-plugin configs (nvidia, gke).",
        minimum=2,
        maximum=MAX_SHARING_DEGREE,
        noun="a clients-per-GPU count",
        flag="--sharing-degrees",
        flag_help="clients per GPU the sharing nodes offer, e.g. 2,4",
    ),
    Setting(
        "CASTSLICE_SHARING_STRATEGY", "sharingStrategy", Kind.CHOICE, Config.sharing_strategy,
        "`time-slicing` or `mps`, as on your sharing nodes (GKE calls them `time-sharing` and "
        "`mps`). Not used by `resource`.",
        chart_note="nvidia, gke",
        choices=SHARING_STRATEGIES,
        flag="--sharing-strategy",
        flag_help="time-slicing or mps",
    ),
    Setting(
        "CASTSLICE_SHARED_RESOURCE", "sharedResource", Kind.RESOURCE, None,
        "The resource a shared Pod asks for. An extended resource name with a domain, not "
        "`kubernetes.io`, different from `CASTSLICE_GPU_RESOURCE`. Not used by `gke`.",
        default_text="`nvidia.com/gpu-shared`; with `nvidia`, `nvidia.com/gpu.shared`",
        chart_note="null: the backend's default (nvidia.com/gpu-shared; nvidia.com/gpu.shared "
        "for nvidia).",
        differs_from=GPU_RESOURCE,
        flag="--shared-resource",
        flag_help="the resource written",
    ),
    Setting(
        GPU_RESOURCE, "gpuResource", Kind.RESOURCE, Config.gpu_resource,
        "The resource that is rewritten.",
        flag="--gpu-resource",
        flag_help="the resource rewritten",
    ),
    Setting(
        "CASTSLICE_PRESETS", "presets", Kind.PRESETS, dict(Config().presets),
        "Workload types for `castops.io/workload-type`: `type=slices`, comma-separated, each "
        "listed once; each count 1 to `CASTSLICE_MAX_SLICE_RATIO`.",
        default_text=f"`{DEFAULT_PRESETS}`",
        chart_note="Workload type -> slice count. Helm merges maps with the defaults: set a "
        "default type to null to drop it.",
        maximum=MAX_SLICE_RATIO,
        flag="--presets",
        flag_help="workload types and their slices",
    ),
    Setting(
        "CASTSLICE_DEFAULT_SLICES", "defaultSlices", Kind.COUNT, Config.default_slices,
        "Slices when neither the annotations nor a policy rule give a valid count. 1 to "
        "`CASTSLICE_MAX_SLICE_RATIO`.",
        maximum=MAX_SLICE_RATIO,
        flag="--default-slices",
        flag_help="slices when no annotation or policy rule gives a count",
    ),
    Setting(
        MAX_SLICE_RATIO, "maxSliceRatio", Kind.COUNT, Config.max_slice_ratio,
        "Upper bound for `castops.io/slice-ratio`, at most 1000000. The slices per GPU, the "
        "presets and the default must fit under it.",
        maximum=MAX_SLICE_RATIO_CEILING,
        flag="--max-slice-ratio",
        flag_help="the most slices a Pod may ask for",
    ),
    Setting(
        "CASTSLICE_POLICY", None, Kind.POLICY, None,
        "The [enrolment policy](#enrolment-policy), inline YAML or JSON.",
    ),
    Setting(
        "CASTSLICE_POLICY_FILE", None, Kind.POLICY, None,
        "A file holding the policy (at most 1 MiB, UTF-8). Set one of the two, not both.",
    ),
    Setting(
        "CASTSLICE_PATH_TOKEN", "pathToken", Kind.PATH_TOKEN, None,
        "When set, a review is served only when the last path segment of the URL equals it; "
        "any other path gets a bare 404. At least 16 characters of `A-Z a-z 0-9 . _ ~ -`. "
        "For a public URL ([security.md](security.md)).",
        chart_note="The last path segment the API server calls; null: none. Kept in a Secret.",
        secret=True,
    ),
    Setting(
        "CASTSLICE_METRICS", "metrics.enabled", Kind.BOOLEAN, Config.metrics,
        "`true` serves Prometheus metrics on a port of their own. Refused at start on Cloud "
        "Run and Knative, whose URL is public "
        "([operate.md](operate.md#prometheus-metrics-in-the-cluster)).",
    ),
    Setting(
        "CASTSLICE_METRICS_PORT", "metrics.port", Kind.COUNT, Config.metrics_port,
        "The metrics port, 1 to 65535.",
        maximum=65535,
        reserved=8443,
        chart_when="CASTSLICE_METRICS",
    ),
    Setting(
        "CASTSLICE_DRA_DEVICE_CLASS", "draDeviceClass", Kind.DNS_SUBDOMAIN,
        Config.dra_device_class,
        "`dra`: the DeviceClass every claim names, a lowercase DNS subdomain.",
        chart_note="The dra backend: the DeviceClass and the capacity its claims request.",
        noun="a DeviceClass name",
        flag="--dra-device-class",
        flag_help="the DeviceClass the dra backend's claims name",
        used_by="dra",
    ),
    Setting(
        "CASTSLICE_DRA_CAPACITY", "draCapacity", Kind.CAPACITY, Config.dra_capacity,
        "`dra`: the device capacity that counts shares (the NVIDIA DRA driver's "
        "`--consumable-shares`); at most 32 letters, digits or `_`, optionally after a domain "
        "and `/`.",
        flag="--dra-capacity",
        flag_help="the device capacity the dra backend's claims request shares of",
        used_by="dra",
    ),
    Setting(
        "CASTSLICE_DRA_GPU_MEMORY", "draGpuMemory", Kind.MEMORY, None,
        "`dra`: one GPU's memory, a whole number of `Mi`, `Gi` or `Ti` from `1Mi` to `1024Ti` "
        "(`80Gi`); each fractional claim then also asks for `s/S` of it as `memory`, rounded "
        "up to whole MiB. Whole-device claims never ask for memory "
        "([backends.md](backends.md#dra)).",
        chart_note="The GPU memory each dra claim asks for a share of (null: none; else a "
        "whole number of Mi, Gi or Ti from 1Mi to 1024Ti, as 80Gi).",
        maximum=MAX_GPU_MEMORY,
        flag="--dra-gpu-memory",
        flag_help="one GPU's memory, e.g. 80Gi: dra claims then request their share of it",
        used_by="dra",
    ),
    Setting(
        GPU_MEMORY, "gpuMemory", Kind.MEMORY, None,
        "One GPU's memory on the sharing nodes (the smallest, where they differ), a whole "
        "number of `Mi`, `Gi` or `Ti` (`143771Mi` on H200 nodes: GPU Feature Discovery's "
        "`nvidia.com/gpu.memory` label, in MiB). Set, every opted-in container that gets a "
        "fraction of a GPU without MIG gets `NVIDIA_GPU_MEMORY_REQUEST` and "
        "`NVIDIA_GPU_MEMORY_LIMIT`, its share of it in MiB, which an NVIDIA driver 615 or "
        "later enforces ([backends.md](backends.md#gpu-memory-limits)).",
        default_text="no GPU memory limits",
        chart_note="GPU memory limits the driver enforces: one GPU's memory (null: none; "
        "else a whole number of Mi, Gi or Ti, as 143771Mi), and whether Pods with limits "
        "are kept on nodes whose driver enforces them.",
        maximum=MAX_GPU_MEMORY,
        flag="--gpu-memory",
        flag_help="one GPU's memory, e.g. 143771Mi: fractional Pods then get memory limits",
    ),
    Setting(
        "CASTSLICE_GPU_MEMORY_ENFORCED_ONLY", "gpuMemoryEnforcedOnly", Kind.BOOLEAN,
        Config.gpu_memory_enforced_only,
        "With `CASTSLICE_GPU_MEMORY`: `true` keeps each Pod given memory limits on nodes "
        "that GPU Feature Discovery labels with a driver of 615 or later "
        "(`nvidia.com/cuda.driver-version.major`) and at least that much memory per GPU "
        "(`nvidia.com/gpu.memory`); `false` places it as before, for clusters whose every "
        "sharing node enforces the limits or runs no toolkit hook that reads them "
        "([backends.md](backends.md#gpu-memory-limits)).",
        flag="--gpu-memory-enforced-only",
        flag_help="true: Pods with GPU memory limits only go to nodes that enforce them",
    ),
    Setting(
        SCHEDULER_NAME, "schedulerName", Kind.DNS_SUBDOMAIN, None,
        "`dra`: the scheduler every Pod CastSlice rewrites is sent to: its "
        "`spec.schedulerName`, where it is `default-scheduler`, becomes this (a second "
        "kube-scheduler, the chart's `extender.scheduler`); a Pod that names another "
        "scheduler is left unchanged, with a warning. Refused with the other backends "
        "([backends.md](backends.md#a-second-scheduler)).",
        chart_note="The dra backend: the second kube-scheduler opted-in Pods are sent to "
        "(null: none; extender.scheduler.enabled runs one under this name).",
        noun="a scheduler name",
        backend_refusal="scheduler_name_refusal",
        flag="--scheduler-name",
        flag_help="the scheduler the dra backend sends opted-in Pods to",
    ),
    Setting(
        STRICT_SETTINGS, "strictSettings", Kind.BOOLEAN, False,
        "`true` refuses to start when a `CASTSLICE_*` name is not a setting (a misspelt "
        "`CASTSLICE_BAKEND`); otherwise the server logs a warning naming the closest "
        "setting, and the command line prints it ([configuration.md](#unknown-names)).",
        chart_note="true: a CASTSLICE_* name that is no setting stops the server at start "
        "instead of a warning.",
    ),
    Setting(
        "CASTSLICE_MIG_GPU_MODELS", "mig.gpuModels", Kind.CHOICES, list(Config.mig_gpu_models),
        "`mig`: the GPU models of the MIG nodes, comma-separated: `A100-40GB`, `A100-80GB`, "
        "`H100-80GB`, `H100-NVL`, `H100-96GB` (GH200), `H200`, `B200`, `A30`. Their MIG "
        "profiles are NVIDIA's, their sizes as the boards report them "
        "([backends.md](backends.md#mig)).",
        chart_note="The mig backend: the GPU models, the profiles offered (null: every "
        "profile of those models), the stack, the rule for holding a share, whole GPUs.",
        flag="--mig-gpu-models",
        flag_help="the MIG nodes' GPU models, e.g. A100-80GB,H100-80GB",
        used_by="mig",
    ),
    Setting(
        "CASTSLICE_MIG_PROFILES", "mig.profiles", Kind.CHOICES, None,
        "`mig`: the MIG profiles the nodes offer, comma-separated (`1g.10gb,3g.40gb`); "
        "a share goes to the smallest of them that holds it.",
        default_text="every profile of the models",
        flag="--mig-profiles",
        flag_help="the MIG profiles the nodes offer",
        used_by="mig",
    ),
    Setting(
        "CASTSLICE_MIG_STACK", "mig.stack", Kind.CHOICE, Config.mig_stack,
        "`mig`: how nodes offer instances: `mixed` (`nvidia.com/mig-<profile>`), `single` "
        "(`nvidia.com/gpu` on nodes labelled `<product>-MIG-<profile>`), `gke` (partition "
        "node pools) or `dra` (the NVIDIA DRA driver's MIG devices).",
        choices=MIG_STACKS,
        flag="--mig-stack",
        flag_help="how nodes offer MIG instances",
        used_by="mig",
    ),
    Setting(
        "CASTSLICE_MIG_FIT", "mig.fit", Kind.CHOICE, Config.mig_fit,
        "`mig`: when an instance holds `s/S` of a GPU: `memory` (its memory is at least "
        "`s/S`) or `strict` (its memory and its compute are).",
        choices=MIG_FITS,
        flag="--mig-fit",
        flag_help="when a MIG instance holds a share: memory, or memory and compute (strict)",
        used_by="mig",
    ),
    Setting(
        "CASTSLICE_MIG_WHOLE_GPU", "mig.wholeGpu", Kind.CHOICE, Config.mig_whole_gpu,
        "`mig`: where a Pod of one whole GPU goes: `gpu` (a GPU without MIG) or `7g` (a "
        "full-size MIG instance, `7g.*`, `4g.24gb` on A30).",
        choices=MIG_WHOLE_GPU,
        flag="--mig-whole-gpu",
        flag_help="where one-GPU Pods go: gpu or 7g",
        used_by="mig",
    ),
    Setting(
        "CASTSLICE_MIG_PRODUCT_NAMES", "mig.productNames", Kind.PRODUCT_NAMES, None,
        "`mig`: more names the boards of a model report, as `MODEL=NAME` entries, "
        "comma-separated (`H200=NVIDIA H200 NVL`): NVML's name (`nvidia-smi "
        "--query-gpu=name`, the DRA driver's `productName`) or GPU Feature Discovery's "
        "`nvidia.com/gpu.product`. `castslice doctor` names a MIG node whose product no "
        "model has, with the entry to add ([backends.md](backends.md#gpu-models-and-their-names)).",
        default_text="the profile table's names",
        chart_note="model: [names], e.g. H200: [NVIDIA H200 NVL]",
        flag="--mig-product-names",
        flag_help="more product names of a MIG model, e.g. H200=NVIDIA H200 NVL",
        used_by="mig",
    ),
    Setting(
        "CASTSLICE_MIG_TIME_SHARED_CLIENTS", "mig.timeSharedClients", Kind.COUNT, None,
        "`mig` on the `gke` stack: the `max-shared-clients-per-gpu` (2 to 48) of partition "
        "pools time-shared on top, of the smallest partition size; a Pod smaller than that "
        "partition then shares one, time-sliced with up to that many clients and no "
        "isolation between them ([backends.md](backends.md#time-shared-partitions-on-gke)).",
        default_text="no Pod shares a partition",
        minimum=MIN_GKE_SHARED_CLIENTS,
        maximum=MAX_GKE_SHARED_CLIENTS,
        flag="--mig-time-shared-clients",
        flag_help="clients per time-shared GKE partition (gke stack)",
        used_by="mig",
        used_when=("CASTSLICE_MIG_STACK", ("gke",)),
    ),
    Setting(
        "claimTemplates.namespaces", "claimTemplates.namespaces", Kind.NAMESPACES, [],
        "The namespaces the chart creates the dra backend's ResourceClaimTemplates in.",
        chart_note="ResourceClaimTemplates castslice-<s>-of-<slicesPerGpu> for the dra "
        "backend, created in each namespace listed, one per slice count.",
    ),
)  # fmt: skip

BY_VARIABLE = {setting.variable: setting for setting in SETTINGS}


def setting(variable: str) -> Setting:
    return BY_VARIABLE[variable]


def chart_value(variable: str) -> str:
    """The chart's value of a setting, as its refusals name it."""
    value = BY_VARIABLE[variable].value
    assert value is not None, variable
    return value


def upper_bound(setting: Setting) -> int:
    """The largest value any configuration allows (a bound by another setting: its own)."""
    bound = setting.maximum
    while isinstance(bound, str):
        bound = BY_VARIABLE[bound].maximum
    assert bound is not None, setting.variable
    return bound


def config_value(config: Config, variable: str) -> object:
    """What the configuration holds for a CASTSLICE_* variable (CASTSLICE_MIG_STACK:
    config.mig_stack)."""
    return getattr(config, variable.removeprefix("CASTSLICE_").lower())


def idle_reason(entry: Setting, config: Config) -> str | None:
    """Why a setting does nothing with this configuration (another backend's, or another
    stack's), or None: it is used."""
    if entry.used_by is not None and entry.used_by != config.backend:
        return f"the {entry.used_by} backend's"
    if entry.used_when is not None:
        other, values = entry.used_when
        if config_value(config, other) not in values:
            return f"only with {other}={' or '.join(values)}"
    return None


def environment_text(value: object) -> str:
    """A value as its variable's text: lists comma-separated, maps key=value (a key of a list
    once per item), booleans lower."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    if isinstance(value, dict):
        return ",".join(
            f"{key}={item}"
            for key, items in value.items()
            if items is not None
            for item in (items if isinstance(items, list | tuple) else [items])
        )
    return str(value)
