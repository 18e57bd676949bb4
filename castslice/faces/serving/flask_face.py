"""The core behind functions-framework's default server (Flask on gunicorn's threads)."""

from __future__ import annotations

from typing import IO

import flask
from werkzeug.exceptions import ClientDisconnected

from castslice.contract.review import encode_json
from castslice.faces.serving.core import JSON, MAX_BODY_BYTES, Webhook


def serve_flask(webhook: Webhook, request: flask.Request) -> flask.Response:
    """A Flask request in, the core's reply out as a Flask response."""
    body_left = False
    declared = request.content_length
    try:
        # The WSGI environ holds Content-Type as sent; Flask's header mapping would look
        # it up through a case-folding view of the same value.
        content_type = request.environ.get("CONTENT_TYPE", "")
        reply = webhook.screen(request.method, request.path, content_type, declared)
        if reply is None:
            body = _read_body(request, declared, MAX_BODY_BYTES)
            body_left = body is None
            if body is not None and len(body) < (declared or 0):
                # gunicorn ends the stream where the connection ended, with no error.
                raise ClientDisconnected
            reply = webhook.answer_body(body)
        else:
            body_left = request.method == "POST"
    except ClientDisconnected:  # the caller went away before sending its whole body
        reply = webhook.body_ended()
    except Exception as error:  # noqa: BLE001 - callers get JSON, never an HTML page
        reply = webhook.failed(error)
    if not body_left:
        return flask.Response(reply.body, reply.status, reply.headers, content_type=JSON)
    # functions-framework reads the rest of every body after a view returns, except for a
    # streamed response: one refused unread (up to 7 MiB, or chunked without end) is
    # streamed, and the connection closed so that no request is read from what is left.
    headers = {**(reply.headers or {}), "Connection": "close"}
    headers["Content-Length"] = str(len(reply.body))
    return flask.Response(iter((reply.body,)), reply.status, headers, content_type=JSON)


def _read_body(request: flask.Request, declared: int | None, limit: int) -> bytes | None:
    """The whole body, or None once it grows past `limit` (a chunked body declares no length).

    A declared length was screened against the limit and the stream ends there, so it is
    read at once, as functions-framework's own read of the rest after the view would, which
    then finds it kept. A loop of 64 KiB reads cost a 250 KiB review a third of its time.
    """
    if declared is not None:
        return request.get_data()
    return _read_bounded(request.stream, limit)


def _read_bounded(stream: IO[bytes], limit: int) -> bytes | None:
    """At most `limit` bytes of a stream with no declared end, or None when more came.

    gunicorn's stream fills a read up to its size; werkzeug's may return less (it reads
    the socket once), so reading goes on until the stream ends.
    """
    chunks = []
    size = 0
    while chunk := stream.read(limit + 1 - size):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None
    return b"".join(chunks)


def not_found_page(_: Exception) -> flask.Response:
    """Flask's answer to the paths functions-framework keeps for itself, in the core's form."""
    return flask.Response(encode_json({"error": "not found"}), 404, mimetype=JSON)
