"""The core behind functions-framework's default server (Flask on gunicorn's threads).

CastSlice answers there as WSGI middleware around functions-framework's Flask app, not as
a Flask view: a view is reached only after functions-framework's execution-id middleware,
Flask's request and app contexts, URL routing and response processing, which cost more
than CastSlice's whole decision on a typical Pod (docs/performance.md). None of them
changes an answer: the core builds every reply itself and writes its own log lines. The
paths functions-framework keeps for itself (`/robots.txt`, `/favicon.ico`) still go to
Flask, and so does everything when functions-framework logs execution ids
(`LOG_EXECUTION_ID`), whose context only a Flask view gets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from typing import IO, Any

import flask
import werkzeug

from castslice.contract.review import encode_json
from castslice.serve.core import JSON, MAX_BODY_BYTES, Reply, Webhook

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

# functions-framework answers these itself, before any function (its _FUNCTION_ROUTES).
_FRAMEWORK_PATHS = frozenset({"/robots.txt", "/favicon.ico"})
_STATUS_LINES = {status.value: f"{status.value} {status.phrase}" for status in HTTPStatus}
_EXECUTION_ID_VALUES = ("y", "yes", "t", "true", "on", "1")  # functions-framework's own test


def answer_first(webhook: Webhook, app: WsgiApp, environ: Mapping[str, str]) -> WsgiApp:
    """`app` (functions-framework's Flask app) with CastSlice answering its requests first."""
    if environ.get("LOG_EXECUTION_ID") in _EXECUTION_ID_VALUES:
        return app

    def serve(wsgi_environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if wsgi_environ.get("PATH_INFO") in _FRAMEWORK_PATHS:
            return app(wsgi_environ, start_response)
        return serve_wsgi(webhook, wsgi_environ, start_response)

    return serve


def serve_wsgi(
    webhook: Webhook, environ: dict[str, Any], start_response: StartResponse
) -> Iterable[bytes]:
    """One WSGI request in, the core's reply out."""
    method = environ.get("REQUEST_METHOD", "")
    declared = _declared_length(environ.get("CONTENT_LENGTH"))
    body_left = False
    try:
        reply = webhook.screen(method, _path(environ), environ.get("CONTENT_TYPE", ""), declared)
        if reply is None:
            body = _read_body(environ["wsgi.input"], declared, MAX_BODY_BYTES)
            body_left = body is None
            if body is not None and len(body) < (declared or 0):
                # gunicorn ends the stream where the connection ended, with no error.
                reply = webhook.body_ended()
            else:
                reply = webhook.answer_body(body)
        else:
            body_left = method == "POST"
    except Exception as error:  # noqa: BLE001 - callers get JSON, never an HTML page
        reply = webhook.failed(error)
    start_response(_STATUS_LINES[reply.status], _headers(reply, body_left))
    if method == "HEAD":
        return ()
    # Under a Flask view, werkzeug reads the rest of the body after the answer unless the
    # answer is streamed: one refused unread (up to 7 MiB, or chunked without end) is.
    return iter((reply.body,)) if body_left else (reply.body,)


def _headers(reply: Reply, body_left: bool) -> list[tuple[str, str]]:
    headers = [("Content-Type", JSON), ("Content-Length", str(len(reply.body)))]
    if reply.headers:
        headers += reply.headers.items()
    if body_left:
        # A body refused unread (up to 7 MiB, or chunked without end) is not read after the
        # answer: the connection is closed so that no request is read from what is left.
        headers.append(("Connection", "close"))
    return headers


def _declared_length(value: str | None) -> int | None:
    """The Content-Length as werkzeug reads it: a number of bytes, None when absent or not one."""
    # ASCII digits only: "²" is a digit to str.isdigit() and no number to int().
    if not value or not (value.isascii() and value.isdigit()):
        return None
    return int(value)


def _path(environ: Mapping[str, Any]) -> str:
    # PEP 3333 carries the path as bytes in latin-1; werkzeug's request.path decodes it so.
    return environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8", "replace")


def _read_body(stream: IO[bytes], declared: int | None, limit: int) -> bytes | None:
    """The whole body, or None once it grows past `limit` (a chunked body declares no length).

    A declared length was screened against the limit and the stream ends there, so it is
    read at once. A loop of 64 KiB reads cost a 250 KiB review a third of its time.
    """
    if declared is not None:
        return stream.read(declared)
    return _read_bounded(stream, limit)


def _read_bounded(stream: IO[bytes], limit: int) -> bytes | None:
    """At most `limit` bytes of a stream with no declared end, or None when more came.

    gunicorn's stream fills a read up to its size; another server's may return less,
    so reading goes on until the stream ends.
    """
    chunks = []
    size = 0
    while chunk := stream.read(limit + 1 - size):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None
    return b"".join(chunks)


def serve_flask(webhook: Webhook, request: flask.Request) -> werkzeug.Response:
    """A Flask view's answer, where functions-framework reaches one (see answer_first)."""
    return flask.Response.from_app(
        lambda environ, start_response: serve_wsgi(webhook, environ, start_response),
        request.environ,
    )


def not_found_page(_: Exception) -> flask.Response:
    """Flask's answer to the paths functions-framework keeps for itself, in the core's form."""
    return flask.Response(encode_json({"error": "not found"}), 404, mimetype=JSON)
