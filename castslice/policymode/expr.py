"""Small builders of CEL source text; every expression the policies carry is made of these.

Each returns a CEL expression as a string. Values from the configuration only
ever enter CEL through `literal`, so a preset name or resource name can never
change an expression's meaning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Expr = str

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def string(value: str) -> Expr:
    """A CEL string literal that evaluates to exactly `value`."""
    out = []
    for char in value:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def literal(value: object) -> Expr:
    """A CEL literal for a string, int, bool, list or string-keyed map of those."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return string(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{string(k)}: {literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(literal(item) for item in value) + "]"
    raise TypeError(f"no CEL literal for {type(value).__name__}")


def variable(name: str) -> Expr:
    """A policy variable (spec.variables), as other expressions of the policy read it."""
    return f"variables.{name}"


def if_else(condition: Expr, then: Expr, otherwise: Expr) -> Expr:
    return f"({condition} ? {then} : {otherwise})"


def all_of(*conditions: Expr) -> Expr:
    return "(" + " && ".join(conditions) + ")"


def any_of(*conditions: Expr) -> Expr:
    return "(" + " || ".join(conditions) + ")"


def concat(parts: Iterable[Expr]) -> Expr:
    """`a + b + c`: strings joined, or lists appended; one part stands alone.

    Each part starts a line, so a long expression reads part by part in the YAML.
    """
    parts = list(parts)
    return parts[0] if len(parts) == 1 else "(" + " +\n".join(parts) + ")"


def let(name: str, value: Expr, body: Expr) -> Expr:
    """`body` with `name` bound to `value`, evaluated once.

    The API server's CEL has no `cel.bind`; a one-element list mapped over is
    the same thing inside a comprehension, where policy variables cannot help.
    """
    return f"[{value}].map({name}, {body})[0]"


def optional_map(value: Expr) -> Expr:
    """`value` (an optional map, e.g. `x.?annotations`) or an empty map when it is absent."""
    return f"{value}.orValue({{}})"


def clip(text: Expr, limit: int) -> Expr:
    """CEL for slices.clip: at most `limit` characters, `...` marking a cut."""
    return let(
        "t",
        text,
        f"size(t) <= {limit} ? t : t.substring(0, {limit - 3}) + {string('...')}",
    )


def jsonpatch(op: str, path: Expr, value: Expr | None = None) -> Expr:
    fields = f"op: {string(op)}, path: {path}"
    if value is not None:
        fields += f", value: {value}"
    return f"JSONPatch{{{fields}}}"
