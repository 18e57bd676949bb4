"""Small builders of CEL (Common Expression Language) text: the registration's
matchConditions and every expression of policy mode are made of these.

Each builder returns an expression that is safe to use as an operand of any
other: compound results come in parentheses, and the constants `true` and
`false` are folded away, so a rule that matches everything adds no text.
Values from the configuration only ever enter CEL through `string` or
`literal`, so a preset or resource name can never change an expression's
meaning. Every map lookup in a matchCondition is guarded with has(): one that
errors makes the API server skip the webhook, which must only happen by decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

Expr = str
TRUE = "true"
FALSE = "false"

_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def string(value: str) -> str:
    """A single-quoted CEL string literal; anything outside printable ASCII is escaped."""
    parts = ["'"]
    for char in value:
        if char in _ESCAPES:
            parts.append(_ESCAPES[char])
        elif " " <= char <= "~":
            parts.append(char)
        elif ord(char) <= 0xFFFF:
            parts.append(f"\\u{ord(char):04x}")
        else:
            parts.append(f"\\U{ord(char):08x}")
    parts.append("'")
    return "".join(parts)


def string_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(string(value) for value in values) + "]"


def literal(value: object) -> Expr:
    """A CEL literal for a string, int, bool, list or string-keyed map of those."""
    if isinstance(value, bool):
        return TRUE if value else FALSE
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return string(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{string(k)}: {literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(literal(item) for item in value) + "]"
    raise TypeError(f"no CEL literal for {type(value).__name__}")


def all_of(terms: Iterable[str], *, separator: str = " ") -> str:
    """`a && b && ...`; `true` when there are no terms. `separator` goes before each `&&`."""
    kept: list[str] = []
    for term in terms:
        if term == FALSE:
            return FALSE
        if term != TRUE:
            kept.append(term)
    return _join(kept, f"{separator}&& ", TRUE)


def any_of(terms: Iterable[str], *, separator: str = " ") -> str:
    """`a || b || ...`; `false` when there are no terms."""
    kept: list[str] = []
    for term in terms:
        if term == TRUE:
            return TRUE
        if term != FALSE:
            kept.append(term)
    return _join(kept, f"{separator}|| ", FALSE)


def negate(term: str) -> str:
    if term in (TRUE, FALSE):
        return FALSE if term == TRUE else TRUE
    if term.startswith("!") and _is_atomic(term[1:]):
        return term[1:]
    return f"!{term}" if _is_atomic(term) else f"!({term})"


def has_path(path: str, known: str = "object") -> str:
    """`has()` for every field of `path` below `known` (a prefix that is always there)."""
    return all_of(has_path_terms(path, known))


def has_key(map_path: str, key: str, known: str = "object.metadata") -> str:
    """The map at `map_path` exists and has `key`."""
    return all_of(_has_key_terms(map_path, key, known))


def lacks_key(map_path: str, key: str, known: str = "object.metadata") -> str:
    """The map at `map_path` is absent or lacks `key` (written as the API server docs do)."""
    return any_of([negate(has_path(map_path, known)), f"!({string(key)} in {map_path})"])


def value_in(map_path: str, key: str, values: Sequence[str], known: str = "object.metadata") -> str:
    """The map at `map_path` has `key`, with one of `values`."""
    return all_of(
        [*_has_key_terms(map_path, key, known), equals_any(f"{map_path}[{string(key)}]", values)]
    )


def has_path_terms(path: str, known: str = "object") -> list[str]:
    """The terms of `has_path`, to put in a longer conjunction."""
    fields = path.split(".")
    depth = len(known.split("."))
    return [f"has({'.'.join(fields[: end + 1])})" for end in range(depth, len(fields))]


def _has_key_terms(map_path: str, key: str, known: str) -> list[str]:
    return [*has_path_terms(map_path, known), f"{string(key)} in {map_path}"]


def equals_any(subject: str, values: Sequence[str]) -> str:
    if not values:
        return FALSE
    if len(values) == 1:
        return f"{subject} == {string(values[0])}"
    return f"{subject} in {string_list(values)}"


def starts_with(subject: str, prefix: str) -> str:
    return TRUE if not prefix else f"{subject}.startsWith({string(prefix)})"


def ends_with(subject: str, suffix: str) -> str:
    return TRUE if not suffix else f"{subject}.endsWith({string(suffix)})"


def matches(subject: str, regex: str) -> str:
    """`subject` matches the RE2 regular expression `regex` (anchor it to match whole)."""
    return f"{subject}.matches({string(regex)})"


def exists(list_path: str, variable: str, predicate: str) -> str:
    """Some element of the list at `list_path` (bound to `variable`) satisfies `predicate`."""
    return f"{list_path}.exists({variable}, {predicate})"


def _join(terms: list[str], operator: str, empty: str) -> str:
    if not terms:
        return empty
    if len(terms) == 1:
        return terms[0]
    return "(" + operator.join(terms) + ")"


def _is_atomic(term: str) -> bool:
    """Whether `term` needs no parentheses as an operand: one call, one name, or one group."""
    if _is_group(term):
        return True
    return not any(char in " \n!=<>&|?:" for char in _top_level(term))


def _is_group(term: str) -> bool:
    """`term` is one parenthesized expression: `(a || b)`, not `(a) || (b)`."""
    return term.startswith("(") and _top_level(term).index(")") == len(term) - 1 if term else False


def _top_level(term: str) -> str:
    """`term` with everything nested in brackets or quotes replaced by `_` (positions kept)."""
    out = []
    depth = 0
    quote = False
    escaped = False
    for char in term:
        if quote:
            out.append("_")
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == "'":
                quote = False
            continue
        if char in "([":
            out.append(char if depth == 0 else "_")
            depth += 1
        elif char in ")]":
            depth -= 1
            out.append(char if depth == 0 else "_")
        elif char == "'":
            quote = True
            out.append("_")
        else:
            out.append(char if depth == 0 else "_")
    return "".join(out)


def unwrap(expression: str) -> str:
    """`expression` without one pair of parentheses around the whole of it, for the top level."""
    if _is_group(expression):
        return expression[1:-1]
    return expression


# Policy mode: variables, choices and the JSON Patch of a MutatingAdmissionPolicy ------------


def variable(name: str) -> Expr:
    """A policy variable (spec.variables), as other expressions of the policy read it."""
    return f"variables.{name}"


def if_else(condition: Expr, then: Expr, otherwise: Expr) -> Expr:
    return f"({condition} ? {then} : {otherwise})"


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
