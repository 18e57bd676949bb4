"""Routing, limits and errors around one review, with no web framework in sight.

A face hands over a request in two steps, so that a body is read only when it will be
used: `screen` sees the method, path and headers and either answers or says to read
the body (at most MAX_BODY_BYTES + 1 bytes, None when more came); `answer` takes it.
Whatever a face catches goes to `failed`, `body_ended` or `too_large`: every reply is
JSON, never a framework's HTML page.

Every answer is one record for `log_review`, which writes its log line and, with metrics
on, counts it: a decided review as a ReviewRecord, any other answer (failed open, refused,
an internal error) as an AnswerRecord whose `decision` and `reason` come from the short
lists below. Once a review is decided, nothing after it (the record, the count, the log
line, the encoder) can turn its answer into an HTTP 500: the decision still goes out, or,
when it cannot be encoded, the Pod is admitted unchanged with a warning.
"""

from __future__ import annotations

import contextlib
import hmac
import time
from collections.abc import Callable

import msgspec

from castslice import __version__
from castslice.contract.review import (
    AdmissionRequest,
    InvalidReview,
    UnreadableObject,
    allowed,
    decode_review,
    encode_json,
    encode_review,
)
from castslice.decision.admission import Admission
from castslice.decision.outcome import Outcome
from castslice.serve.log import write_log, write_record
from castslice.settings.config import Config

MAX_BODY_BYTES = 7 * 1024 * 1024
JSON = "application/json"
_ALLOWED_METHODS = "GET, HEAD, POST"
_INTERNAL_ERROR_WARNING = (
    "castslice could not process this Pod (internal error); it was admitted unchanged"
)

# An AnswerRecord's decision, and its reason: metrics labels, so each list stays short
# (docs/operate.md lists them).
FAILED_OPEN = "failed-open"  # answered 200, the Pod admitted unchanged with a warning
UNREADABLE_OBJECT = "unreadable object"
DECISION_FAILED = "decision failed"
REFUSED = "refused"  # answered 4xx: the API server applies the failurePolicy
METHOD_NOT_ALLOWED = "method not allowed"
WRONG_PATH = "wrong path"
NOT_JSON = "not JSON"
BODY_TOO_LARGE = "body too large"
BODY_CUT_SHORT = "body cut short"
NOT_A_REVIEW = "not an AdmissionReview"
ERROR = "error"  # CastSlice failed around a review
AFTER_THE_DECISION = "after the decision"  # answered 200, the decision still in the answer
REQUEST_FAILED = "request failed"  # answered 500: no decision was made
ANSWER_REASONS = {
    FAILED_OPEN: (UNREADABLE_OBJECT, DECISION_FAILED),
    REFUSED: (
        NOT_A_REVIEW,
        BODY_CUT_SHORT,
        WRONG_PATH,
        METHOD_NOT_ALLOWED,
        BODY_TOO_LARGE,
        NOT_JSON,
    ),
    ERROR: (AFTER_THE_DECISION, REQUEST_FAILED),
}


class Reply(msgspec.Struct, frozen=True):
    """A status, JSON body and extra headers, before a face wraps them; built in C, per review."""

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


class AnswerRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The log line of an answer that is not a decided review; None fields are not written."""

    severity: str
    message: str
    uid: str | None = None
    decision: str
    reason: str
    # The HTTP status of the answer.
    status: int


AnyRecord = ReviewRecord | AnswerRecord


class Webhook:
    """Answers AdmissionReviews for one configuration; safe to share between threads."""

    def __init__(
        self,
        config: Config,
        log: Callable[..., None] = write_log,
        log_review: Callable[[AnyRecord], None] = write_record,
    ) -> None:
        self.config = config
        self.admission = Admission(config)
        self._log = log
        self._log_review = log_review
        self._health = encode_json({"status": "ok", "name": "castslice", "version": __version__})

    def screen(
        self, method: str, path: str, content_type: str, content_length: int | None
    ) -> Reply | None:
        """The reply a request gets before its body is read, or None: read it, then `answer`.

        `content_type` is the header as sent ("" when absent); `content_length` is the
        declared length, None when absent or not a number (a chunked body).
        """
        if method in ("GET", "HEAD"):
            return Reply(200, self._health)
        if method != "POST":
            return self._reject(
                405,
                METHOD_NOT_ALLOWED,
                f"method {method} is not allowed; send the AdmissionReview with POST",
                {"Allow": _ALLOWED_METHODS},
            )
        token = self.config.path_token
        if token is not None and not _token_matches(path, token):
            # No detail: the token is what keeps the public URL private.
            return self._reject(404, WRONG_PATH, "not found")
        # The API server sends exactly this; only other spellings need parsing.
        if content_type != JSON and _mimetype(content_type) != JSON:
            return self._reject(
                415,
                NOT_JSON,
                f"Content-Type must be {JSON}, got {_mimetype(content_type) or 'none'!r}",
            )
        if content_length is not None and content_length > MAX_BODY_BYTES:
            return self.too_large()
        return None

    def answer_body(self, body: bytes | None) -> Reply:
        """The reply to a screened request's body, as read by a face (None: over the limit)."""
        return self.too_large() if body is None else self.answer(body)

    def failed(self, error: Exception) -> Reply:
        """The reply when serving a request raised: logged, answered with a JSON 500."""
        message = f"request failed: {type(error).__name__}: {error}"[:300]
        self._record(
            AnswerRecord(
                severity="ERROR", message=message, decision=ERROR, reason=REQUEST_FAILED, status=500
            )
        )
        return Reply(500, encode_json({"error": "internal error"}))

    def body_ended(self) -> Reply:
        """The reply when the caller stopped sending before its Content-Length."""
        return self._reject(400, BODY_CUT_SHORT, "the body ended before its Content-Length")

    def answer(self, body: bytes) -> Reply:
        """Answer one AdmissionReview body; every valid review is allowed."""
        started = time.perf_counter()
        try:
            request = decode_review(body)
        except UnreadableObject as error:
            return self._failed_open(
                error.uid, UNREADABLE_OBJECT, f"request.object is not a readable Pod: {error}"
            )
        except InvalidReview as error:
            return self._reject(400, NOT_A_REVIEW, str(error))

        uid = request["uid"]
        try:
            outcome = self.admission.review(request)
        except Exception as error:  # noqa: BLE001 - a bug here must still admit the Pod
            return self._failed_open(uid, DECISION_FAILED, f"{type(error).__name__}: {error}")

        # Free until something raises: the decided answer needs no other work.
        try:
            self._log_review(_review_record(request, outcome, time.perf_counter() - started))
            return Reply(200, encode_review(outcome.response))
        except Exception as error:  # noqa: BLE001 - the decision is made: answer it in band
            return self._answer_decided(uid, outcome, error)

    def _answer_decided(self, uid: str, outcome: Outcome, error: Exception) -> Reply:
        """The decided review's answer after something around it raised."""
        try:
            body, answered = encode_review(outcome.response), f"answered {outcome.decision}"
        except Exception:  # noqa: BLE001 - the Pod is admitted, unchanged, all the same
            body = encode_review(allowed(uid, [_INTERNAL_ERROR_WARNING]))
            answered = "admitted unchanged"
        message = f"review {answered} after an error: {type(error).__name__}: {error}"[:300]
        self._record(
            AnswerRecord(
                severity="ERROR",
                message=message,
                uid=uid,
                decision=ERROR,
                reason=AFTER_THE_DECISION,
                status=200,
            )
        )
        return Reply(200, body)

    def _failed_open(self, uid: str, reason: str, detail: str) -> Reply:
        self._record(
            AnswerRecord(
                severity="ERROR",
                message=f"review failed, Pod admitted unchanged: {detail[:300]}",
                uid=uid,
                decision=FAILED_OPEN,
                reason=reason,
                status=200,
            )
        )
        return Reply(200, encode_review(allowed(uid, [_INTERNAL_ERROR_WARNING])))

    def _reject(
        self, status: int, reason: str, message: str, headers: dict[str, str] | None = None
    ) -> Reply:
        self._record(
            AnswerRecord(
                severity="WARNING",
                message=f"rejected request: {message}",
                decision=REFUSED,
                reason=reason,
                status=status,
            )
        )
        return Reply(status, encode_json({"error": message}), headers)

    def too_large(self) -> Reply:
        return self._reject(
            413, BODY_TOO_LARGE, f"the body is larger than {MAX_BODY_BYTES} bytes (7 MiB)"
        )

    def _record(self, record: AnswerRecord) -> None:
        """Log and count an answer; when that fails, say so in a line of its own."""
        try:
            self._log_review(record)
        except Exception as error:  # noqa: BLE001 - the answer goes out all the same
            with contextlib.suppress(Exception):  # nothing is left to tell it to
                self._log(
                    "ERROR",
                    f"answer not recorded ({record.decision}, {record.reason}): "
                    f"{type(error).__name__}: {error}"[:300],
                    uid=record.uid,
                )


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


def _token_matches(path: str, token: str) -> bool:
    segment = path.rstrip("/").rpartition("/")[2]
    return hmac.compare_digest(segment.encode(), token.encode())


def _mimetype(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()
