"""Structured log lines on stdout, in the JSON form Cloud Logging parses.

Callers pass chosen fields only: never a Pod, its env values or a whole body.

A line is encoded and written by the thread that logs it, before its review is
answered. With request-based billing (Cloud Run's `cpu_idle = true`) the CPU is
throttled as soon as no request is in flight, so work left for after the
answer, such as a background writer, may wait for the next request or never
run: the log line is part of the request.
"""

from __future__ import annotations

import sys
import threading
from typing import BinaryIO, Literal

import msgspec

Severity = Literal["DEBUG", "INFO", "WARNING", "ERROR"]

# A value msgspec cannot encode is written as its str(), never lost with its line.
_encoder = msgspec.json.Encoder(enc_hook=str)
_ENCODING_ERRORS = (msgspec.MsgspecError, TypeError, ValueError, RecursionError)
# Reviews are answered on one event loop, yet a line may come from another thread too
# (the metrics server's, a start-up hook's), all to one stdout. A single write(2) of a
# whole line would be atomic on a pipe only up to PIPE_BUF (4 KiB on Linux), and may be
# cut short by a signal, leaving the rest for a second write another thread's line can
# slip in front of. Under this lock each line goes out whole, whatever stdout is: a pipe,
# a file, or a BufferedWriter when PYTHONUNBUFFERED is not set. Uncontended it costs tens
# of nanoseconds.
_write_lock = threading.Lock()


def write_log(severity: Severity, message: str, **fields: object) -> None:
    record: dict[str, object] = {"severity": severity, "message": message}
    # A plain loop: update() from a generator costs about three times as much here.
    for key, value in fields.items():
        if value is not None:
            record[key] = value
    write_record(record)


def write_record(record: object) -> None:
    """Write one line now: a record that is a msgspec Struct or a dict of chosen fields."""
    try:
        # encode_lines of a one-item list: the newline without copying the line again.
        line = _encoder.encode_lines([record])
    except _ENCODING_ERRORS as error:
        unloggable = {"severity": "ERROR", "message": f"unloggable log record: {error}"[:300]}
        line = _encoder.encode_lines([unloggable])
    _write(line)


def _write(line: bytes) -> None:
    # Looked up per line: stdout may be replaced (tests capture it, tools redirect it).
    stdout = sys.stdout
    try:
        with _write_lock:
            try:
                _write_all(stdout.buffer, line)
            except (AttributeError, TypeError):
                # A text-only stdout: functions-framework's execution-id logging
                # (LOG_EXECUTION_ID) puts one around each function call, which adds the
                # execution id to the JSON line it is given.
                stdout.write(line.decode())
                stdout.flush()
    except (OSError, ValueError):
        # stdout is gone (a closed pipe, shutdown): losing the line must not lose the answer.
        pass


def _write_all(stream: BinaryIO, line: bytes) -> None:
    written = stream.write(line)
    # Raw (unbuffered) stdout writes once and says how much went out; None means a
    # non-blocking stdout is full, and the rest is dropped rather than spun on.
    while written is not None and written < len(line):
        line = line[written:]
        written = stream.write(line)
    stream.flush()
