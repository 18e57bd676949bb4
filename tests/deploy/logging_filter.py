"""The part of Cloud Logging's query language and extractors that infra/monitoring.tf uses.

Cloud Logging cannot run here, so its documented semantics for the constructs the
log-based metrics use are reproduced, and anything else is refused rather than
guessed: a filter is comparisons joined by AND, each optionally negated with NOT;
`field:*` tests presence, `:` a case-insensitive substring, `=` case-insensitive
equality (numbers compared as numbers), `=~` an RE2-style regular expression, `<`,
`<=`, `>`, `>=` order numbers, and severities by their rank. An extractor is
EXTRACT(field); a label gets the field's value as text, or "" when it is absent.

Log entries are built as Cloud Run builds them from a structured stdout line: its
`severity` becomes the entry's severity and every other field lands in jsonPayload.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

SEVERITIES = (
    "DEFAULT",
    "DEBUG",
    "INFO",
    "NOTICE",
    "WARNING",
    "ERROR",
    "CRITICAL",
    "ALERT",
    "EMERGENCY",
)
_ABSENT = object()
_TERM = re.compile(
    r"(?P<negated>NOT\s+)?(?P<field>[A-Za-z_][\w.]*)\s*(?P<op>=~|!=|>=|<=|:|=|>|<)\s*"
    r'(?P<value>"(?:[^"\\]|\\.)*"|\*|[^\s"()]+)'
)
_AND = re.compile(r"\s+AND\s+")
_EXTRACT = re.compile(r"EXTRACT\((?P<field>[A-Za-z_][\w.]*)\)")


class UnsupportedFilter(ValueError):
    """A filter or extractor uses syntax this evaluator does not reproduce."""


def log_entry(line: dict[str, Any], service_name: str) -> dict[str, Any]:
    """The entry Cloud Logging stores for one JSON line a Cloud Run service wrote."""
    payload = {key: value for key, value in line.items() if key != "severity"}
    return {
        "resource": {
            "type": "cloud_run_revision",
            "labels": {"service_name": service_name, "revision_name": f"{service_name}-00001"},
        },
        "severity": str(line.get("severity", "DEFAULT")).upper(),
        "jsonPayload": payload,
    }


@dataclass(frozen=True)
class _Comparison:
    negated: bool
    field: str
    op: str
    value: str


def _parse(text: str) -> list[_Comparison]:
    terms = _AND.split(text.strip())
    comparisons = []
    for term in terms:
        match = _TERM.fullmatch(term)
        if match is None:
            raise UnsupportedFilter(f"cannot evaluate {term!r} (in {text!r})")
        value = match["value"]
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        comparisons.append(_Comparison(bool(match["negated"]), match["field"], match["op"], value))
    return comparisons


def _field(entry: dict[str, Any], path: str) -> Any:
    value: Any = entry
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _compare(comparison: _Comparison, actual: Any) -> bool:
    op, wanted = comparison.op, comparison.value
    if op == ":" and wanted == "*":
        return actual is not _ABSENT
    if actual is _ABSENT:
        return False
    if comparison.field == "severity" and op in ("=", "!=", "<", "<=", ">", ">="):
        if wanted.upper() not in SEVERITIES:
            raise UnsupportedFilter(f"unknown severity {wanted!r}")
        left, right = SEVERITIES.index(str(actual).upper()), SEVERITIES.index(wanted.upper())
    elif op in ("<", "<=", ">", ">="):
        left, right = _number(actual), _number(wanted)
        if left is None or right is None:
            raise UnsupportedFilter(f"{comparison.field} {op} {wanted}: only numbers are ordered")
    elif op == ":":
        return wanted.lower() in _text(actual).lower()
    elif op == "=~":
        return re.search(wanted, _text(actual)) is not None
    else:
        left_number, right_number = _number(actual), _number(wanted)
        if left_number is not None and right_number is not None:
            equal = left_number == right_number
        else:
            equal = _text(actual).lower() == wanted.lower()
        return equal if op == "=" else not equal
    return {
        "=": left == right,
        "!=": left != right,
        "<": left < right,
        "<=": left <= right,
        ">": left > right,
        ">=": left >= right,
    }[op]


def matches(log_filter: str, entry: dict[str, Any]) -> bool:
    """Whether Cloud Logging would select `entry` with `log_filter`."""
    for comparison in _parse(log_filter):
        if _compare(comparison, _field(entry, comparison.field)) == comparison.negated:
            return False
    return True


def extracted_field(extractor: str) -> str:
    """The field an EXTRACT(...) expression reads."""
    match = _EXTRACT.fullmatch(extractor.strip())
    if match is None:
        raise UnsupportedFilter(f"cannot evaluate extractor {extractor!r}")
    return match["field"]


def extract(extractor: str, entry: dict[str, Any]) -> Any:
    """The value an extractor reads from `entry`, or None where the field is absent."""
    value = _field(entry, extracted_field(extractor))
    return None if value is _ABSENT else value


def label(extractor: str, entry: dict[str, Any]) -> str:
    """A STRING label's value: the field as text, "" (the label's default) when absent."""
    value = extract(extractor, entry)
    return "" if value is None else _text(value)
