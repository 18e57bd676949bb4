"""functions-framework's own machinery around the faces.

The answers themselves are the contract's, tested on both faces in test_http.py and
test_server.py. Here: on the default (Flask) server a review skips Flask's per-request
work; with functions-framework's execution-id logging on (LOG_EXECUTION_ID, which needs
a Flask view) every answer is the same and CastSlice's log lines carry the execution id,
on both servers.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import flask
import httpx2
import pytest
from functions_framework import _function_registry, create_app

from tests.conftest import FACES, MAIN, face_client
from tests.factories import JSON_HEADERS, gpu_container, make_pod, make_review, opted_in

REVIEW = json.dumps(make_review(make_pod(opted_in(), containers=[gpu_container()]))).encode()
PLAIN = json.dumps(make_review(make_pod(containers=[gpu_container()]))).encode()

# (method, path, body, headers): every kind of answer the core gives.
REQUESTS = [
    ("POST", "/?timeout=5s", REVIEW, JSON_HEADERS),
    ("POST", "/?timeout=5s", PLAIN, JSON_HEADERS),
    ("POST", "/", b"{", JSON_HEADERS),
    ("POST", "/", REVIEW, {"Content-Type": "text/plain"}),
    ("POST", "/", b"", {**JSON_HEADERS, "Content-Length": str(8 * 1024 * 1024)}),
    ("GET", "/", None, {}),
    ("HEAD", "/", None, {}),
    ("PUT", "/", REVIEW, JSON_HEADERS),
    ("GET", "/robots.txt", None, {}),
]
KEPT_HEADERS = ("content-type", "content-length", "allow")


@pytest.fixture
def restored_logging() -> Iterator[None]:
    # functions-framework's execution-id logging reconfigures the process's logging.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    disabled = {
        name: logger.disabled
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, was_disabled in disabled.items():
        logging.getLogger(name).disabled = was_disabled


def flask_app(monkeypatch: pytest.MonkeyPatch, **environment: str) -> flask.Flask:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    _function_registry.ASGI_FUNCTIONS.discard(FACES["flask"])
    return create_app(target=FACES["flask"], source=MAIN)


def answers(app: flask.Flask) -> list[tuple[int, dict[str, str], bytes]]:
    client = httpx2.Client(
        transport=httpx2.WSGITransport(app=app, raise_app_exceptions=False),
        base_url="http://testserver",
    )
    replies = []
    for method, path, body, headers in REQUESTS:
        reply = client.request(method, path, content=body, headers=headers)
        kept = {name: value for name, value in reply.headers.items() if name in KEPT_HEADERS}
        replies.append((reply.status_code, kept, reply.content))
    return replies


def test_a_review_is_answered_without_flasks_per_request_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = flask_app(monkeypatch)
    dispatched: list[str] = []
    app.before_request(lambda: dispatched.append(flask.request.path))
    replies = answers(app)
    status, _, body = replies[0]
    assert status == 200 and json.loads(body)["response"]["patchType"] == "JSONPatch"
    # Only the path functions-framework answers itself reaches Flask.
    assert dispatched == ["/robots.txt"]


def test_with_execution_ids_logged_every_answer_is_the_same(
    monkeypatch: pytest.MonkeyPatch, restored_logging: None, capsys: pytest.CaptureFixture
) -> None:
    direct = answers(flask_app(monkeypatch))
    assert "execution_id" not in capsys.readouterr().out
    app = flask_app(monkeypatch, LOG_EXECUTION_ID="true")
    dispatched: list[str] = []
    app.before_request(lambda: dispatched.append(flask.request.path))
    assert answers(app) == direct
    # Through Flask's dispatch this time: functions-framework's execution context is set.
    assert len(dispatched) == len(REQUESTS)
    assert_lines_carry_execution_ids(capsys.readouterr().out)


def test_the_asgi_server_logs_execution_ids_too(
    monkeypatch: pytest.MonkeyPatch, restored_logging: None, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("LOG_EXECUTION_ID", "true")
    client = face_client("asgi")
    reply = client.post("/?timeout=5s", content=REVIEW, headers=JSON_HEADERS)
    assert reply.status_code == 200
    assert json.loads(reply.content)["response"]["patchType"] == "JSONPatch"
    assert_lines_carry_execution_ids(capsys.readouterr().out)


def assert_lines_carry_execution_ids(output: str) -> None:
    lines = [json.loads(line) for line in output.splitlines()]
    reviews = [line for line in lines if line.get("decision") == "mutated"]
    assert reviews and all(line["uid"] for line in reviews)
    labels = [line.get("logging.googleapis.com/labels", {}) for line in lines]
    assert all(label.get("execution_id") for label in labels), lines


def test_a_content_length_that_is_no_number_of_bytes_reads_the_body_to_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "²" is a digit to str.isdigit() and no number to int(); a WSGI server other than
    # gunicorn may pass it on.
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": "\u00b2",
        "wsgi.input": io.BytesIO(REVIEW),
        "wsgi.errors": io.StringIO(),
    }
    statuses: list[str] = []
    body = b"".join(
        flask_app(monkeypatch)(environ, lambda status, headers: statuses.append(status))
    )
    assert statuses == ["200 OK"]
    assert json.loads(body)["response"]["patchType"] == "JSONPatch"
