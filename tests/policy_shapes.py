"""The corpus on which policy mode is compared with the webhook: the settings of each
comparison, hand-picked Pod shapes, generated ones, and workloads wrapping them.

Every shape is a complete Pod manifest (tests.manifests.pod), named uniquely, so the
answers of the two engines can be compared field by field: in process in the unit
suite (tests/test_admission_policy_cel.py), by the API server in tests/e2e.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from castslice.backends.tools import tools_for
from castslice.contract.definitions import APPLIED
from castslice.settings.config import Config
from tests.manifests import (
    GPU,
    IMAGE,
    OPTIMIZE,
    SLICE_RATIO,
    WORKLOAD_TYPE,
    Manifest,
    container,
    pod,
)

# An enrolment policy with every kind of rule: an exclusion by glob, a glob with a
# selector and a preset, In/DoesNotExist with a count, NotIn/Exists without one,
# and a name the record and the warnings must escape. Shapes alternate between a
# namespace it excludes (`*-prod`) and one its globs enrol (`e2e-*`).
ENROLMENT = """\
rules:
  - name: 'never in "prod" \u2713'
    namespaces: ["*-prod", production]
    optimize: false
  - name: dev notebooks
    namespaces: ["e2e-*"]
    podSelector: {matchLabels: {tier: dev}}
    optimize: true
    workloadType: dev
  - name: inference
    podSelector:
      matchExpressions:
        - {key: app, operator: In, values: [vllm, triton]}
        - {key: dedicated, operator: DoesNotExist}
    optimize: true
    slices: 2
  - name: teams
    podSelector:
      matchExpressions:
        - {key: tier, operator: NotIn, values: [x]}
        - {key: team, operator: Exists}
    optimize: true
"""
# Settings chosen so every backend meets fractions, several sharing degrees and
# whole GPUs within the slice counts the shapes use, and one runs with the policy.
BACKENDS: dict[str, dict[str, str]] = {
    "resource": {"CASTSLICE_SLICES_PER_GPU": "6"},
    "nvidia": {
        "CASTSLICE_BACKEND": "nvidia",
        "CASTSLICE_SHARING_DEGREES": "2,4",
        "CASTSLICE_SHARING_STRATEGY": "mps",
    },
    "gke": {
        "CASTSLICE_BACKEND": "gke",
        "CASTSLICE_SLICES_PER_GPU": "8",
        "CASTSLICE_SHARING_DEGREES": "2,4,8",
        "CASTSLICE_PRESETS": "training=8,inference=4,notebook=1",
    },
    # MPS on GKE: every sharing pool's Pod is told its memory cap, in the record, the audit
    # annotation and a warning (nvidia above is MPS too).
    "gke-mps": {
        "CASTSLICE_BACKEND": "gke",
        "CASTSLICE_SLICES_PER_GPU": "8",
        "CASTSLICE_SHARING_DEGREES": "2,8",
        "CASTSLICE_SHARING_STRATEGY": "mps",
    },
    "nvidia-enrolment": {
        "CASTSLICE_BACKEND": "nvidia",
        "CASTSLICE_SHARING_DEGREES": "2,4",
        "CASTSLICE_POLICY": ENROLMENT,
    },
}
# The largest Pod the suite sends: GPU containers (init ones included), each asking
# for more than it gets: with its two invalid annotations, as many warnings as the
# validating policy can give (manifests.WARNING_SLOTS).
CROWDED_CONTAINERS = 62


def crowd_for(config: Config) -> int:
    """CROWDED_CONTAINERS less the backend's notes on the crowded Pod's placement (an MPS
    client's cap, one warning more): its warnings still fill the policy's slots exactly."""
    backend = tools_for(config)
    return CROWDED_CONTAINERS - len(backend.notes(backend.place(config.default_slices)))


MIRROR = "kubernetes.io/config.mirror"
# Both backends' placement keys: a Pod set by hand for one is ordinary for another.
PLACEMENT_KEYS = (
    "nvidia.com/gpu.replicas",
    "nvidia.com/gpu.sharing-strategy",
    "cloud.google.com/gke-gpu-sharing-strategy",
    "cloud.google.com/gke-max-shared-clients-per-gpu",
)
# Values that exercise every branch of the warning text: quotes of both kinds,
# backslashes, control characters, non-ASCII of 2, 3 and 4 UTF-8 bytes, long ones.
AWKWARD_VALUES = (
    "",
    " 2",
    "2 ",
    "+2",
    "-1",
    "0",
    "000",
    "1.5",
    "1e3",
    "0x10",
    "²",
    "１２",
    "abc",
    "it's",
    'say "hi"',
    'it\'s "both"',
    "back\\slash",
    "tab\there",
    "new\nline",
    "cr\rlf",
    "bell\x07\x1f\x7f",
    "é",
    "\xa0nbsp",
    "ÿĀ",
    "€uro",
    "emoji 🚀",
    "\U0010fffd",
    "x" * 20,
    "x" * 21,
    "y" * 22,
    "é" * 25,
    "'" * 30,
    "99999999999999999999999",
    "Training",
    "TRAINING",
    "training ",
)


def gpu(name: str, count: str = "1", **fields: Any) -> Manifest:
    return container(name, {"cpu": "10m", GPU: count}, {GPU: count}, **fields)


def annotated(**values: str) -> dict[str, str]:
    keys = {"ratio": SLICE_RATIO, "type": WORKLOAD_TYPE}
    return {OPTIMIZE: "true", **{keys[key]: value for key, value in values.items()}}


def hand_picked(config: Config, *, awkward_values: bool = True) -> list[Manifest]:
    """Shapes chosen for a branch each: resolution, rewrite, placement, record, skips;
    with `awkward_values`, also a Pod per AWKWARD_VALUES entry in its annotations."""
    shared = config.shared_resource
    awkward = AWKWARD_VALUES if awkward_values else ()
    max_ratio = str(config.max_slice_ratio)
    shapes: list[tuple[dict[str, str] | None, list[Manifest], dict[str, Any]]] = [
        (None, [gpu("app")], {}),
        ({OPTIMIZE: "false"}, [gpu("app")], {}),
        ({OPTIMIZE: "True"}, [gpu("app")], {}),
        (annotated(), [gpu("app")], {}),
        (annotated(), [container("app", {"cpu": "10m"})], {}),
        (annotated(ratio="x"), [container("cpu-only", {"cpu": "10m"})], {}),
        (annotated(ratio="3"), [gpu("app")], {}),
        (annotated(ratio=max_ratio), [gpu("app", "2")], {}),
        (annotated(ratio=str(config.max_slice_ratio + 1)), [gpu("app")], {}),
        (annotated(ratio="0007", type="training"), [gpu("app")], {}),
        *(
            (annotated(type=name), [gpu("app", "2")], {})
            for name in [*config.presets, "unknown", "Dev"]
        ),
        (annotated(ratio="bad", type="bad"), [gpu("app")], {}),
        (annotated(ratio="bad", type="inference"), [gpu("app")], {}),
        (annotated(ratio="2", type="bad"), [gpu("app")], {}),
        # Every kind of container, and request-only / limit-only / both.
        (
            annotated(type="inference"),
            [gpu("app"), container("logger", {"cpu": "10m"})],
            {"initContainers": [gpu("warmup"), gpu("proxy", restartPolicy="Always")]},
        ),
        (annotated(ratio="2"), [container("req", {GPU: "1"})], {}),
        (annotated(ratio="2"), [container("req", {GPU: "1"}, {"cpu": "1"})], {}),
        (annotated(ratio="2"), [container("lim", None, {GPU: "2"})], {}),
        (annotated(ratio="6"), [container("both", {GPU: "4"}, {GPU: "4"})], {}),
        (annotated(ratio="2"), [container("uneven", {GPU: "1"}, {GPU: "2"})], {}),
        (annotated(ratio="2"), [container("has-shared", {GPU: "1", shared: "7"}, {GPU: "1"})], {}),
        (annotated(ratio="2"), [container("shared-only", {shared: "7"}, {shared: "7"})], {}),
        (annotated(ratio="2"), [container("gpu-0", {GPU: "0"}, {GPU: "0"})], {}),
        # A zero count keeps what it has, and places nothing on its account.
        (annotated(type="dev"), [gpu("idle", "0")], {"initContainers": [gpu("warm", "0.0")]}),
        (annotated(type="training"), [gpu("app"), gpu("idle", "0")], {}),
        (annotated(ratio="2"), [container("zero-limit", {"cpu": "10m"}, {GPU: "0Ki"})], {}),
        (annotated(type="dev"), [gpu("eph")], {"ephemeralContainers": [_ephemeral("debug")]}),
        # Placement: nodeSelectors of every kind, by hand for one backend or another.
        (annotated(type="dev"), [gpu("app")], {"nodeSelector": {"disk": "ssd"}}),
        (annotated(type="training"), [gpu("app")], {"nodeSelector": {}}),
        *(
            (annotated(type="dev"), [gpu("app", "2")], {"nodeSelector": {key: "x"}})
            for key in PLACEMENT_KEYS
        ),
        (annotated(ratio="x"), [gpu("app")], {"nodeSelector": {PLACEMENT_KEYS[0]: "8"}}),
        # The decision record already there: left alone, silently.
        ({**annotated(ratio="x"), APPLIED: '{"slices":1}'}, [gpu("app", "2")], {}),
        ({**annotated(), MIRROR: "abc"}, [gpu("app")], {"nodeName": "nowhere"}),
        # Names that need the JSON record and the warnings to escape nothing, and
        # many GPU containers asking for more than they get.
        (annotated(ratio="1"), [gpu("a"), gpu("b-1", "3"), gpu("c", "8")], {}),
        (annotated(type="dev"), [gpu("x" * 63, "2")], {}),
        *((annotated(ratio=value), [gpu("app", "2")], {}) for value in awkward),
        *((annotated(type=value), [gpu("app", "2")], {}) for value in awkward[::3]),
    ]
    return [
        _with_spec(
            pod(
                f"hand-{index:03d}",
                containers,
                annotations=annotations,
                init_containers=extra.get("initContainers"),
            ),
            extra,
        )
        for index, (annotations, containers, extra) in enumerate(shapes)
    ]


def crowded(count: int) -> Manifest:
    """The largest Pod of the comparison: `count` GPU containers, each asking for 2."""
    return pod(
        "crowded",
        [gpu(f"c{index}", "2") for index in range(count - 2)],
        annotations=annotated(ratio="x", type="?"),
        init_containers=[gpu("init-0", "2"), gpu("init-1", "3", restartPolicy="Always")],
    )


def _ephemeral(name: str) -> Manifest:
    return {"name": name, "image": IMAGE, "resources": {"limits": {GPU: "1"}}}


def _with_spec(manifest: Manifest, fields: dict[str, Any]) -> Manifest:
    manifest["spec"].update({k: v for k, v in fields.items() if k != "initContainers"})
    return manifest


# --- generated shapes --------------------------------------------------------------------

# Labels the enrolment policy of the comparison selects on (ENROLMENT).
LABEL_KEYS = ("tier", "app", "dedicated", "team")
LABEL_VALUES = ("dev", "x", "vllm", "other", "yes")

_quantities = st.sampled_from(["0", "1", "2", "3", "4", "8"])


def _values(known: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(known),
        st.sampled_from(AWKWARD_VALUES),
        st.text(max_size=30),
    )


@st.composite
def _resources(draw: st.DrawFn, shared: str) -> Manifest:
    count = draw(_quantities)
    extra = {"cpu": "10m"} if draw(st.booleans()) else {}
    layout = draw(st.sampled_from(["both", "requests", "limits", "none", "shared-too"]))
    if layout == "both":
        return {"requests": {**extra, GPU: count}, "limits": {GPU: count}}
    if layout == "requests":
        return {"requests": {**extra, GPU: count}}
    if layout == "limits":
        return {"limits": {GPU: count}}
    if layout == "shared-too":
        return {"requests": {GPU: count, shared: "5"}, "limits": {GPU: count, shared: "5"}}
    return {"requests": extra} if extra else {}


@st.composite
def _containers(draw: st.DrawFn, prefix: str, most: int, shared: str) -> list[Manifest]:
    count = draw(st.integers(min_value=0 if prefix == "i" else 1, max_value=most))
    found = []
    for index in range(count):
        fields: Manifest = {"name": f"{prefix}{index}", "image": IMAGE}
        resources = draw(_resources(shared))
        if resources:
            fields["resources"] = resources
        if prefix == "i" and draw(st.booleans()):
            fields["restartPolicy"] = "Always"
        found.append(fields)
    return found


@st.composite
def generated_pod(draw: st.DrawFn, config: Config) -> Manifest:
    annotations: dict[str, str] = {}
    # With an enrolment policy, Pods without the annotation are the interesting ones.
    choices = ["true", "false", "yes", None, None, None] if config.policy else ["true"] * 4
    optimize = draw(st.sampled_from([*choices, "false", None]))
    if optimize is not None:
        annotations[OPTIMIZE] = optimize
    if draw(st.booleans()):
        ratios = ["1", "2", "3", "4", "6", "8", str(config.max_slice_ratio), "0"]
        annotations[SLICE_RATIO] = draw(_values(ratios))
    if draw(st.booleans()):
        annotations[WORKLOAD_TYPE] = draw(_values([*config.presets, "unknown"]))
    if draw(st.integers(0, 9)) == 0:
        annotations[APPLIED] = draw(st.sampled_from(['{"slices":2}', "", "x"]))
    labels = draw(st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES)))
    manifest = pod(
        "generated",
        draw(_containers("c", 3, config.shared_resource)),
        annotations=annotations or None,
        init_containers=draw(_containers("i", 2, config.shared_resource)) or None,
        labels=labels or None,
    )
    selector = draw(
        st.one_of(
            st.none(),
            st.just({}),
            st.dictionaries(
                st.sampled_from([*PLACEMENT_KEYS, "disk", "zone"]),
                st.sampled_from(["x", "4", "none"]),
                max_size=2,
            ),
        )
    )
    if selector is not None:
        manifest["spec"]["nodeSelector"] = selector
    return manifest


def generated(config: Config, count: int) -> list[Manifest]:
    """`count` Pods drawn by Hypothesis, the same ones on every run (derandomized)."""
    found: list[Manifest] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(generated_pod(config))
    def collect(manifest: Manifest) -> None:
        found.append(manifest)

    collect()
    for index, manifest in enumerate(found):
        manifest["metadata"]["name"] = f"gen-{index:03d}"
    return found


# --- workloads ------------------------------------------------------------------------------

# (apiVersion, kind) of every workload CastSlice warns about.
WORKLOAD_KINDS = (
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "ReplicaSet"),
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
)


def workload(
    kind: tuple[str, str],
    template_pod: Manifest,
    annotations: dict[str, str] | None = None,
    job_template_annotations: dict[str, str] | None = None,
) -> Manifest:
    """A valid workload of `kind` whose Pods would be `template_pod` (named after it)."""
    api_version, kind_name = kind
    metadata = template_pod["metadata"]
    name = metadata["name"]
    labels = {"shape": name}
    template: Manifest = {
        "metadata": {
            "labels": {**(metadata.get("labels") or {}), **labels},
            **({"annotations": metadata["annotations"]} if metadata.get("annotations") else {}),
        },
        "spec": {**template_pod["spec"]},
    }
    spec: Manifest
    if kind_name in ("Job", "CronJob"):
        template["spec"]["restartPolicy"] = "Never"
        job: Manifest = {"template": template}
        spec = job
        if kind_name == "CronJob":
            job_template: Manifest = {"spec": job}
            if job_template_annotations:
                job_template["metadata"] = {"annotations": job_template_annotations}
            spec = {"schedule": "0 0 * * *", "jobTemplate": job_template}
    else:
        spec = {"selector": {"matchLabels": labels}, "template": template}
        if kind_name == "StatefulSet":
            spec["serviceName"] = name
    manifest: Manifest = {
        "apiVersion": api_version,
        "kind": kind_name,
        "metadata": {"name": name},
        "spec": spec,
    }
    if annotations:
        manifest["metadata"]["annotations"] = annotations
    return manifest


def workloads(pods: list[Manifest]) -> list[Manifest]:
    """A workload per Pod shape, kinds in turn, some with annotations in the wrong place."""
    misplaced = [
        None,
        {OPTIMIZE: "true"},
        {WORKLOAD_TYPE: "dev", "castops.io/other": "x", "example.com/keep": "y"},
        {"castops.io/" + "unknown-" * 6: "1"},
    ]
    found = []
    for index, template_pod in enumerate(pods):
        kind = WORKLOAD_KINDS[index % len(WORKLOAD_KINDS)]
        extra = misplaced[index % len(misplaced)]
        job_extra = misplaced[(index // 2) % len(misplaced)]
        found.append(workload(kind, template_pod, extra, job_extra))
    return found
