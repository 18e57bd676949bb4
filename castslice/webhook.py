"""The HTTP face of CastSlice: routing, limits and errors around one review."""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable

import flask
import msgspec
from werkzeug.exceptions import HTTPException

from . import __version__
from .admission import Outcome, PodAdmission
from .config import Config
from .log import write_log, write_record
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
    """A status and JSON body, before Flask wraps them; a Struct is built in C, per review."""

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
        self.admission = PodAdmission(config)
        self._log = log
        self._log_review = log_review
        self._health = encode_json({"status": "ok", "name": "castslice", "version": __version__})

    def serve(self, request: flask.Request) -> flask.Response:
        """The functions-framework entry: a Flask request in, a JSON response out."""
        try:
            reply = self.route(request)
        except HTTPException as error:  # a client that sent less than its Content-Length
            return self.http_error(error)
        except Exception as error:  # noqa: BLE001 - callers get JSON, never an HTML page
            self._log("ERROR", f"request failed: {type(error).__name__}: {error}"[:300])
            reply = Reply(500, encode_json({"error": "internal error"}))
        return _response(reply)

    def http_error(self, error: HTTPException) -> flask.Response:
        """A JSON answer for an error raised by the framework (a reserved path, a bad read)."""
        return _response(
            self._reject(error.code or 400, (error.description or error.name).rstrip("."))
        )

    def route(self, request: flask.Request) -> Reply:
        if request.method in ("GET", "HEAD"):
            return Reply(200, self._health)
        if request.method != "POST":
            return self._reject(
                405,
                f"method {request.method} is not allowed; send the AdmissionReview with POST",
                {"Allow": _ALLOWED_METHODS},
            )
        if self.config.path_token is not None and not self._token_matches(request.path):
            # No detail: the token is what keeps the public URL private.
            return self._reject(404, "not found")
        # The API server sends exactly this; only other spellings need werkzeug's parser.
        if request.environ.get("CONTENT_TYPE") != JSON and request.mimetype != JSON:
            return self._reject(
                415, f"Content-Type must be {JSON}, got {request.mimetype or 'none'!r}"
            )
        if _declared_length(request.environ) > MAX_BODY_BYTES:
            return self._too_large()
        body = request.stream.read(MAX_BODY_BYTES + 1)
        if len(body) > MAX_BODY_BYTES:
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


def _declared_length(environ: dict) -> int:
    # werkzeug's content_length parses the header anew on every access; this is read once.
    try:
        return int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def _response(reply: Reply) -> flask.Response:
    return flask.Response(reply.body, reply.status, reply.headers, content_type=JSON)
