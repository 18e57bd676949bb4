"""Structured log lines on stdout, in the JSON form Cloud Logging parses.

Callers pass chosen fields only: never a Pod, its env values or a whole body.
"""

from __future__ import annotations

import sys
from typing import Literal

import msgspec

Severity = Literal["DEBUG", "INFO", "WARNING", "ERROR"]

_encoder = msgspec.json.Encoder()


def write_log(severity: Severity, message: str, **fields: object) -> None:
    record = {"severity": severity, "message": message}
    record.update((key, value) for key, value in fields.items() if value is not None)
    line = _encoder.encode(record) + b"\n"
    # One write of the whole line through the locked binary buffer keeps
    # lines from gunicorn's threads whole.
    stream = sys.stdout
    stream.buffer.write(line)
    stream.flush()
