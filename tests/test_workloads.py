"""Workload warnings: Deployments, Jobs, CronJobs… reviewed through the deployed function.

A workload is never patched; its review warns about what its Pods will get,
with the very messages the Pods themselves get from the same decision.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from starlette.testclient import TestClient

from castslice.contract import definitions as contract
from castslice.contract import review
from castslice.contract.review import UnreadableObject, decode_review
from castslice.decision.admission import Admission
from castslice.decision.slices import clip
from castslice.environment import load_config
from tests.factories import (
    GPU,
    TRAINER,
    assert_warned_only,
    container,
    gpu_container,
    log_lines,
    make_review,
    opted_in,
    review_response,
    workload_review,
)
from tests.helpers import WORKLOAD_KINDS, pod_of, template_of, workload

OPTIMIZE = "castops.io/optimize"
RATIO = "castops.io/slice-ratio"
TYPE = "castops.io/workload-type"


@pytest.fixture
def gke(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client(CASTSLICE_BACKEND="gke")


@pytest.mark.parametrize("kind", list(WORKLOAD_KINDS))
def test_annotations_on_the_workload_itself_are_named_with_where_they_belong(
    client: TestClient, kind: str
) -> None:
    manifest = workload(kind, annotations=opted_in(**{TYPE: "inference"}))

    warnings = assert_warned_only(review_response(client, workload_review(manifest)))

    destination = WORKLOAD_KINDS[kind][1] + ".metadata.annotations"
    assert warnings == [
        f"{OPTIMIZE} on the {kind} is ignored; move it to {destination}",
        f"{TYPE} on the {kind} is ignored; move it to {destination}",
    ]


@pytest.mark.parametrize("kind", list(WORKLOAD_KINDS))
def test_a_correct_workload_gets_no_warning_and_no_patch(client: TestClient, kind: str) -> None:
    manifest = workload(kind, template_annotations=opted_in(**{TYPE: "inference"}))

    assert assert_warned_only(review_response(client, workload_review(manifest))) == []


def test_a_cronjobs_job_template_metadata_does_not_reach_its_pods(client: TestClient) -> None:
    manifest = workload("CronJob", template_annotations=opted_in())
    manifest["spec"]["jobTemplate"]["metadata"] = {"annotations": {TYPE: "training"}}

    warnings = assert_warned_only(review_response(client, workload_review(manifest)))

    assert warnings == [
        f"{TYPE} on the jobTemplate is ignored; "
        "move it to spec.jobTemplate.spec.template.metadata.annotations"
    ]


def test_a_key_on_both_the_workload_and_its_template_is_not_a_mistake(
    client: TestClient,
) -> None:
    manifest = workload("Deployment", template_annotations=opted_in(), annotations=opted_in())

    assert assert_warned_only(review_response(client, workload_review(manifest))) == []


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param(opted_in(**{RATIO: "x"}), id="ratio-x"),
        pytest.param(opted_in(**{RATIO: "0", TYPE: "Training"}), id="ratio-and-type"),
        pytest.param(opted_in(**{TYPE: "a" * 300}), id="long-value"),
        pytest.param(opted_in(**{RATIO: "\u202e1\n2"}), id="control-characters"),
    ],
)
@pytest.mark.parametrize("kind", ["Job", "CronJob", "StatefulSet"])
def test_invalid_values_in_the_template_get_exactly_the_pods_warnings(
    client: TestClient, kind: str, annotations: dict[str, str]
) -> None:
    manifest = workload(kind, template_annotations=annotations)

    warnings = assert_warned_only(review_response(client, workload_review(manifest)))

    pod_warnings = review_response(client, make_review(pod_of(manifest)))["warnings"]
    assert pod_warnings
    assert warnings == pod_warnings


def test_an_opted_in_template_without_a_gpu_request_is_pointed_out(client: TestClient) -> None:
    manifest = workload(
        "CronJob",
        template_annotations=opted_in(**{TYPE: "batch"}),
        containers=[container("report", requests={"cpu": "2"}, limits={"memory": "1Gi"})],
    )

    warnings = assert_warned_only(review_response(client, workload_review(manifest)))

    assert warnings == [
        f"the Pod template is opted in but no container asks for {GPU}; there is nothing to slice"
    ]
    # A Pod like that is simply left alone: the warning is for the person applying the workload.
    assert "warnings" not in review_response(client, make_review(pod_of(manifest)))


def test_a_hand_placed_template_gets_the_pods_warning(gke: TestClient) -> None:
    manifest = workload(
        "Deployment",
        template_annotations=opted_in(**{TYPE: "dev"}),
        node_selector={"cloud.google.com/gke-max-shared-clients-per-gpu": "2"},
    )

    warnings = assert_warned_only(review_response(gke, workload_review(manifest)))

    assert warnings == review_response(gke, make_review(pod_of(manifest)))["warnings"]
    [warning] = warnings
    assert "cloud.google.com/gke-max-shared-clients-per-gpu" in warning
    assert "set by hand" in warning


def test_asking_for_more_gpus_than_the_slices_give_gets_the_pods_warning(
    gke: TestClient,
) -> None:
    manifest = workload(
        "Job",
        template_annotations=opted_in(**{TYPE: "dev"}),
        containers=[gpu_container("train", count="2")],
    )

    warnings = assert_warned_only(review_response(gke, workload_review(manifest)))

    assert warnings == [f'container "train" asked for 2 {GPU}; castslice gives it 1/4 of a GPU']
    assert warnings == review_response(gke, make_review(pod_of(manifest)))["warnings"]


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param(
            {OPTIMIZE: "yes", TYPE: "dev"},
            [f'{OPTIMIZE}="yes" is not "true"; the Pods are not sliced'],
            id="optimize-yes",
        ),
        pytest.param(
            {OPTIMIZE: "True"},
            [f'{OPTIMIZE}="True" is not "true"; the Pods are not sliced'],
            id="optimize-capitalised",
        ),
        pytest.param(
            {TYPE: "training"},
            [f'{TYPE} is set but {OPTIMIZE} is not "true"; the Pods are not sliced'],
            id="type-without-optimize",
        ),
        pytest.param(
            {"castops.io/optimise": "true"},
            [f'"castops.io/optimise" is set but {OPTIMIZE} is not "true"; the Pods are not sliced'],
            id="misspelt-key",
        ),
        pytest.param({OPTIMIZE: "false", TYPE: "dev"}, [], id="explicit-opt-out"),
        pytest.param({"example.com/team": "ml"}, [], id="no-castops-annotation"),
    ],
)
def test_a_template_that_is_not_opted_in_says_why_its_pods_are_not_sliced(
    client: TestClient, annotations: dict[str, str], expected: list[str]
) -> None:
    manifest = workload("Deployment", template_annotations=annotations)

    assert assert_warned_only(review_response(client, workload_review(manifest))) == expected


def test_a_decision_record_copied_into_a_template_is_pointed_out(client: TestClient) -> None:
    record = '{"slices":1,"source":"default","backend":"resource","original":{"main":"1"}}'
    annotations = opted_in(**{"castslice.castops.io/applied": record})
    manifest = workload("Deployment", template_annotations=annotations)

    warnings = assert_warned_only(review_response(client, workload_review(manifest)))

    assert warnings == ["castslice leaves the Pods of this template unchanged: already applied"]


def test_updates_are_checked_too_and_deletes_are_not(client: TestClient) -> None:
    manifest = workload("Deployment", annotations=opted_in())

    update = assert_warned_only(review_response(client, workload_review(manifest, "UPDATE")))
    delete = assert_warned_only(review_response(client, workload_review(manifest, "DELETE")))

    assert update == [
        f"{OPTIMIZE} on the Deployment is ignored; move it to spec.template.metadata.annotations"
    ]
    assert delete == []


@pytest.mark.parametrize(
    "kind",
    [
        {"group": "apps", "version": "v1beta1", "kind": "Deployment"},
        {"group": "", "version": "v1", "kind": "PodTemplate"},
        {"group": "example.com", "version": "v1", "kind": "Job"},
    ],
    ids=["old-version", "pod-template", "foreign-group"],
)
def test_other_kinds_are_neither_warned_nor_patched(client: TestClient, kind: dict) -> None:
    manifest = workload("Deployment", annotations=opted_in())

    response = review_response(client, make_review(manifest, kind=kind))

    assert assert_warned_only(response) == []


def test_a_workload_without_a_template_is_answered(client: TestClient) -> None:
    manifest = workload("Deployment", annotations=opted_in())
    del manifest["spec"]["template"]

    assert assert_warned_only(review_response(client, workload_review(manifest))) == []


def test_long_misplaced_keys_are_shortened(client: TestClient) -> None:
    key = "castops.io/" + "x" * 200
    manifest = workload("CronJob", annotations={key: "true"})
    manifest["spec"]["jobTemplate"]["metadata"] = {"annotations": {key: "true"}}

    warnings = assert_warned_only(review_response(client, workload_review(manifest)))

    assert len(warnings) == 2
    assert all(warning.startswith('"castops.io/xxxxxx') for warning in warnings)
    assert warnings[1].endswith("move it to spec.jobTemplate.spec.template.metadata.annotations")


def test_an_unreadable_template_is_admitted_with_a_warning(
    client: TestClient, capsys: pytest.CaptureFixture
) -> None:
    manifest = workload("Deployment", template_annotations=opted_in())
    manifest["spec"]["template"]["spec"]["containers"] = "not a list"

    warnings = assert_warned_only(review_response(client, workload_review(manifest)))

    assert len(warnings) == 1 and "admitted unchanged" in warnings[0]
    [line] = log_lines(capsys)
    assert line["severity"] == "ERROR"
    assert "$.request.object.spec.template.spec.containers" in line["message"]


def test_one_log_line_per_workload_review_says_what_its_pods_get(
    client: TestClient, capsys: pytest.CaptureFixture
) -> None:
    manifest = workload("Job", template_annotations=opted_in(**{RATIO: "x", TYPE: "training"}))

    review_response(client, workload_review(manifest))

    [line] = log_lines(capsys)
    line.pop("latencyMs")
    assert line == {
        "severity": "INFO",
        "message": "job warned",
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "namespace": "ml",
        "pod": "vllm",
        "decision": "warned",
        "reason": "pod template: mutated",
        "slices": 4,
        "source": "workload-type",
        "backend": "resource",
        "containersChanged": 0,
        "warnings": 1,
        "dryRun": False,
    }


def test_a_checked_workload_logs_its_decision(
    client: TestClient, capsys: pytest.CaptureFixture
) -> None:
    manifest = workload("StatefulSet", template_annotations={OPTIMIZE: "false"})

    review_response(client, workload_review(manifest))

    [line] = log_lines(capsys)
    assert (line["message"], line["decision"], line["reason"]) == (
        "statefulset checked",
        "checked",
        "pod template: opted out",
    )


def test_decoding_reads_a_workload_down_to_its_template_and_no_further() -> None:
    manifest = workload("CronJob", template_annotations=opted_in(), annotations={"team": "ml"})
    template = template_of(manifest)
    template["spec"]["containers"][0]["env"] = [{"name": "TOKEN", "value": "secret"}]
    template["spec"]["volumes"] = [{"name": "cache", "emptyDir": {}}]

    request = decode_review(json.dumps(workload_review(manifest)).encode())

    assert request["object"] == {
        "metadata": {"name": "vllm", "namespace": "ml", "annotations": {"team": "ml"}},
        "spec": {
            "jobTemplate": {
                "spec": {
                    "template": {
                        "metadata": {"labels": {"app": "vllm"}, "annotations": opted_in()},
                        "spec": {
                            "containers": [
                                {
                                    "name": "main",
                                    "resources": {
                                        "requests": {GPU: "1", "cpu": "1"},
                                        "limits": {GPU: "1"},
                                    },
                                    # The names only: a value is never decoded.
                                    "env": [{"name": "TOKEN"}],
                                }
                            ]
                        },
                    }
                }
            }
        },
    }


def test_decoding_a_pod_review_ignores_template_fields() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"template": {"spec": {}}, "containers": []}}

    request = decode_review(json.dumps(make_review(pod)).encode())

    assert request["object"] == {"metadata": {"name": "p"}, "spec": {"containers": []}}


TRAINER_KIND = {"group": "example.com", "version": "v1", "kind": "Trainer"}


@pytest.fixture
def trainer_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(contract.WORKLOADS, ("example.com", "v1", "Trainer"), TRAINER)
    monkeypatch.setattr(review, "WORKLOAD_KIND_NAMES", contract.WORKLOAD_KIND_NAMES | {"Trainer"})


def _pod_template(annotations: dict[str, str], count: str = "1") -> dict:
    return {
        "metadata": {"annotations": annotations},
        "spec": {"containers": [gpu_container(count=count)], "unknownField": {"kept": "out"}},
    }


@pytest.mark.usefixtures("trainer_kind")
def test_every_template_of_a_kind_with_several_is_reviewed() -> None:
    trainer = {
        "metadata": {"name": "t", "namespace": "ml"},
        "spec": {
            "replicaSpecs": {
                "Master": {"template": _pod_template(opted_in(**{RATIO: "x"}))},
                "Worker": {"template": _pod_template({OPTIMIZE: "maybe"})},
            },
            "groups": [{"template": {"spec": {"template": _pod_template(opted_in(), "3")}}}],
        },
    }
    request = decode_review(json.dumps(make_review(trainer, kind=TRAINER_KIND)).encode())
    outcome = Admission(load_config({})).review(request)

    assert outcome.subject == "trainer"
    assert outcome.response["warnings"] == [
        # The template's path comes first; the whole warning is clipped as any is.
        clip(
            'spec.replicaSpecs.Master.template: castops.io/slice-ratio="x" ignored (want a '
            "whole number 1-1000); using the default of 1 slice"
        ),
        'spec.replicaSpecs.Worker.template: castops.io/optimize="maybe" is not "true"; the '
        "Pods are not sliced",
        'spec.groups.0.template.spec.template: container "main" asked for 3 nvidia.com/gpu; '
        "castslice gives it 1/4 of a GPU",
    ]
    assert "patch" not in outcome.response


@pytest.mark.usefixtures("trainer_kind")
def test_a_bad_template_in_a_list_is_named_by_its_path() -> None:
    broken = _pod_template(opted_in())
    broken["spec"]["containers"][0]["name"] = 7
    trainer = {
        "metadata": {"name": "t"},
        "spec": {"groups": [{}, {"template": {"spec": {"template": broken}}}]},
    }
    body = json.dumps(make_review(trainer, kind=TRAINER_KIND)).encode()
    with pytest.raises(UnreadableObject) as raised:
        decode_review(body)
    assert "$.request.object.spec.groups.1.template.spec.template.spec.containers[0].name" in str(
        raised.value
    )
