"""The core behind functions-framework's default server (Flask on gunicorn's threads)."""

from __future__ import annotations

from typing import IO

import flask
from werkzeug.exceptions import ClientDisconnected

from castslice.contract.review import encode_json
from castslice.faces.serving.core import JSON, MAX_BODY_BYTES, Webhook

_CHUNK = 64 * 1024


def serve_flask(webhook: Webhook, request: flask.Request) -> flask.Response:
    """A Flask request in, the core's reply out as a Flask response."""
    body_left = False
    try:
        reply = webhook.screen(
            request.method, request.path, request.headers.get("Content-Type", ""),
            request.content_length,
        )  # fmt: skip
        if reply is None:
            body = _read_body(request.stream, MAX_BODY_BYTES)
            body_left = body is None
            if body is not None and len(body) < (request.content_length or 0):
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
        return flask.Response(reply.body, reply.status, reply.headers, mimetype=JSON)
    # functions-framework reads the rest of every body after a view returns, except for a
    # streamed response: one refused unread (up to 7 MiB, or chunked without end) is
    # streamed, and the connection closed so that no request is read from what is left.
    headers = {**(reply.headers or {}), "Connection": "close"}
    headers["Content-Length"] = str(len(reply.body))
    return flask.Response(iter((reply.body,)), reply.status, headers, mimetype=JSON)


def _read_body(stream: IO[bytes], limit: int) -> bytes | None:
    """The whole body, or None once it grows past `limit` (a chunked body declares no length).

    A read may return less than asked for (werkzeug's stream reads the socket once), so
    it loops until the stream ends.
    """
    chunks = []
    size = 0
    while chunk := stream.read(min(_CHUNK, limit + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None
    return b"".join(chunks)


def not_found_page(_: Exception) -> flask.Response:
    """Flask's answer to the paths functions-framework keeps for itself, in the core's form."""
    return flask.Response(encode_json({"error": "not found"}), 404, mimetype=JSON)
