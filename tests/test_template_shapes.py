"""Each shape a Pod template takes in an operator's resource, previewed and warned about as
the Pods its operator creates will be rewritten at admission.

The inputs are the operators' own public samples (named above each), with only the
opt-in and a GPU request added. Every preview is checked by building the Pod the
operator creates from the sample (containers named as the operator names them),
previewing that Pod alone, and comparing the whole rewritten resource with the sample
where only the rewritten Pod's parts were put back.
"""

from __future__ import annotations

import copy
import io
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from castslice import cli
from castslice.contract.definitions import WORKLOAD_KINDS, TemplateLocation, WorkloadKind
from castslice.contract.paths import PathError, parse
from castslice.contract.shapes import KSERVE_PREDICTOR_IMPLEMENTATIONS
from castslice.environment import load_config
from castslice.render.selection import sends_pod
from castslice.render.webhook_configuration import POD_WEBHOOK
from tests.factories import Ran
from tests.markdown import markdown_table
from tests.operator_samples import RAYCLUSTER
from tests.registrations import OWN, registration

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu-shared"
OPTIMIZE = "castops.io/optimize"
APPLIED = "castslice.castops.io/applied"
CANNOT_PREVIEW = "sliced at admission, cannot preview"
NOTHING_TO_SLICE = "there is nothing to slice"


@pytest.fixture
def preview(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Callable[..., Ran]:
    """`castslice preview -o json -f -` of `manifest` in this process, with `env` set."""

    def run(manifest: dict[str, Any], **env: str) -> Ran:
        for name in [name for name in os.environ if name.startswith("CASTSLICE_")]:
            monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        stdin = json.dumps(manifest).encode()
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        capsys.readouterr()
        code = cli.main(["preview", "-o", "json", "-f", "-"])
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return run


def after_of(ran: Ran) -> dict[str, Any]:
    assert ran.code == 0, ran.err
    [after] = json.loads(ran.out)["items"]
    return after


def pod_alone(preview: Callable[..., Ran], metadata: dict, spec: dict, **env: str) -> dict:
    """A Pod the operator would create, as preview leaves it."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    return after_of(preview(pod, **env))


def notes(ran: Ran) -> list[str]:
    return [line for line in ran.err.splitlines() if line.startswith(("Warning:", "Note:"))]


def record(annotations: dict) -> dict:
    return json.loads(annotations[APPLIED])


# KServe: docs/samples/accelerators/tensorflow-gpu.yaml (kserve/kserve at
# v0.20.0-rc0-104-gaaac4e294), with the opt-in in the predictor's annotations.
KSERVE_TENSORFLOW_GPU = """\
apiVersion: "serving.kserve.io/v1beta1"
kind: "InferenceService"
metadata:
  name: "tensorflow-gpu"
  annotations:
    "serving.kserve.io/gke-accelerator": "nvidia-tesla-t4"
spec:
  predictor:
    annotations:
      castops.io/optimize: "true"
    tensorflow:
      storageUri: "gs://kfserving-examples/models/tensorflow/flowers"
      runtimeVersion: "1.11.0-gpu"
      resources:
        limits:
          nvidia.com/gpu: 1
"""


@pytest.mark.parametrize("implementation", [*KSERVE_PREDICTOR_IMPLEMENTATIONS])
def test_kserve_model_and_framework_forms_are_previewed_as_kserve_container(
    preview: Callable[..., Ran], implementation: str
) -> None:
    service = yaml.safe_load(KSERVE_TENSORFLOW_GPU)
    predictor = service["spec"]["predictor"]
    predictor[implementation] = predictor.pop("tensorflow")
    if implementation == "model":
        predictor["model"]["modelFormat"] = {"name": "tensorflow"}

    ran = preview(service)
    after = after_of(ran)

    # The Pod KServe builds: the implementation becomes its first container, kserve-container.
    built = {
        key: value
        for key, value in predictor[implementation].items()
        if key not in ("storageUri", "runtimeVersion", "modelFormat")
    }
    pod = pod_alone(
        preview,
        {"annotations": {**service["metadata"]["annotations"], **predictor["annotations"]}},
        {"containers": [{"name": "kserve-container", **built}]},
    )
    expected = copy.deepcopy(service)
    expected_predictor = expected["spec"]["predictor"]
    expected_predictor[implementation]["resources"] = pod["spec"]["containers"][0]["resources"]
    expected_predictor["annotations"][APPLIED] = pod["metadata"]["annotations"][APPLIED]
    assert after == expected
    assert after["spec"]["predictor"][implementation]["resources"]["limits"] == {SHARED: "1"}
    assert record(expected_predictor["annotations"])["original"] == {"kserve-container": "1"}
    assert notes(ran) == []
    assert "1 sliced" in ran.err


def test_a_kserve_model_without_a_gpu_may_get_one_from_its_runtime(
    preview: Callable[..., Ran],
) -> None:
    service = yaml.safe_load(KSERVE_TENSORFLOW_GPU)
    predictor = service["spec"]["predictor"]
    predictor["model"] = predictor.pop("tensorflow")
    predictor["model"]["modelFormat"] = {"name": "tensorflow"}
    del predictor["model"]["resources"]

    ran = preview(service)

    assert after_of(ran) == service
    assert not any(NOTHING_TO_SLICE in line for line in notes(ran))
    assert notes(ran) == [
        "Note: InferenceService default/tensorflow-gpu: predictor: its Pods' containers come "
        "from the ServingRuntime KServe merges into kserve-container; any nvidia.com/gpu they "
        f"ask for is {CANNOT_PREVIEW}"
    ]


# Argo Workflows: examples/sidecar.yaml (argoproj/argo-workflows at v4.1.0-rc2-80-gf016ad89e),
# named, with the opt-in in the step's metadata.
ARGO_SIDECAR = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  name: sidecar
spec:
  entrypoint: sidecar-example
  templates:
  - name: sidecar-example
    metadata:
      annotations:
        castops.io/optimize: "true"
    container:
      image: alpine:3.23
      command: [sh, -c]
      args: ["apk update && apk add curl"]
    sidecars:
    - name: influxdb
      image: influxdb:1.2
      command: [influxd]
"""

# examples/container-set-template/graph-workflow.yaml, two of its four containers.
ARGO_CONTAINER_SET = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  name: graph
spec:
  entrypoint: main
  templates:
    - name: main
      metadata:
        annotations:
          castops.io/optimize: "true"
      containerSet:
        containers:
          - name: a
            image: argoproj/argosay:v2
          - name: b
            image: argoproj/argosay:v2
            dependencies: ["a"]
"""


def _gpu(container: dict, count: int = 1) -> None:
    container["resources"] = {"limits": {GPU: count}}


def test_argo_names_a_steps_container_main(preview: Callable[..., Ran]) -> None:
    workflow = yaml.safe_load(ARGO_SIDECAR)
    step = workflow["spec"]["templates"][0]
    _gpu(step["container"])

    ran = preview(workflow)
    after = after_of(ran)

    pod = pod_alone(
        preview,
        step["metadata"],
        {"containers": [{**step["container"], "name": "main"}, *step["sidecars"]]},
    )
    expected = copy.deepcopy(workflow)
    expected["spec"]["templates"][0]["metadata"] = pod["metadata"]
    expected["spec"]["templates"][0]["container"]["resources"] = pod["spec"]["containers"][0][
        "resources"
    ]
    assert after == expected
    assert "name" not in after["spec"]["templates"][0]["container"]
    assert record(pod["metadata"]["annotations"])["original"] == {"main": "1"}
    assert notes(ran) == []


@pytest.mark.parametrize("place", ["sidecars", "initContainers"])
def test_a_gpu_in_an_argo_sidecar_or_init_container_is_sliced(
    preview: Callable[..., Ran], place: str
) -> None:
    workflow = yaml.safe_load(ARGO_SIDECAR)
    step = workflow["spec"]["templates"][0]
    if place == "initContainers":
        step["initContainers"] = step.pop("sidecars")
    _gpu(step[place][0])

    ran = preview(workflow)
    after = after_of(ran)

    spec = {"containers": [{**step["container"], "name": "main"}, *step.get("sidecars", [])]}
    if place == "initContainers":
        spec["initContainers"] = step["initContainers"]
    pod = pod_alone(preview, step["metadata"], spec)
    rewritten = (
        pod["spec"]["initContainers"][0]
        if spec.get("initContainers")
        else pod["spec"]["containers"][1]
    )
    expected = copy.deepcopy(workflow)
    expected["spec"]["templates"][0]["metadata"] = pod["metadata"]
    expected["spec"]["templates"][0][place][0] = rewritten
    assert after == expected
    assert rewritten["resources"]["limits"] == {SHARED: "1"}
    assert record(pod["metadata"]["annotations"])["original"] == {"influxdb": "1"}
    assert notes(ran) == []
    assert "1 sliced" in ran.err


def test_an_argo_container_set_is_previewed_by_its_container_names(
    preview: Callable[..., Ran],
) -> None:
    workflow = yaml.safe_load(ARGO_CONTAINER_SET)
    step = workflow["spec"]["templates"][0]
    _gpu(step["containerSet"]["containers"][1], 2)

    ran = preview(workflow)
    after = after_of(ran)

    pod = pod_alone(preview, step["metadata"], {"containers": step["containerSet"]["containers"]})
    expected = copy.deepcopy(workflow)
    expected["spec"]["templates"][0]["metadata"] = pod["metadata"]
    expected["spec"]["templates"][0]["containerSet"]["containers"] = pod["spec"]["containers"]
    assert after == expected
    assert record(pod["metadata"]["annotations"])["original"] == {"b": "2"}
    assert "1 sliced" in ran.err


def test_on_dra_an_argo_step_is_said_to_be_sliced_at_admission_not_written_without_claims(
    preview: Callable[..., Ran],
) -> None:
    workflow = yaml.safe_load(ARGO_SIDECAR)
    _gpu(workflow["spec"]["templates"][0]["sidecars"][0])

    ran = preview(workflow, CASTSLICE_BACKEND="dra")

    # Claims on a container need the Pod's resourceClaims, which an Argo template cannot hold.
    assert after_of(ran) == workflow
    assert (
        "Note: Workflow default/sidecar: templates[sidecar-example]: sliced at admission, "
        "cannot preview: an Argo template has no resourceClaims field for what the Pod gets"
    ) in notes(ran)


def test_on_dra_a_kserve_component_gets_its_claims_where_resource_claims_go(
    preview: Callable[..., Ran],
) -> None:
    service = yaml.safe_load(KSERVE_TENSORFLOW_GPU)

    ran = preview(service, CASTSLICE_BACKEND="dra")
    predictor = after_of(ran)["spec"]["predictor"]

    (claim,) = predictor["tensorflow"]["resources"]["claims"]
    assert [item["name"] for item in predictor["resourceClaims"]] == [claim["name"]]
    assert not any(CANNOT_PREVIEW in line for line in notes(ran))


# Kubeflow Trainer: docs/operator-guides/runtime-patches.md (kubeflow/trainer at
# v1.5.0-rc.0-1092-g8c0f5059b), the patch's Pod template opted in.
TRAINJOB_RUNTIME_PATCHES = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: pytorch-distributed
spec:
  runtimeRef:
    name: pytorch-distributed-gpu
  trainer:
    image: docker.io/custom-training
  runtimePatches:
    - manager: trainer.kubeflow.org/kubeflow-sdk
      trainingRuntimeSpec:
        template:
          spec:
            replicatedJobs:
              - name: node
                template:
                  spec:
                    template:
                      metadata:
                        annotations:
                          castops.io/optimize: "true"
                      spec:
                        nodeSelector:
                          accelerator: nvidia-tesla-v100
"""
# The same guide's "Before (PodTemplateOverrides)", Trainer v2.1's form.
TRAINJOB_POD_TEMPLATE_OVERRIDES = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: pytorch-distributed
spec:
  runtimeRef:
    name: pytorch-distributed-gpu
  podTemplateOverrides:
    - targetJobs:
        - name: node
      metadata:
        annotations:
          castops.io/optimize: "true"
      spec:
        serviceAccountName: ml-training-sa
        nodeSelector:
          accelerator: nvidia-tesla-v100
"""


@pytest.mark.parametrize(
    ("manifest", "label"),
    [
        (TRAINJOB_RUNTIME_PATCHES, "runtimePatches[trainer.kubeflow.org/kubeflow-sdk/node]"),
        (TRAINJOB_POD_TEMPLATE_OVERRIDES, "podTemplateOverrides[0]"),
    ],
)
def test_a_trainjobs_pod_metadata_is_said_to_be_sliced_at_admission(
    preview: Callable[..., Ran], manifest: str, label: str
) -> None:
    train_job = yaml.safe_load(manifest)
    train_job["spec"].setdefault("trainer", {})["resourcesPerNode"] = {"limits": {GPU: "8"}}

    ran = preview(train_job)

    assert after_of(ran) == train_job
    assert notes(ran) == [
        f"Note: TrainJob default/pytorch-distributed: {label}: its Pods' containers come from "
        "the TrainingRuntime the TrainJob names; any nvidia.com/gpu they ask for is "
        f"{CANNOT_PREVIEW}"
    ]
    assert "not sent" not in ran.err


def test_an_annotation_on_a_trainjob_is_sent_to_the_patches_that_reach_the_pods(
    preview: Callable[..., Ran],
) -> None:
    train_job = yaml.safe_load(TRAINJOB_RUNTIME_PATCHES)
    train_job["metadata"]["annotations"] = {OPTIMIZE: "true"}
    del train_job["spec"]["runtimePatches"]

    ran = preview(train_job)

    assert notes(ran) == [
        "Warning: TrainJob default/pytorch-distributed: castops.io/optimize on the TrainJob is "
        "ignored; move it to spec.runtimePatches[]...template.metadata"
    ]


def _ray_cluster() -> dict[str, Any]:
    """KubeRay's sample with its CPU head left out and its GPU worker group opted in."""
    cluster = yaml.safe_load(RAYCLUSTER)
    del cluster["metadata"]["annotations"]
    cluster["spec"]["workerGroupSpecs"] = cluster["spec"]["workerGroupSpecs"][:1]
    return cluster


def test_a_raycluster_whose_workers_are_sliced_is_not_said_to_be_unsent(
    preview: Callable[..., Ran],
) -> None:
    ran = preview(_ray_cluster())

    assert "not sent" not in ran.err
    assert notes(ran) == []
    assert ran.err.splitlines()[-1].startswith("1 object: 1 sliced, 0 left unchanged, ")


# Zero GPUs and odd spellings: the registration sends by the GPU's name, whatever the count.


@pytest.mark.parametrize("quantity", ["0", "00", 0.0, 0, "1e0", "0.0", "1"])
def test_an_enrolled_pod_naming_the_gpu_is_sent_whatever_the_quantity(quantity: Any) -> None:
    config = load_config({"CASTSLICE_POLICY": "rules: [{name: all, optimize: true}]"})
    pod = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: quantity}}}]},
    }
    assert sends_pod(config, pod, "default", OWN).sent
    assert registration(config, POD_WEBHOOK).sends(pod, "default")


# The template path grammar, read the same by the walker and the CEL.


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("spec.replicatedJobs[name].*", "a list's items cannot be read as a map"),
        ("*.template", "`*` must follow the name of a map"),
        ("spec.*.*", "`*` must follow the name of a map"),
        ("spec.worker-groups.template", "'worker-groups' is not a field name"),
        ("spec..template", "'' is not a field name"),
        ("spec.groups[group-name].template", "'group-name' is not a field name"),
        ("spec.namespace.template", "'namespace' is a word CEL reserves"),
    ],
)
def test_a_template_path_outside_the_grammar_is_refused_when_the_table_is_built(
    path: str, said: str
) -> None:
    with pytest.raises(PathError) as raised:
        TemplateLocation(path)
    assert said in str(raised.value)
    assert repr(path) in str(raised.value)
    with pytest.raises(PathError):
        parse(path)


# docs/operators.md's table of shapes: each row's kinds are the table's, and each cell of what
# the preview says is what it says of that shape's sample on those backends.

OPERATORS_DOC = Path(__file__).resolve().parent.parent / "docs" / "operators.md"
SHAPES_HEADER = "| shape | kinds |"
BACKEND_COLUMNS = {3: ("resource", "gke", "nvidia"), 4: ("dra",)}


def _shape_sample(shape_name: str) -> dict[str, Any]:
    if shape_name == "Argo step":
        workflow = yaml.safe_load(ARGO_SIDECAR)
        _gpu(workflow["spec"]["templates"][0]["container"])
        return workflow
    if shape_name == "Pod template":
        return _ray_cluster()
    samples = {
        "KServe component": KSERVE_TENSORFLOW_GPU,
        "Pod metadata patch": TRAINJOB_RUNTIME_PATCHES,
    }
    return yaml.safe_load(samples[shape_name])


def _shapes_table() -> list[list[str]]:
    return markdown_table(OPERATORS_DOC, SHAPES_HEADER)[1]


def _kind_names(kinds: tuple[WorkloadKind, ...]) -> set[str]:
    # As the docs tell two kinds of one name apart: by the operator.
    others = {"batch.volcano.sh": "Volcano", "serving.knative.dev": "Knative"}
    return {
        f"{kind.kind} ({others[kind.group]})" if kind.group in others else kind.kind
        for kind in kinds
    }


def test_the_docs_table_of_shapes_names_every_shape_and_its_kinds() -> None:
    rows = _shapes_table()
    by_shape: dict[str, set[str]] = {}
    for kind in WORKLOAD_KINDS:
        for location in kind.templates:
            by_shape.setdefault(location.shape.name, set()).update(_kind_names((kind,)))
    assert {row[0]: set(row[1].split(", ")) for row in rows} == by_shape


@pytest.mark.parametrize("row", _shapes_table(), ids=lambda row: row[0])
def test_the_docs_table_of_shapes_says_what_preview_says(
    preview: Callable[..., Ran], row: list[str]
) -> None:
    sample = _shape_sample(row[0])
    for column, backends in BACKEND_COLUMNS.items():
        for backend in backends:
            ran = preview(sample, CASTSLICE_BACKEND=backend)
            if after_of(ran) != sample:
                said = "rewritten in place"
            elif any(CANNOT_PREVIEW in line for line in notes(ran)):
                said = CANNOT_PREVIEW
            else:
                said = "left unchanged"
            assert row[column] == said, (row[0], backend, ran.err)
