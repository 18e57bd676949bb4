"""Operators' resources (PyTorchJob, RayCluster, JobSet…): every Pod template found and checked.

The Pods an operator creates are rewritten at admission like any Pod; here the
resource itself is reviewed through the deployed function (warnings, never a
patch), previewed offline (each template rewritten as its Pods will be), and
matched by the registration's workload webhook (its CEL, evaluated by celpy).
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest
import yaml
from starlette.testclient import TestClient

from castslice import cli
from castslice.contract.definitions import WORKLOAD_KINDS, templates, workload_kind
from castslice.decision import workloads
from castslice.decision.admission import Admission
from castslice.environment import load_config
from castslice.render.webhook_configuration import WORKLOAD_WEBHOOK, webhook_configuration
from tests.conftest import ROOT
from tests.factories import Ran, assert_warned_only, review_response, workload_review
from tests.operator_samples import RAYCLUSTER
from tests.registrations import URL, Sender, webhook

OPERATOR_KINDS = tuple(kind for kind in WORKLOAD_KINDS if kind.custom_resource)
OPTIMIZE = "castops.io/optimize"
TYPE = "castops.io/workload-type"
RATIO = "castops.io/slice-ratio"
GPU = "nvidia.com/gpu"

# Kubeflow's own sample (examples/pytorch/mnist/v1/pytorch_job_mnist_nccl.yaml), the
# Worker opted in as inference and asking for 8 GPUs.
PYTORCHJOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: pytorch-dist-mnist-nccl
  namespace: ml
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        metadata:
          annotations:
            castops.io/optimize: "true"
            castops.io/workload-type: training
        spec:
          containers:
            - name: pytorch
              image: kubeflow/pytorch-dist-mnist:latest
              args: ["--backend", "nccl"]
              resources:
                limits:
                  nvidia.com/gpu: 1
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        metadata:
          annotations:
            castops.io/optimize: "true"
            castops.io/workload-type: inference
        spec:
          containers:
            - name: pytorch
              image: kubeflow/pytorch-dist-mnist:latest
              args: ["--backend", "nccl"]
              resources:
                limits:
                  nvidia.com/gpu: 8
"""


@pytest.fixture
def preview(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Callable[..., Ran]:
    """`castslice preview ARGS` in this process, with the default settings."""

    def run(*args: str, stdin: bytes = b"") -> Ran:
        for name in [name for name in os.environ if name.startswith("CASTSLICE_")]:
            monkeypatch.delenv(name)
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        capsys.readouterr()
        code = cli.main(["preview", *args])
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return run


def loaded(text: str) -> dict[str, Any]:
    return yaml.safe_load(text)


def test_the_walker_finds_each_replica_type_and_group_by_its_name() -> None:
    entry = workload_kind("kubeflow.org", "v1", "PyTorchJob")
    assert entry is not None
    found = templates(entry, loaded(PYTORCHJOB))
    assert [(site.label, site.where) for site in found] == [
        ("Master", "spec.pytorchReplicaSpecs.Master.template"),
        ("Worker", "spec.pytorchReplicaSpecs.Worker.template"),
    ]
    ray = workload_kind("ray.io", "v1", "RayCluster")
    assert ray is not None
    assert [(site.label, site.where) for site in templates(ray, loaded(RAYCLUSTER))] == [
        ("headGroupSpec", "spec.headGroupSpec.template"),
        ("workerGroupSpecs[gpu-group]", "spec.workerGroupSpecs.[0].template"),
        ("workerGroupSpecs[cpu-group]", "spec.workerGroupSpecs.[1].template"),
    ]


def test_the_walker_reads_nested_lists_and_skips_argo_steps_without_a_container() -> None:
    runtime = workload_kind("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime")
    assert runtime is not None
    job = {"template": {"spec": {"template": {"spec": {"containers": []}}}}}
    resource = {"spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", **job}, {}]}}}}
    assert [site.label for site in templates(runtime, resource)] == ["replicatedJobs[node]"]
    argo = workload_kind("argoproj.io", "v1alpha1", "Workflow")
    assert argo is not None
    workflow = {
        "spec": {
            "templates": [
                {"name": "main", "steps": [[{"name": "train", "template": "train"}]]},
                {"name": "train", "container": {"image": "trainer"}},
            ]
        }
    }
    assert [site.label for site in templates(argo, workflow)] == ["templates[train]"]


def test_every_kind_is_unique_and_names_its_resource() -> None:
    keys = [(e.group, v, e.kind) for e in OPERATOR_KINDS for v in e.versions]
    assert len(keys) == len(set(keys))
    for entry in OPERATOR_KINDS:
        assert entry.resource == entry.resource.lower() and entry.resource.endswith("s")
        assert entry.templates or entry.outside_templates, entry.kind


def test_each_replica_type_is_warned_about_by_its_name(client: TestClient) -> None:
    manifest = loaded(PYTORCHJOB)
    manifest["metadata"]["annotations"] = {OPTIMIZE: "true"}
    manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "resources"
    ] = {"requests": {"cpu": "1"}}
    del manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["annotations"][
        TYPE
    ]

    warnings = assert_warned_only(review_response(client, workload_review(manifest)))

    assert warnings == [
        "Master is opted in but no container asks for nvidia.com/gpu; there is nothing to slice",
        'Worker: container "pytorch" asked for 8 nvidia.com/gpu; castslice gives it 1/2 of a GPU',
    ]


def test_annotations_on_the_resource_itself_are_named_with_where_they_belong(
    client: TestClient,
) -> None:
    manifest = loaded(RAYCLUSTER)
    manifest["metadata"]["annotations"] = {TYPE: "training", RATIO: "4"}

    warnings = assert_warned_only(review_response(client, workload_review(manifest)))

    # The workload type is on a template too; the ratio is on none.
    assert warnings == [
        f"{RATIO} on the RayCluster is ignored; move it to its Pod templates' annotations",
        "workerGroupSpecs[cpu-group] is opted in but no container asks for "
        "nvidia.com/gpu; there is nothing to slice",
    ]


def test_gpus_asked_outside_any_template_are_said_to_be_out_of_reach(client: TestClient) -> None:
    train_job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llama", "namespace": "ml", "annotations": {OPTIMIZE: "true"}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {GPU: "8"}}},
        },
    }

    warnings = assert_warned_only(review_response(client, workload_review(train_job)))

    assert warnings == [
        f"{OPTIMIZE} on the TrainJob is ignored; move it to spec.runtimePatches[]...template."
        "metadata",
        "GPUs in spec.trainer go to the runtime's Pods; opted in there or in runtimePatches, "
        "they are sliced at admission",
    ]


def test_kserve_takes_the_resources_own_annotations_to_its_pods(client: TestClient) -> None:
    service = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llm", "namespace": "ml", "annotations": {OPTIMIZE: "true"}},
        "spec": {
            "predictor": {
                "annotations": {TYPE: "inference"},
                "containers": [{"name": "kserve-container", "resources": {"limits": {GPU: "2"}}}],
            }
        },
    }

    warnings = assert_warned_only(review_response(client, workload_review(service)))

    assert warnings == [
        'predictor: container "kserve-container" asked for 2 nvidia.com/gpu; '
        "castslice gives it 1/2 of a GPU"
    ]


def test_a_template_that_is_not_a_pod_template_is_named(client: TestClient) -> None:
    manifest = loaded(PYTORCHJOB)
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] = "x"

    warnings = assert_warned_only(review_response(client, workload_review(manifest)))

    assert warnings[-1].startswith(
        "Worker: unreadable Pod template: Expected `array | null`, got `str` - at `spec.containers`"
    )


def test_preview_rewrites_each_template_as_the_pod_it_produces(preview: Callable[..., Ran]) -> None:
    ran = preview("-f", "-", "-o", "json", stdin=PYTORCHJOB.encode())
    assert ran.code == 0, ran.err
    [after] = json.loads(ran.out)["items"]
    before = loaded(PYTORCHJOB)
    for replica in ("Master", "Worker"):
        template = before["spec"]["pytorchReplicaSpecs"][replica]["template"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"namespace": "ml", **template["metadata"]},
            "spec": template["spec"],
        }
        alone = preview("-f", "-", "-o", "json", stdin=json.dumps(pod).encode())
        [pod_after] = json.loads(alone.out)["items"]
        rewritten = after["spec"]["pytorchReplicaSpecs"][replica]["template"]
        assert rewritten["spec"] == pod_after["spec"]
        assert rewritten["metadata"]["annotations"] == pod_after["metadata"]["annotations"]
    # Only the templates changed.
    rest = copy.deepcopy(after)
    for replica in ("Master", "Worker"):
        rest["spec"]["pytorchReplicaSpecs"][replica]["template"] = before["spec"][
            "pytorchReplicaSpecs"
        ][replica]["template"]
    assert rest == before
    assert ran.warnings == [
        "Warning: PyTorchJob ml/pytorch-dist-mnist-nccl: Worker: container "
        '"pytorch" asked for 8 nvidia.com/gpu; castslice gives it 1/2 of a GPU'
    ]
    assert ran.err.splitlines()[-1] == (
        "1 object: 1 sliced, 0 left unchanged, 0 passed through (no Pods); "
        "operator resources: 1 PyTorchJob; 1 warning; resource backend"
    )


def test_preview_rewrites_kserve_and_argo_templates_in_place(preview: Callable[..., Ran]) -> None:
    workflow = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "entrypoint": "train",
            "templates": [
                {
                    "name": "train",
                    "metadata": {"annotations": {OPTIMIZE: "true"}},
                    "container": {
                        "name": "main",
                        "image": "t",
                        "resources": {"limits": {GPU: "1"}},
                    },
                }
            ],
        },
    }
    ran = preview("-f", "-", "-o", "json", stdin=json.dumps(workflow).encode())
    [after] = json.loads(ran.out)["items"]
    step = after["spec"]["templates"][0]
    assert step["container"]["image"] == "t"
    assert GPU not in step["container"]["resources"]["limits"]
    assert "castslice.castops.io/applied" in step["metadata"]["annotations"]
    assert "1 sliced" in ran.err


def test_an_unknown_custom_resource_is_not_understood(preview: Callable[..., Ran]) -> None:
    unknown = {"apiVersion": "example.com/v1", "kind": "FooJob", "metadata": {"name": "a"}}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": [unknown, config_map]})

    ran = preview("-f", "-", stdin=text.encode())

    assert ran.err.splitlines()[-1] == (
        "2 objects: 0 sliced, 0 left unchanged, 1 passed through (no Pods), "
        "1 not understood (FooJob); 0 warnings; resource backend"
    )


def test_the_workload_webhook_matches_every_operator_kind() -> None:
    hook = webhook(webhook_configuration(load_config({}), url=URL), WORKLOAD_WEBHOOK)
    matched = {
        (group, version, resource)
        for rule in hook["rules"]
        for group in rule["apiGroups"]
        for version in rule["apiVersions"]
        for resource in rule["resources"]
    }
    for entry in OPERATOR_KINDS:
        for version in entry.versions:
            assert (entry.group, version, entry.resource) in matched
    for rule in hook["rules"]:
        assert rule["operations"] == ["CREATE", "UPDATE"]


@pytest.mark.parametrize(
    ("manifest", "sent"),
    [
        (PYTORCHJOB, True),
        (PYTORCHJOB.replace("castops.io/", "example.com/"), False),
        (RAYCLUSTER, True),
        (
            RAYCLUSTER.replace("castops.io/", "example.com/").replace(
                '  annotations:\n    example.com/optimize: "true"\n', ""
            ),
            False,
        ),
    ],
)
def test_only_operator_resources_with_castslice_annotations_are_sent(
    manifest: str, sent: bool
) -> None:
    hook = webhook(webhook_configuration(load_config({}), url=URL), WORKLOAD_WEBHOOK)
    assert Sender(hook).sends(loaded(manifest), "ml") is sent


def test_a_worker_group_annotated_alone_is_sent() -> None:
    hook = webhook(webhook_configuration(load_config({}), url=URL), WORKLOAD_WEBHOOK)
    resource = loaded(RAYCLUSTER)
    del resource["metadata"]["annotations"]
    groups = resource["spec"]["workerGroupSpecs"]
    for group in groups:
        group["template"]["metadata"] = {}
    assert Sender(hook).sends(resource, "ml") is False
    groups[1]["template"]["metadata"] = {"annotations": {TYPE: "dev"}}
    assert Sender(hook).sends(resource, "ml") is True


def test_preview_says_which_operator_resources_the_registration_never_sends(
    preview: Callable[..., Ran],
) -> None:
    # As for a Deployment: the workload webhook's namespaceSelector and matchCondition decide
    # whether kubectl apply shows warnings, so preview shows none where it would not.
    bad_ratio = {OPTIMIZE: "true", RATIO: "x"}
    gpu = {"name": "c", "image": "i", "resources": {"limits": {GPU: "1"}}}
    template = {"metadata": {"annotations": bad_ratio}, "spec": {"containers": [gpu]}}
    in_kube_system = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p", "namespace": "kube-system"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"template": template}}},
    }
    unannotated = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t", "namespace": "ml"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": [in_kube_system, unannotated]})

    ran = preview("-f", "-", stdin=text.encode())

    assert ran.code == 0, ran.err
    assert ran.err.splitlines() == [
        "Note: PyTorchJob kube-system/p: not sent to CastSlice: its Pods: kube-system is a "
        "system namespace",
        "Note: TrainJob ml/t: not sent to CastSlice: no castops.io/ annotation on it or its Pod "
        "template",
        "2 objects: 0 sliced, 2 left unchanged (2 not sent to CastSlice), 0 passed through "
        "(no Pods); operator resources: 1 PyTorchJob, 1 TrainJob; 0 warnings; resource backend",
    ]


def test_the_patch_of_a_preview_applies_to_the_template(preview: Callable[..., Ran]) -> None:
    # The rewritten RayCluster is what jsonpatch makes of the function's own patch.
    ran = preview("-f", "-", "-o", "json", stdin=RAYCLUSTER.encode())
    [after] = json.loads(ran.out)["items"]
    before = loaded(RAYCLUSTER)
    patch = jsonpatch.make_patch(before, after)
    changed = {op["path"].split("/template/")[0] for op in patch}
    assert changed == {"/spec/workerGroupSpecs/0"}


def test_the_docs_operator_example_prints_what_they_show() -> None:
    readme = (ROOT / "README.md").read_text()
    shown_readme = re.search(
        r"### Operators.*?```sh\ncastslice preview -f examples/pytorchjob.yaml >/dev/null\n```"
        r"\n\n```\n(.*?)```",
        readme,
        re.S,
    ).group(1)
    page = (ROOT / "docs" / "operators.md").read_text()
    shown_diff = re.search(
        r"```sh\ncastslice preview --diff -f examples/pytorchjob.yaml\n```\n\n```diff\n(.*?)```",
        page,
        re.S,
    ).group(1)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CASTSLICE_")}

    def printed(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "castslice", "preview", *arguments],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            check=True,
        )

    assert printed("-f", "examples/pytorchjob.yaml").stderr == shown_readme
    diffed = printed("--diff", "-f", "examples/pytorchjob.yaml")
    assert diffed.stdout + diffed.stderr == shown_diff
    # kubectl prints the same warning without the preview's object reference (the
    # kubectl session docs/operators.md shows).
    [warning] = [line for line in shown_readme.splitlines() if line.startswith("Warning: ")]
    assert f"Warning: {warning.split(': ', 2)[2]}" in page


def test_an_operator_that_does_not_copy_template_annotations_is_said_to_be_out_of_reach(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No operator in the table drops its templates' annotations today; one that did would be
    # declared so, and its opted-in templates told that they cannot be sliced.
    entry = dataclasses.replace(
        workload_kind("kubeflow.org", "v1", "PyTorchJob"), copies_template_annotations=False
    )
    monkeypatch.setattr(workloads, "workload_kind", lambda *kind: entry)
    admission = Admission(load_config({}))
    request = workload_review(loaded(PYTORCHJOB))["request"]

    check = workloads.check_workload(request, admission.pods, GPU)

    assert check.warnings == [
        f"{replica}: the PyTorchJob operator does not copy template annotations onto its Pods; "
        "castslice cannot slice them"
        for replica in ("Master", "Worker")
    ]


@pytest.mark.parametrize(
    ("kind", "nested"), [("RayJob", "rayClusterSpec"), ("RayService", "rayClusterConfig")]
)
def test_a_ray_jobs_and_services_cluster_templates_are_found_where_they_nest(
    kind: str, nested: str
) -> None:
    entry = workload_kind("ray.io", "v1", kind)
    assert entry is not None
    cluster = loaded(RAYCLUSTER)["spec"]
    resource = {"spec": {nested: cluster, "submitterPodTemplate": {"spec": {"containers": []}}}}
    found = [site.label for site in templates(entry, resource)]
    expected = ["headGroupSpec", "workerGroupSpecs[gpu-group]", "workerGroupSpecs[cpu-group]"]
    assert found == ([*expected, "submitterPodTemplate"] if kind == "RayJob" else expected)
