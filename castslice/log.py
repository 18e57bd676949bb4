"""Structured log lines on stdout, in the JSON form Cloud Logging parses.

Callers pass chosen fields only: never a Pod, its env values or a whole body.

A review only queues its record; a background thread encodes what is queued
and writes it every FLUSH_INTERVAL seconds in one system call. Writing from
the request thread would give up the GIL for the system call on every
review, and under load each of those hand-offs costs the worker far more than
the write itself; encoding a batch at once costs less than a line at a time.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from collections import deque
from typing import Literal

import msgspec

Severity = Literal["DEBUG", "INFO", "WARNING", "ERROR"]

# The longest a line waits before it reaches stdout.
FLUSH_INTERVAL = 0.05

# A value msgspec cannot encode is written as its str(), never lost with its line.
_encoder = msgspec.json.Encoder(enc_hook=str)
_pending: deque[object] = deque()
_writer_started = False
_writer_lock = threading.Lock()
# Held while writing, so two flushes (the thread's and atexit's) keep lines in order.
_flush_lock = threading.Lock()


def write_log(severity: Severity, message: str, **fields: object) -> None:
    record = {"severity": severity, "message": message}
    # A plain loop: update() from a generator costs about three times as much here.
    for key, value in fields.items():
        if value is not None:
            record[key] = value
    write_record(record)


def write_record(record: object) -> None:
    """Queue a line that is already a record: a msgspec Struct or a dict of chosen fields."""
    _pending.append(record)  # deque.append is atomic
    if not _writer_started:
        _start_writer()


def flush() -> None:
    """Write every queued line now, whole lines in order, in one write."""
    with _flush_lock:
        records = []
        while _pending:
            records.append(_pending.popleft())
        if records:
            stream = sys.stdout
            stream.buffer.write(_encode_lines(records))
            stream.flush()


def _encode_lines(records: list[object]) -> bytes:
    try:
        return _encoder.encode_lines(records)
    except (msgspec.MsgspecError, TypeError, ValueError, RecursionError):
        # One bad record must not take the lines queued with it down too.
        return b"".join(map(_encode_line, records))


def _encode_line(record: object) -> bytes:
    try:
        return _encoder.encode(record) + b"\n"
    except (msgspec.MsgspecError, TypeError, ValueError, RecursionError) as error:
        unloggable = {"severity": "ERROR", "message": f"unloggable log record: {error}"[:300]}
        return _encoder.encode(unloggable) + b"\n"


def _start_writer() -> None:
    global _writer_started
    with _writer_lock:
        if not _writer_started:
            _writer_started = True
            threading.Thread(target=_write_forever, name="castslice-log", daemon=True).start()


def _after_fork() -> None:
    # gunicorn forks its worker after main.py is imported; a thread started before
    # the fork does not exist in the child, and lines queued there are the parent's.
    global _writer_started, _writer_lock, _flush_lock
    _writer_started = False
    _writer_lock, _flush_lock = threading.Lock(), threading.Lock()
    _pending.clear()


def _write_forever() -> None:
    while True:
        time.sleep(FLUSH_INTERVAL)
        # stdout gone (closed pipe, shutdown): nothing is left to log to.
        with contextlib.suppress(OSError, ValueError):
            flush()


atexit.register(flush)
os.register_at_fork(after_in_child=_after_fork)
