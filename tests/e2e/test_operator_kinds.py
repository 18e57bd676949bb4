"""Operators that cannot run here (JobSet, LeaderWorkerSet, KServe, Volcano, Argo, Knative).

Their kinds are served by the API server from CRDs written here, schema-light
(only what the API server needs to store the kind), so what is checked is the
admission path and CastSlice's own answers: `kubectl apply` prints the same
warnings as `castslice preview` of the same file, and the registration,
which names these groups whether or not they are installed, is accepted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml

from castslice.contract import WORKLOAD_KINDS, WorkloadKind

from .castslice_server import CastSliceServer
from .kubectl import Kubectl
from .pods import Manifest

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
    (
        "argoproj.io/v1alpha1",
        "Workflow",
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
    ),
    (
        "serving.knative.dev/v1",
        "Service",
        {"template": template("user-container", 1, {OPTIMIZE: "true", TYPE: "dev"})},
        [],
    ),
]


def minimal_crd(entry: WorkloadKind) -> Manifest:
    """A CRD serving `entry`'s kind, its schema left open: only what the API server needs."""
    schema: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{entry.resource}.{entry.group}"},
        "spec": {
            "group": entry.group,
            "names": {
                "kind": entry.kind,
                "listKind": f"{entry.kind}List",
                "plural": entry.resource,
                "singular": entry.kind.lower(),
            },
            "scope": entry.scope,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": index == 0,
                    "schema": {"openAPIV3Schema": schema},
                }
                for index, version in enumerate(entry.versions)
            ],
        },
    }


def kind_of(api_version: str, kind: str) -> WorkloadKind:
    group, _, version = api_version.rpartition("/")
    [entry] = [
        e for e in OPERATOR_KINDS if (e.group, e.kind) == (group, kind) and version in e.versions
    ]
    return entry


@pytest.fixture(scope="module")
def crds(kubectl_user: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("crds") / "crds.yaml"
    entries = {kind_of(api_version, kind) for api_version, kind, _, _ in RESOURCES}
    path.write_text(yaml.safe_dump_all([minimal_crd(entry) for entry in entries]))
    kubectl_user.run("apply", "-f", str(path))
    kubectl_user.run("wait", "--for=condition=Established", "--timeout=60s", "-f", str(path))


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
    entry = kind_of(api_version, kind)
    resource = f"{entry.resource}.{entry.group}"
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
