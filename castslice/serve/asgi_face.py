"""The core behind functions-framework's ASGI server (Starlette on uvicorn's event loop)."""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive

from castslice.serve.core import JSON, MAX_BODY_BYTES, Reply, Webhook


async def serve_asgi(webhook: Webhook, request: Request) -> Response:
    """A Starlette request in, the core's reply out as a Starlette response."""
    try:
        content_type, content_length = _body_headers(request.scope["headers"])
        reply = webhook.screen(request.method, request.url.path, content_type, content_length)
        if reply is None:
            reply = webhook.answer_body(await _read_body(request.receive, MAX_BODY_BYTES))
    except ClientDisconnect:  # the caller went away before sending its whole body
        reply = webhook.body_ended()
    except Exception as error:  # noqa: BLE001 - callers get JSON, never an HTML page
        reply = webhook.failed(error)
    return _response(reply)


def _response(reply: Reply) -> Response:
    return Response(reply.body, reply.status, reply.headers, media_type=JSON)


def _body_headers(headers: list[tuple[bytes, bytes]]) -> tuple[str, int | None]:
    """Content-Type ("" when absent) and the declared Content-Length (None when absent or
    not a number: the body is then read up to the limit instead of trusted)."""
    content_type, length = b"", b""
    for name, value in headers:
        if name == b"content-type":
            content_type = value
        elif name == b"content-length":
            length = value
    try:
        declared = int(length) if length else None
    except ValueError:
        declared = None
    return content_type.decode("latin-1"), declared


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None once it grows past `limit` (a chunked body declares no length)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        if not message.get("more_body", False):
            return b"".join((*chunks, chunk)) if chunks else chunk
        chunks.append(chunk)
