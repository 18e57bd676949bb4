"""The grammar of the workload table's template paths, parsed once for every reader.

The template walker (Python) and the registration's matchCondition (CEL) both read
these segments, so a path means one thing to both; a path either could misread is
refused when the table is built.

A path is dotted field names, with two wildcards:
  `name.*`        every value of the map `name`, labelled by its key
                  (`spec.pytorchReplicaSpecs.*.template`: Master, Worker);
  `name[field]`   every item of the list `name`, labelled by the item's `field`, or by its
                  index when that is unset (`spec.workerGroupSpecs[groupName].template`);
  `name[]`        every item of the list `name`, labelled by its index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

EACH_VALUE = "*"
# A field CEL can select with `a.name` and `has(a.name)`: an identifier that is not a word
# CEL reserves (Kubernetes would have to escape those as `__name__`).
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LIST = re.compile(r"(?P<field>[^.\[\]]*)\[(?P<key>[^.\[\]]*)\]")
_CEL_RESERVED = frozenset(
    [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ]
)


class PathError(ValueError):
    """A template path the grammar does not allow; the message names the path and the part."""


@dataclass(frozen=True)
class Field:
    """One field of an object."""

    name: str


@dataclass(frozen=True)
class EachValue:
    """Every value of the map `name`, labelled by its key."""

    name: str


@dataclass(frozen=True)
class EachItem:
    """Every item of the list `name`, labelled by the item's `key` (its index when `key` is
    empty or the item's value there is not a non-empty string)."""

    name: str
    key: str = ""


Segment = Field | EachValue | EachItem


def parse(path: str) -> tuple[Segment, ...]:
    """The segments of `path`; PathError when any part is outside the grammar."""
    parts = path.split(".")
    segments: list[Segment] = []
    index = 0
    while index < len(parts):
        part = parts[index]
        following = parts[index + 1] if index + 1 < len(parts) else None
        if part == EACH_VALUE:
            raise PathError(f"template path {path!r}: `*` must follow the name of a map")
        listed = _LIST.fullmatch(part)
        if listed is not None:
            _check_field(path, listed["field"])
            if listed["key"]:
                _check_field(path, listed["key"])
            if following == EACH_VALUE:
                raise PathError(
                    f"template path {path!r}: {part!r} is a list; a list's items cannot be "
                    "read as a map (`.*`)"
                )
            segments.append(EachItem(listed["field"], listed["key"]))
            index += 1
            continue
        _check_field(path, part)
        if following == EACH_VALUE:
            segments.append(EachValue(part))
            index += 2
            continue
        segments.append(Field(part))
        index += 1
    return tuple(segments)


def _check_field(path: str, name: str) -> None:
    if not _FIELD.fullmatch(name):
        raise PathError(
            f"template path {path!r}: {name!r} is not a field name (letters, digits and _, "
            "not starting with a digit)"
        )
    if name in _CEL_RESERVED:
        raise PathError(f"template path {path!r}: {name!r} is a word CEL reserves")


def has_wildcards(segments: tuple[Segment, ...]) -> bool:
    return any(not isinstance(segment, Field) for segment in segments)
