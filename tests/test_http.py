"""The deployed function, through functions-framework's own app."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from castslice import __version__
from castslice.serve import core
from tests.factories import (
    GPU,
    JSON_HEADERS,
    SHARED,
    applied,
    apply_response,
    container,
    gpu_container,
    log_lines,
    make_pod,
    make_review,
    media_type,
    opted_in,
    post,
    review_response,
)

TOKEN = "k7Qm2pX9vR4tY8wZ"


def test_opted_in_pod_is_rewritten(client: TestClient) -> None:
    pod = make_pod(
        opted_in(**{"castops.io/workload-type": "training"}),
        init_containers=[container("fetch", limits={GPU: "1"})],
        containers=[gpu_container("train")],
    )
    response = review_response(client, make_review(pod))
    expected = make_pod(
        opted_in(**{"castops.io/workload-type": "training"}),
        init_containers=[container("fetch", limits={SHARED: "4"})],
        containers=[container("train", requests={"cpu": "1", SHARED: "4"}, limits={SHARED: "4"})],
    )
    assert apply_response(pod, response) == applied(
        expected, 4, "workload-type", {"fetch": "1", "train": "1"}
    )
    assert response["auditAnnotations"] == {
        "slices": "4",
        "slice-source": "workload-type",
        "backend": "resource",
    }
    assert "warnings" not in response


@pytest.mark.parametrize("path", ["/", "/?timeout=5s", "/mutate", "/a/b/c?timeout=10s&x=1"])
def test_any_path_serves_reviews(client: TestClient, path: str) -> None:
    pod = make_pod(opted_in())
    expected = make_pod(
        opted_in(), containers=[container(requests={"cpu": "1", SHARED: "1"}, limits={SHARED: "1"})]
    )
    assert apply_response(pod, review_response(client, make_review(pod), path)) == applied(
        expected, 1, "default", {"main": "1"}
    )


@pytest.mark.parametrize(
    "review",
    [
        make_review(make_pod({"castops.io/optimize": "false"})),
        make_review(make_pod(None)),
        make_review(make_pod(opted_in()), operation="UPDATE"),
        make_review(make_pod(opted_in()), operation="DELETE"),
        make_review(None, operation="DELETE"),
        make_review(make_pod(opted_in()), operation="CONNECT"),
        make_review(make_pod(opted_in()), sub_resource="status"),
        make_review(
            make_pod(opted_in()), kind={"group": "apps", "version": "v1", "kind": "Deployment"}
        ),
        make_review(make_pod(opted_in()), kind={"group": "", "version": "v1", "kind": "Binding"}),
        make_review(make_pod(opted_in(**{"kubernetes.io/config.mirror": "d41d8cd98f00b204"}))),
        make_review(make_pod(opted_in(), containers=[container(requests={"cpu": "1"})])),
        make_review(
            make_pod(
                opted_in(), containers=[container(requests={SHARED: "1"}, limits={SHARED: "1"})]
            )
        ),
    ],
    ids=[
        "optimize-false",
        "no-annotations",
        "update",
        "delete",
        "delete-null-object",
        "connect",
        "subresource",
        "deployment",
        "binding",
        "mirror",
        "no-gpu",
        "already-rewritten",
    ],
)
def test_untouched_requests_are_allowed_without_a_patch(client: TestClient, review: dict) -> None:
    response = review_response(client, review)
    assert response == {"uid": review["request"]["uid"], "allowed": True}


def test_dry_run_gets_the_same_answer(client: TestClient) -> None:
    pod = make_pod(opted_in(**{"castops.io/slice-ratio": "3"}))
    assert review_response(client, make_review(pod, dry_run=True)) == review_response(
        client, make_review(pod, dry_run=False)
    )


def test_invalid_annotation_warns_and_uses_fallback(client: TestClient) -> None:
    pod = make_pod(opted_in(**{"castops.io/slice-ratio": "1.5", "castops.io/workload-type": "dev"}))
    response = review_response(client, make_review(pod))
    assert response["warnings"] == [
        'castops.io/slice-ratio="1.5" ignored (want a whole number 1-1000); '
        "using 1 slice from workload-type"
    ]
    assert response["auditAnnotations"] == {
        "slices": "1",
        "slice-source": "workload-type",
        "backend": "resource",
    }


def test_opted_in_without_gpu_still_reports_bad_annotations(client: TestClient) -> None:
    pod = make_pod(opted_in(**{"castops.io/workload-type": "x"}), containers=[container()])
    response = review_response(client, make_review(pod))
    assert "patch" not in response and "patchType" not in response
    assert len(response["warnings"]) == 1


def test_pod_it_cannot_read_is_admitted_with_a_warning(
    client: TestClient, capsys: pytest.CaptureFixture
) -> None:
    pod = make_pod(opted_in())
    pod["spec"]["containers"] = "not-a-list"
    response = review_response(client, make_review(pod))
    assert response == {
        "uid": make_review(pod)["request"]["uid"],
        "allowed": True,
        "warnings": [
            "castslice could not process this Pod (internal error); it was admitted unchanged"
        ],
    }
    (line,) = log_lines(capsys)
    assert line["severity"] == "ERROR"
    assert "$.request.object.spec.containers" in line["message"]


def test_unexpected_error_admits_the_pod(
    client: TestClient, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bug cannot be produced from outside on purpose, so one is planted in the policy.
    def broken(*_args: object) -> list:
        raise RuntimeError("planted bug")

    monkeypatch.setattr("castslice.decision.pods.gpu_containers", broken)
    response = review_response(client, make_review(make_pod(opted_in())))
    assert "patch" not in response and len(response["warnings"]) == 1
    (line,) = log_lines(capsys)
    assert (line["severity"], line["uid"]) == ("ERROR", response["uid"])
    assert "RuntimeError: planted bug" in line["message"]


def test_a_decided_answer_that_cannot_be_encoded_admits_the_pod_unchanged(
    client: TestClient, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bug in the encoder cannot be produced from outside either: one is planted.
    encode_review = core.encode_review

    def broken_for_patches(response: dict) -> bytes:
        if "patch" in response:
            raise RuntimeError("planted encoder bug")
        return encode_review(response)

    monkeypatch.setattr("castslice.serve.core.encode_review", broken_for_patches)
    review = make_review(make_pod(opted_in()))
    assert review_response(client, review) == {
        "uid": review["request"]["uid"],
        "allowed": True,
        "warnings": [
            "castslice could not process this Pod (internal error); it was admitted unchanged"
        ],
    }
    decided, failed = log_lines(capsys)
    assert decided["decision"] == "mutated"
    assert {key: failed[key] for key in ("severity", "uid", "decision", "reason", "status")} == {
        "severity": "ERROR",
        "uid": review["request"]["uid"],
        "decision": "error",
        "reason": "after the decision",
        "status": 200,
    }
    assert failed["message"] == (
        "review admitted unchanged after an error: RuntimeError: planted encoder bug"
    )


def test_a_request_that_fails_before_a_decision_is_a_json_500_with_its_line(
    client: TestClient, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: object) -> None:
        raise RuntimeError("planted bug")

    monkeypatch.setattr(core.Webhook, "screen", broken)
    answer = post(client, make_review(make_pod(opted_in())))
    assert (answer.status_code, media_type(answer)) == (500, "application/json")
    assert answer.json() == {"error": "internal error"}
    assert log_lines(capsys) == [
        {
            "severity": "ERROR",
            "message": "request failed: RuntimeError: planted bug",
            "decision": "error",
            "reason": "request failed",
            "status": 500,
        }
    ]


def test_the_request_log_docs_list_every_reason_an_answer_without_a_decision_has() -> None:
    # The reasons are metrics labels: the list users build dashboards from must be whole.
    operate = (Path(__file__).resolve().parent.parent / "docs" / "operate.md").read_text()
    documented: dict[str, set[str]] = {}
    for decision, reasons in re.findall(r"^\| `([a-z-]+)` \| ([^|]+) \|", operate, re.MULTILINE):
        if decision in core.ANSWER_REASONS:
            documented.setdefault(decision, set()).update(re.findall(r"`([^`]+)`", reasons))
    assert documented == {
        decision: set(reasons) for decision, reasons in core.ANSWER_REASONS.items()
    }


def test_one_log_line_per_review_without_pod_contents(
    client: TestClient, capsys: pytest.CaptureFixture
) -> None:
    secret = "hunter2-do-not-log"
    pod = make_pod(
        opted_in(**{"castops.io/slice-ratio": "2"}),
        containers=[gpu_container(env=[{"name": "PASSWORD", "value": secret}])],
    )
    review_response(client, make_review(pod, dry_run=True))
    output = capsys.readouterr().out
    assert secret not in output and "PASSWORD" not in output
    (line,) = [json.loads(text) for text in output.splitlines()]
    latency = line.pop("latencyMs")
    assert isinstance(latency, float) and latency >= 0
    assert line == {
        "severity": "INFO",
        "message": "pod mutated",
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "namespace": "ml",
        "pod": "trainer",
        "decision": "mutated",
        "slices": 2,
        "source": "slice-ratio",
        "backend": "resource",
        "containersChanged": 1,
        "warnings": 0,
        "dryRun": True,
    }


def test_generate_name_is_logged_when_there_is_no_name(
    client: TestClient, capsys: pytest.CaptureFixture
) -> None:
    pod = make_pod(opted_in())
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "trainer-7d9f-"
    review_response(client, make_review(pod))
    (line,) = log_lines(capsys)
    assert line["pod"] == "trainer-7d9f-"


def test_health_document_on_any_path(client: TestClient) -> None:
    for path in ("/", "/healthz", "/anything/else?x=1"):
        answer = client.get(path)
        assert answer.status_code == 200 and media_type(answer) == "application/json"
        assert answer.json() == {"status": "ok", "name": "castslice", "version": __version__}
    assert client.head("/").status_code == 200


VALID = json.dumps(make_review(make_pod(opted_in()))).encode()


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        (b"", 400, "the request body is empty; expected an AdmissionReview"),
        (b"{not json", 400, "the body is not valid JSON: "),
        (b"\xff\xfe", 400, "the body is not valid JSON: "),
        (b"[1, 2]", 400, "not an AdmissionReview: Expected `object`, got `array`"),
        (b'"review"', 400, "not an AdmissionReview: Expected `object`, got `str`"),
        (b"{}", 400, "apiVersion must be 'admission.k8s.io/v1', got None"),
        (
            VALID.replace(b"admission.k8s.io/v1", b"admission.k8s.io/v1beta1"),
            400,
            "apiVersion must be 'admission.k8s.io/v1', got 'admission.k8s.io/v1beta1'",
        ),
        (
            VALID.replace(b'"kind": "AdmissionReview"', b'"kind": "Review"'),
            400,
            "kind must be 'AdmissionReview', got 'Review'",
        ),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
            400,
            "the AdmissionReview has no request",
        ),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}',
            400,
            "request.uid is missing or empty",
        ),
        (
            VALID.replace(b'"uid": "705ab4f5-6393-11e8-b7cc-42010a800002"', b'"uid": ""'),
            400,
            "request.uid is missing or empty",
        ),
        (
            VALID.replace(b'"uid": "705ab4f5-6393-11e8-b7cc-42010a800002"', b'"uid": 7'),
            400,
            "not an AdmissionReview: Expected `str`, got `int` - at `$.request.uid`",
        ),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            400,
            "the JSON body is nested too deeply",
        ),
        (
            VALID[:-1] + b', "x": ' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}",
            400,
            "the JSON body is nested too deeply",
        ),
    ],
    ids=[
        "empty",
        "not-json",
        "not-utf8",
        "array",
        "string",
        "empty-object",
        "v1beta1",
        "wrong-kind",
        "no-request",
        "no-uid",
        "empty-uid",
        "uid-not-string",
        "deep-arrays",
        "deep-objects",
    ],
)
def test_invalid_reviews_get_a_clear_error(
    client: TestClient, body: bytes, status: int, error: str
) -> None:
    answer = client.post("/", content=body, headers=JSON_HEADERS)
    assert answer.status_code == status
    assert media_type(answer) == "application/json"
    assert answer.json()["error"].startswith(error)
    # The process keeps serving.
    assert client.post("/", content=VALID, headers=JSON_HEADERS).status_code == 200


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        (None, 415),
        ("text/plain", 415),
        ("application/x-www-form-urlencoded", 415),
        ("application/json; charset=utf-8", 200),
        ("Application/JSON", 200),
    ],
)
def test_content_type_must_be_json(client: TestClient, content_type: str | None, status: int):
    answer = client.post(
        "/", content=VALID, headers={"Content-Type": content_type} if content_type else {}
    )
    assert answer.status_code == status
    if status == 415:
        assert answer.json()["error"].startswith("Content-Type must be application/json")


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE", "OPTIONS"])
def test_other_methods_are_refused(client: TestClient, method: str) -> None:
    answer = client.request(method, "/", content=VALID, headers=JSON_HEADERS)
    assert answer.status_code == 405
    assert answer.headers["Allow"] == "GET, HEAD, POST"
    assert answer.json() == {
        "error": f"method {method} is not allowed; send the AdmissionReview with POST"
    }


def test_bodies_over_7_mib_are_refused(client: TestClient) -> None:
    limit = 7 * 1024 * 1024
    padded = VALID[:-1] + b', "padding": "' + b"x" * (limit - len(VALID) - 16) + b'"}'
    assert len(padded) <= limit
    assert client.post("/", content=padded, headers=JSON_HEADERS).status_code == 200
    oversized = padded[:-2] + b'xx"}'
    assert len(oversized) == len(padded) + 2 > limit
    answer = client.post("/", content=oversized, headers=JSON_HEADERS)
    assert answer.status_code == 413
    assert answer.json() == {"error": f"the body is larger than {limit} bytes (7 MiB)"}


def test_path_token_guards_reviews(make_client) -> None:
    client = make_client(CASTSLICE_PATH_TOKEN=TOKEN)
    pod = make_pod(opted_in())
    for path in (f"/{TOKEN}", f"/{TOKEN}?timeout=5s", f"/{TOKEN}/", f"/hooks/{TOKEN}?timeout=5s"):
        assert "patch" in review_response(client, make_review(pod), path)
    for path in (
        "/",
        "/?timeout=5s",
        f"/{TOKEN}x",
        f"/{TOKEN[:-1]}",
        f"/{TOKEN}/extra",
        f"/?token={TOKEN}",
        f"/{TOKEN.upper()}",
    ):
        answer = post(client, make_review(pod), path)
        assert (answer.status_code, answer.json()) == (404, {"error": "not found"}), path
    # Health stays reachable for probes on any path.
    assert client.get("/").status_code == 200


def test_configured_resources_and_presets(make_client) -> None:
    client = make_client(
        CASTSLICE_SHARED_RESOURCE="nvidia.com/gpu.shared",
        CASTSLICE_GPU_RESOURCE="example.com/gpu",
        CASTSLICE_PRESETS="llm=6",
        CASTSLICE_DEFAULT_SLICES="5",
        CASTSLICE_MAX_SLICE_RATIO="10",
    )
    pod = make_pod(opted_in(), containers=[container(limits={"example.com/gpu": "1", GPU: "1"})])
    expected_limits = {GPU: "1", "nvidia.com/gpu.shared": "5"}
    response = review_response(client, make_review(pod))
    expected = make_pod(opted_in(), containers=[container(limits=expected_limits)])
    assert apply_response(pod, response) == applied(expected, 5, "default", {"main": "1"})
    annotations = opted_in(**{"castops.io/workload-type": "llm"})
    pod["metadata"]["annotations"] = annotations
    assert review_response(client, make_review(pod))["auditAnnotations"]["slices"] == "6"
    annotations["castops.io/slice-ratio"] = "11"
    response = review_response(client, make_review(pod))
    assert response["auditAnnotations"]["slices"] == "6"
    assert "want a whole number 1-10" in response["warnings"][0]


@pytest.mark.parametrize("path", ["/robots.txt", "/favicon.ico"])
def test_paths_the_framework_reserves(client: TestClient, face: str, path: str) -> None:
    # functions-framework answers these two itself: a 404, never an HTML page.
    answer = client.get(path)
    if face == "asgi":
        assert (answer.status_code, media_type(answer), answer.text) == (
            404, "text/plain", "Not Found"
        )  # fmt: skip
        # A review sent there is still answered.
        answer = client.post(path, content=VALID, headers=JSON_HEADERS)
        assert answer.status_code == 200 and answer.json()["response"]["allowed"] is True
    else:
        # The Flask server keeps these paths for every method; main.py gives its 404 as JSON.
        assert (answer.status_code, answer.json()) == (404, {"error": "not found"})
        answer = client.post(path, content=VALID, headers=JSON_HEADERS)
        assert (answer.status_code, media_type(answer)) == (404, "application/json")
