"""What one review decided: the response, and what the log line and metrics say about it."""

from __future__ import annotations

import msgspec

from castslice.contract.review import AdmissionResponse


class Outcome(msgspec.Struct, frozen=True):
    """A response and what the log line says about it."""

    response: AdmissionResponse
    decision: str
    reason: str | None = None
    slices: int | None = None
    source: str | None = None
    backend: str | None = None
    containers_changed: int = 0
    # What was reviewed, for the log line: "pod", or a workload's kind ("deployment").
    subject: str = "pod"
