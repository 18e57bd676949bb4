"""Workload warnings in kubectl's own output: `kubectl apply -f deployment.yaml`.

The Pods a controller creates are warned about to the controller, which shows
no one; the workload webhook tells the person applying the Deployment, Job or
CronJob instead, and never changes the workload.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .castslice_server import CastSliceServer
from .kubectl import Kubectl

WRONG_PLACE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm
  annotations:
    castops.io/optimize: "true"
    castops.io/workload-type: inference
spec:
  replicas: 1
  selector:
    matchLabels: {app: vllm}
  template:
    metadata:
      labels: {app: vllm}
    spec:
      containers:
        - name: vllm
          image: registry.invalid/vllm-openai:v0.6.3
          resources:
            limits: {nvidia.com/gpu: "1"}
"""

BAD_RATIO = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: finetune
spec:
  template:
    metadata:
      annotations:
        castops.io/optimize: "true"
        castops.io/slice-ratio: "x"
    spec:
      restartPolicy: Never
      containers:
        - name: train
          image: registry.invalid/trainer:1
          resources:
            limits: {nvidia.com/gpu: "1"}
"""

NO_GPU = """\
apiVersion: batch/v1
kind: CronJob
metadata:
  name: report
spec:
  schedule: "@daily"
  jobTemplate:
    spec:
      template:
        metadata:
          annotations:
            castops.io/optimize: "true"
        spec:
          restartPolicy: OnFailure
          containers:
            - name: report
              image: registry.invalid/report:1
              resources:
                requests: {cpu: 500m}
"""

CORRECT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: triton
spec:
  replicas: 1
  selector:
    matchLabels: {app: triton}
  template:
    metadata:
      labels: {app: triton}
      annotations:
        castops.io/optimize: "true"
        castops.io/workload-type: inference
    spec:
      containers:
        - name: triton
          image: registry.invalid/tritonserver:24.08
          resources:
            limits: {nvidia.com/gpu: "1"}
"""


def apply(kubectl: Kubectl, tmp_path: Path, namespace: str, name: str, manifest: str) -> list[str]:
    """`kubectl apply -f NAME.yaml` as a user runs it; the `Warning:` lines it prints."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(manifest)
    stderr = kubectl.run("apply", "-n", namespace, "-f", str(path)).stderr
    return [line for line in stderr.splitlines() if line.startswith("Warning: ")]


def stored(kubectl: Kubectl, namespace: str, kind: str, name: str) -> dict:
    return json.loads(kubectl.run("get", "-n", namespace, kind, name, "-o", "json").stdout)


@pytest.mark.parametrize(
    ("name", "manifest", "kind", "expected"),
    [
        pytest.param(
            "vllm",
            WRONG_PLACE,
            "deployment",
            [
                "Warning: castops.io/optimize on the Deployment is ignored; "
                "move it to spec.template.metadata.annotations",
                "Warning: castops.io/workload-type on the Deployment is ignored; "
                "move it to spec.template.metadata.annotations",
            ],
            id="annotations-on-the-deployment",
        ),
        pytest.param(
            "finetune",
            BAD_RATIO,
            "job",
            [
                'Warning: castops.io/slice-ratio="x" ignored (want a whole number 1-1000); '
                "using the default of 1 slice"
            ],
            id="job-with-invalid-ratio",
        ),
        pytest.param(
            "report",
            NO_GPU,
            "cronjob",
            [
                "Warning: the Pod template is opted in but no container asks for "
                "nvidia.com/gpu; there is nothing to slice"
            ],
            id="cronjob-without-gpu",
        ),
        pytest.param("triton", CORRECT, "deployment", [], id="correct-deployment"),
    ],
)
def test_kubectl_apply_prints_the_workload_warnings(
    kubectl_user: Kubectl,
    castslice: CastSliceServer,
    namespace: str,
    tmp_path: Path,
    name: str,
    manifest: str,
    kind: str,
    expected: list[str],
) -> None:
    warnings = apply(kubectl_user, tmp_path, namespace, name, manifest)

    assert warnings == expected
    # Never a patch: the stored workload carries nothing CastSlice wrote.
    text = json.dumps(stored(kubectl_user, namespace, kind, name))
    assert "castslice.castops.io" not in text
    assert "gpu-shared" not in text
    # One review per write of the workload itself (controllers write only its status).
    reviews = castslice.reviews_of(namespace, name)
    assert reviews
    decision = "warned" if expected else "checked"
    assert {(r["message"], r["warnings"]) for r in reviews} == {
        (f"{kind} {decision}", len(expected))
    }


def test_an_update_that_breaks_the_template_is_warned_too(
    kubectl_user: Kubectl, castslice: CastSliceServer, namespace: str, tmp_path: Path
) -> None:
    assert apply(kubectl_user, tmp_path, namespace, "triton", CORRECT) == []

    broken = CORRECT.replace("workload-type: inference", "workload-type: Inference")
    warnings = apply(kubectl_user, tmp_path, namespace, "triton", broken)

    assert warnings == [
        'Warning: castops.io/workload-type="Inference" ignored '
        "(want training|inference|batch|dev); using the default of 1 slice"
    ]
    decisions = [review["decision"] for review in castslice.reviews_of(namespace, "triton")]
    assert (decisions[0], decisions[-1]) == ("checked", "warned")


def test_workloads_without_castslice_annotations_never_reach_the_function(
    kubectl_user: Kubectl, castslice: CastSliceServer, namespace: str, tmp_path: Path
) -> None:
    plain = CORRECT.replace("triton", "plain").replace(
        '        castops.io/optimize: "true"\n        castops.io/workload-type: inference\n',
        "        example.com/team: ml\n",
    )
    assert "castops.io" not in plain

    assert apply(kubectl_user, tmp_path, namespace, "plain", plain) == []

    assert castslice.reviews_of(namespace, "plain") == []
