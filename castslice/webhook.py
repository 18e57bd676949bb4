"""The HTTP face of CastSlice: routing, limits and errors around one review."""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive

from . import __version__
from .admission import Admission
from .config import Config
from .log import write_log, write_record
from .outcome import Outcome
from .review import (
    AdmissionRequest,
    InvalidReview,
    UnreadableObject,
    allowed,
    decode_review,
    encode_json,
    encode_review,
)

MAX_BODY_BYTES = 7 * 1024 * 1024
JSON = "application/json"
_ALLOWED_METHODS = "GET, HEAD, POST"
_INTERNAL_ERROR_WARNING = (
    "castslice could not process this Pod (internal error); it was admitted unchanged"
)


class Reply(msgspec.Struct, frozen=True):
    """A status and JSON body, before Starlette wraps them; a Struct is built in C, per review."""

    status: int
    body: bytes
    headers: dict[str, str] | None = None


class ReviewRecord(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """The log line of one answered review; fields left as None are not written."""

    severity: str
    message: str
    uid: str
    namespace: str | None = None
    pod: str | None = None
    decision: str
    reason: str | None = None
    slices: int | None = None
    source: str | None = None
    backend: str | None = None
    containers_changed: int
    warnings: int
    dry_run: bool
    latency_ms: float


class Webhook:
    """Answers AdmissionReviews for one configuration; safe to share between threads."""

    def __init__(
        self,
        config: Config,
        log: Callable[..., None] = write_log,
        log_review: Callable[[ReviewRecord], None] = write_record,
    ) -> None:
        self.config = config
        self.admission = Admission(config)
        self._log = log
        self._log_review = log_review
        self._health = encode_json({"status": "ok", "name": "castslice", "version": __version__})

    async def serve(self, request: Request) -> Response:
        """The functions-framework entry: a Starlette request in, a JSON response out."""
        try:
            reply = await self.route(request)
        except ClientDisconnect:  # the caller went away before sending its whole body
            reply = self._reject(400, "the body ended before its Content-Length")
        except Exception as error:  # noqa: BLE001 - callers get JSON, never an HTML page
            self._log("ERROR", f"request failed: {type(error).__name__}: {error}"[:300])
            reply = Reply(500, encode_json({"error": "internal error"}))
        return Response(reply.body, reply.status, reply.headers, media_type=JSON)

    async def route(self, request: Request) -> Reply:
        method = request.method
        if method in ("GET", "HEAD"):
            return Reply(200, self._health)
        if method != "POST":
            return self._reject(
                405,
                f"method {method} is not allowed; send the AdmissionReview with POST",
                {"Allow": _ALLOWED_METHODS},
            )
        if self.config.path_token is not None and not self._token_matches(request.url.path):
            # No detail: the token is what keeps the public URL private.
            return self._reject(404, "not found")
        content_type, declared_length = _body_headers(request.scope["headers"])
        # The API server sends exactly this; only other spellings need parsing.
        if content_type != JSON and _mimetype(content_type) != JSON:
            return self._reject(
                415, f"Content-Type must be {JSON}, got {_mimetype(content_type) or 'none'!r}"
            )
        if declared_length > MAX_BODY_BYTES:
            return self._too_large()
        body = await _read_body(request.receive, MAX_BODY_BYTES)
        if body is None:
            return self._too_large()
        return self.answer(body)

    def answer(self, body: bytes) -> Reply:
        """Answer one AdmissionReview body; every valid review is allowed."""
        started = time.perf_counter()
        try:
            request = decode_review(body)
        except UnreadableObject as error:
            return self._failed_open(error.uid, f"request.object is not a readable Pod: {error}")
        except InvalidReview as error:
            return self._reject(400, str(error))

        uid = request["uid"]
        try:
            outcome = self.admission.review(request)
        except Exception as error:  # noqa: BLE001 - a bug here must still admit the Pod
            return self._failed_open(uid, f"{type(error).__name__}: {error}")

        self._log_review(_review_record(request, outcome, time.perf_counter() - started))
        return Reply(200, encode_review(outcome.response))

    def _token_matches(self, path: str) -> bool:
        segment = path.rstrip("/").rpartition("/")[2]
        return hmac.compare_digest(segment.encode(), self.config.path_token.encode())

    def _failed_open(self, uid: str, detail: str) -> Reply:
        self._log("ERROR", f"review failed, Pod admitted unchanged: {detail[:300]}", uid=uid)
        return Reply(200, encode_review(allowed(uid, [_INTERNAL_ERROR_WARNING])))

    def _reject(self, status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
        self._log("WARNING", f"rejected request: {message}", status=status)
        return Reply(status, encode_json({"error": message}), headers)

    def _too_large(self) -> Reply:
        return self._reject(413, f"the body is larger than {MAX_BODY_BYTES} bytes (7 MiB)")


def _review_record(request: AdmissionRequest, outcome: Outcome, seconds: float) -> ReviewRecord:
    metadata = (request.get("object") or {}).get("metadata") or {}
    return ReviewRecord(
        severity="INFO",
        message=f"{outcome.subject} {outcome.decision}",
        uid=request["uid"],
        namespace=request.get("namespace") or metadata.get("namespace"),
        pod=metadata.get("name") or metadata.get("generateName") or request.get("name"),
        decision=outcome.decision,
        reason=outcome.reason,
        slices=outcome.slices,
        source=outcome.source,
        backend=outcome.backend,
        containers_changed=outcome.containers_changed,
        warnings=len(outcome.response.get("warnings", ())),
        dry_run=bool(request.get("dryRun")),
        latency_ms=round(seconds * 1000, 3),
    )


def _body_headers(headers: list[tuple[bytes, bytes]]) -> tuple[str, int]:
    """Content-Type and the declared Content-Length (0 when absent or not a number).

    Read straight from the ASGI scope, once: Starlette's Headers would be built per request.
    """
    content_type, length = b"", b""
    for name, value in headers:
        if name == b"content-type":
            content_type = value
        elif name == b"content-length":
            length = value
    try:
        declared = int(length or 0)
    except ValueError:
        declared = 0
    return content_type.decode("latin-1"), declared


def _mimetype(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None once it grows past `limit` (a chunked body declares no length)."""
    chunks = []
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
            # Most bodies come in one message: nothing to join.
            return b"".join((*chunks, chunk)) if chunks else chunk
        chunks.append(chunk)
