"""Operators that cannot run here (JobSet, LeaderWorkerSet, KServe, Volcano, Argo, Knative).

Their kinds are served by the API server from the CRDs of their releases, read from
each project's Go module at the version in operators/crds, with their structural
schemas, so the manifests here are objects those schemas accept as they are (kubectl's
strict field validation refuses an unknown field, and nothing is pruned). Checked:
`kubectl apply` prints the same warnings as `castslice preview` of the same file, and
the registration, which names these groups whether or not they are installed, is
accepted. Every kind tested here has a served module with a plain CRD document, so none
is served from a CRD written here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import kubernetes.client
import pytest
import yaml

from castslice.contract.definitions import WORKLOAD_KINDS, WorkloadKind
from tests.helm import GoModuleUnavailable

from .castslice_server import CastSliceServer
from .conftest import missing
from .kubectl import Kubectl
from .operators import upstream_crds
from .pods import Manifest, create_pod, resources_of
from .tools import MissingTool

OPERATOR_KINDS = tuple(kind for kind in WORKLOAD_KINDS if kind.custom_resource)

OPTIMIZE = "castops.io/optimize"
TYPE = "castops.io/workload-type"
GPU = "nvidia.com/gpu"


def gpu_pod_spec(name: str, gpus: int) -> Manifest:
    return {
        "containers": [
            {"name": name, "image": "registry.invalid/llm:1", "resources": {"limits": {GPU: gpus}}}
        ]
    }


def template(name: str, gpus: int, annotations: dict[str, str] | None) -> Manifest:
    metadata = {"annotations": annotations} if annotations else {}
    return {"metadata": metadata, "spec": gpu_pod_spec(name, gpus)}


INFERENCE = {OPTIMIZE: "true", TYPE: "inference"}

# apiVersion, kind, spec and the warnings CastSlice gives, for kinds whose operator cannot run here.
RESOURCES: list[tuple[str, str, Manifest, list[str]]] = [
    (
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {"spec": {"template": template("trainer", 8, INFERENCE)}},
                }
            ]
        },
        [
            'replicatedJobs[workers]: container "trainer" asked for 8 nvidia.com/gpu; '
            "castslice gives it 1/2 of a GPU"
        ],
    ),
    (
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": template("vllm-leader", 4, INFERENCE),
                "workerTemplate": template("vllm-worker", 4, INFERENCE),
            },
        },
        [
            'leaderTemplate: container "vllm-leader" asked for 4 nvidia.com/gpu; '
            "castslice gives it 1/2 of a GPU",
            'workerTemplate: container "vllm-worker" asked for 4 nvidia.com/gpu; '
            "castslice gives it 1/2 of a GPU",
        ],
    ),
    (
        "serving.kserve.io/v1beta1",
        "InferenceService",
        {"predictor": {"annotations": INFERENCE, **gpu_pod_spec("kserve-container", 2)}},
        [
            'predictor: container "kserve-container" asked for 2 nvidia.com/gpu; '
            "castslice gives it 1/2 of a GPU"
        ],
    ),
    (
        "batch.volcano.sh/v1alpha1",
        "Job",
        {
            "tasks": [
                {
                    "name": "mpiworker",
                    "replicas": 2,
                    "template": template("mpi", 1, {OPTIMIZE: "true"}),
                }
            ]
        },
        [],
    ),
    *(
        (
            "argoproj.io/v1alpha1",
            kind,
            {
                "entrypoint": "main",
                "templates": [
                    {"name": "main", "steps": [[{"name": "train", "template": "train"}]]},
                    {
                        "name": "train",
                        "metadata": {"annotations": {OPTIMIZE: "true", TYPE: "Training"}},
                        "container": gpu_pod_spec("main", 1)["containers"][0],
                    },
                ],
            },
            # Clipped to 120 characters, as every warning is.
            [
                'templates[train]: castops.io/workload-type="Training" ignored '
                "(want training|inference|batch|dev); using the default ..."
            ],
        )
        for kind in ("Workflow", "WorkflowTemplate")
    ),
    (
        "serving.knative.dev/v1",
        "Service",
        {"template": template("user-container", 1, {OPTIMIZE: "true", TYPE: "dev"})},
        [],
    ),
]


def kind_of(api_version: str, kind: str) -> WorkloadKind:
    group, _, version = api_version.rpartition("/")
    [entry] = [
        e for e in OPERATOR_KINDS if (e.group, e.kind) == (group, kind) and version in e.versions
    ]
    return entry


@pytest.fixture(scope="module")
def crds(kubectl_user: Kubectl) -> None:
    """The upstream CRDs of the kinds in RESOURCES, served and established."""
    try:
        upstream = upstream_crds()
    except GoModuleUnavailable as error:
        missing(MissingTool(str(error)))
    names = sorted({crd_name(kind_of(api_version, kind)) for api_version, kind, _, _ in RESOURCES})
    paths = [str(upstream[name]) for name in names]
    # Server-side: several exceed the annotation a client-side apply would write.
    kubectl_user.run("apply", "--server-side", *(f"--filename={path}" for path in paths))
    kubectl_user.wait_established(*(f"crd/{name}" for name in names))


def crd_name(entry: WorkloadKind) -> str:
    return f"{entry.resource}.{entry.group}"


def preview_warnings(path: Path, namespace: str) -> tuple[list[str], str]:
    """`castslice preview -f FILE` with the default settings: its warnings and its summary."""
    done = subprocess.run(
        [sys.executable, "-m", "castslice", "preview", "-n", namespace, "-f", str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    lines = done.stderr.splitlines()
    return [line for line in lines if line.startswith("Warning: ")], lines[-1]


@pytest.mark.kubernetes("1.36")
@pytest.mark.parametrize(
    ("api_version", "kind", "spec", "expected"),
    RESOURCES,
    ids=[kind for _, kind, _, _ in RESOURCES],
)
def test_kubectl_apply_warns_as_preview_does(
    crds: None,
    kubectl_user: Kubectl,
    castslice: CastSliceServer,
    namespace: str,
    tmp_path: Path,
    api_version: str,
    kind: str,
    spec: Manifest,
    expected: list[str],
) -> None:
    name = kind.lower()
    manifest = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest))

    stderr = kubectl_user.run("apply", "-n", namespace, "-f", str(path)).stderr
    applied = [line for line in stderr.splitlines() if line.startswith("Warning: ")]
    previewed, summary = preview_warnings(path, namespace)

    assert applied == [f"Warning: {warning}" for warning in expected]
    assert previewed == [f"Warning: {kind} {namespace}/{name}: {warning}" for warning in expected]
    assert f"operator resources: 1 {kind}" in summary
    assert summary.startswith("1 object: 1 sliced")
    # Reviewed by the function, never patched.
    [review] = castslice.reviews_of(namespace, name)
    assert review["message"] == f"{kind.lower()} {'warned' if expected else 'checked'}"
    resource = crd_name(kind_of(api_version, kind))
    stored = kubectl_user.run("get", "-n", namespace, resource, name, "-o", "yaml").stdout
    assert "castslice.castops.io" not in stored


def test_the_registration_naming_uninstalled_groups_is_accepted(
    api: kubernetes.client.ApiClient, castslice: CastSliceServer
) -> None:
    # Registered by the session before any CRD exists (and on every Kubernetes version).
    hook = kubernetes.client.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(
        "castslice"
    )
    [workloads] = [w for w in hook.webhooks if w.name == "workloads.castslice.castops.io"]
    groups = {group for rule in workloads.rules for group in rule.api_groups}
    assert {entry.group for entry in OPERATOR_KINDS} <= groups


# The Pod an operator creates from each shape, built as its source builds it, created through
# the API server with CastSlice registered: what the API server admits is what preview shows.

APPLIED = "castslice.castops.io/applied"


def _kserve_model() -> tuple[Manifest, Manifest, Callable[[Manifest], Manifest]]:
    """KServe's `model` form (docs/samples/accelerators/tensorflow-gpu.yaml, kserve/kserve at
    v0.20.0-rc0-104-gaaac4e294, as its defaulter rewrites `tensorflow`), and its Pod: the
    predictor reconciler (components/predictor.go, buildPodSpec) makes `model` the first
    container, kserve-container."""
    model = {
        "modelFormat": {"name": "tensorflow"},
        "storageUri": "gs://kfserving-examples/models/tensorflow/flowers",
        "runtimeVersion": "1.11.0-gpu",
        "resources": {"limits": {GPU: "1"}},
    }
    spec = {"predictor": {"annotations": {OPTIMIZE: "true"}, "model": model}}
    container = {
        "name": "kserve-container",
        "image": "registry.invalid/tfserving:1.11.0-gpu",
        "resources": model["resources"],
    }
    pod = {"metadata": {"annotations": {OPTIMIZE: "true"}}, "spec": {"containers": [container]}}

    def template(previewed: Manifest) -> Manifest:
        predictor = previewed["spec"]["predictor"]
        return {
            "annotations": predictor["annotations"],
            "containers": {"kserve-container": predictor["model"]["resources"]},
        }

    return spec, pod, template


def _argo_sidecar() -> tuple[Manifest, Manifest, Callable[[Manifest], Manifest]]:
    """Argo's examples/sidecar.yaml (argoproj/argo-workflows at v4.1.0-rc2-80-gf016ad89e) with
    its sidecar asking for a GPU, and its Pod: workflowpod.go names the step's container
    `main` and appends the sidecars."""
    step = {
        "name": "sidecar-example",
        "metadata": {"annotations": {OPTIMIZE: "true"}},
        "container": {"image": "alpine:3.23", "command": ["sh", "-c"], "args": ["true"]},
        "sidecars": [
            {
                "name": "influxdb",
                "image": "influxdb:1.2",
                "command": ["influxd"],
                "resources": {"limits": {GPU: "1"}},
            }
        ],
    }
    spec = {"entrypoint": "sidecar-example", "templates": [step]}
    pod = {
        "metadata": step["metadata"],
        "spec": {"containers": [{**step["container"], "name": "main"}, *step["sidecars"]]},
    }

    def template(previewed: Manifest) -> Manifest:
        [shown] = previewed["spec"]["templates"]
        return {
            "annotations": shown["metadata"]["annotations"],
            "containers": {
                "main": shown["container"].get("resources", {}),
                "influxdb": shown["sidecars"][0]["resources"],
            },
        }

    return spec, pod, template


def _defaulted(resources: Manifest) -> Manifest:
    """`resources` as the API server stores them: a request defaults to its limit."""
    limits = resources.get("limits") or {}
    requests = {**limits, **(resources.get("requests") or {})}
    return {key: value for key, value in (("limits", limits), ("requests", requests)) if value}


SHAPES = [
    ("serving.kserve.io/v1beta1", "InferenceService", _kserve_model),
    ("argoproj.io/v1alpha1", "Workflow", _argo_sidecar),
]


@pytest.mark.kubernetes("1.36")
@pytest.mark.parametrize(
    ("api_version", "kind", "shape"), SHAPES, ids=["kserve-model", "argo-sidecar"]
)
def test_the_pod_the_api_server_admits_is_the_one_preview_shows(
    crds: None,
    kubectl_user: Kubectl,
    api: kubernetes.client.ApiClient,
    castslice: CastSliceServer,
    namespace: str,
    tmp_path: Path,
    api_version: str,
    kind: str,
    shape: Callable[[], tuple[Manifest, Manifest, Callable[[Manifest], Manifest]]],
) -> None:
    spec, pod, template_of = shape()
    name = kind.lower()
    manifest = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    # The operator's own schema accepts the resource as written.
    kubectl_user.run("apply", "-n", namespace, "-f", str(path))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "castslice",
            "preview",
            "-o",
            "json",
            "-n",
            namespace,
            "-f",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    [previewed] = json.loads(done.stdout)["items"]

    stored, _ = create_pod(
        api,
        namespace,
        {"apiVersion": "v1", "kind": "Pod", **pod, "metadata": {"name": name, **pod["metadata"]}},
    )

    shown = template_of(previewed)
    admitted = resources_of(stored)
    assert {key: _defaulted(admitted[key]) for key in shown["containers"]} == {
        key: _defaulted(resources) for key, resources in shown["containers"].items()
    }
    assert stored["metadata"]["annotations"][APPLIED] == shown["annotations"][APPLIED]
    assert "nothing to slice" not in done.stderr and "cannot preview" not in done.stderr
