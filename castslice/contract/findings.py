"""What a check found, and how `castslice doctor` prints it: one line per check, or JSON."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class Status(enum.Enum):
    OK = "ok"
    # Works now, but worth a look (e.g. no room left for some slice size); does not fail.
    WARNING = "warning"
    # Could not be checked for a reason that is not CastSlice's fault (e.g. no RBAC right).
    UNKNOWN = "unknown"
    FAILED = "failed"


SYMBOLS = {Status.OK: "✓", Status.WARNING: "!", Status.UNKNOWN: "?", Status.FAILED: "✗"}
# For terminals whose encoding has no check marks.
ASCII_SYMBOLS = {Status.OK: "+", Status.WARNING: "!", Status.UNKNOWN: "?", Status.FAILED: "x"}


@dataclass(frozen=True)
class Result:
    """One check's outcome: `message` says what was found, `fix` what to do about it."""

    check: str
    status: Status
    message: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not Status.FAILED


def passed(check: str, message: str) -> Result:
    return Result(check, Status.OK, message)


def failed(check: str, message: str, fix: str) -> Result:
    return Result(check, Status.FAILED, message, fix)


def warning(check: str, message: str, fix: str = "") -> Result:
    return Result(check, Status.WARNING, message, fix)


def unknown(check: str, message: str, fix: str = "") -> Result:
    return Result(check, Status.UNKNOWN, message, fix)


def text_line(result: Result, symbols: dict[Status, str] = SYMBOLS) -> str:
    line = f"{symbols[result.status]} {result.message}"
    return f"{line} - {result.fix}" if result.fix else line


def summary(results: Sequence[Result]) -> str:
    failures = sum(1 for result in results if result.status is Status.FAILED)
    if failures:
        return f"{failures} of {len(results)} checks failed"
    return f"all {len(results)} checks passed"


def to_json(results: Sequence[Result], context: Mapping[str, str]) -> str:
    """The report for machines: what was checked (`context`: server, version, backend) and
    one entry per check."""
    checks = [
        {
            "check": result.check,
            "ok": result.ok,
            "status": result.status.value,
            "message": result.message,
            "fix": result.fix,
        }
        for result in results
    ]
    return json.dumps({**context, "checks": checks}, indent=2, ensure_ascii=False)


def symbols_for(encoding: str | None) -> dict[Status, str]:
    """Check marks where the output encoding has them, plain ASCII otherwise."""
    try:
        "".join(SYMBOLS.values()).encode(encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return ASCII_SYMBOLS
    return SYMBOLS
