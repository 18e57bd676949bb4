"""The chart's side of each kind of setting: what its value may be (a JSON Schema), how a
template writes it back as its variable's text, and the checks of a bound by another
setting or of what a schema cannot state (Go template lines).

CHART_KINDS puts them together per kind, beside castslice.environment's table of kinds
(KINDS: each kind's parser), so that a kind is dispatched once on each side; tests/
test_config.py holds the two tables to the same kinds. castslice.render.chart_and_docs
writes the chart's files with them. Every template line reads a value as `$.Values.<value>`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from castslice.settings.config import MEMORY_UNITS
from castslice.settings.names import (
    CAPACITY_NAME,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    MAX_CAPACITY_DOMAIN_LENGTH,
    MAX_LABEL_LENGTH,
    MAX_SUBDOMAIN_LENGTH,
    MIN_PATH_TOKEN_LENGTH,
    PATH_TOKEN,
    QUALIFIED_NAME,
)
from castslice.settings.table import Kind, Setting, chart_value

# values.schema.json: what one setting's chart value alone may be; `most` is its upper
# bound (None: none), `choices` what a choice may be.


def choice_schema(entry: Setting, most: int | None, choices: tuple[str, ...]) -> dict[str, Any]:
    return {"enum": list(choices)}


def choices_schema(entry: Setting, most: int | None, choices: tuple[str, ...]) -> dict[str, Any]:
    # An empty list is an empty variable, and a name twice a refusal, as for COUNTS.
    return {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"enum": list(choices)}}


def count_schema(entry: Setting, most: int | None, choices: tuple[str, ...]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": entry.minimum, "maximum": most}
    if entry.reserved is not None:
        schema["not"] = {"const": entry.reserved}
    return schema


def counts_schema(entry: Setting, most: int | None, choices: tuple[str, ...]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array"}
    if entry.in_environment:
        # An empty list is an empty variable, which the application refuses.
        schema["minItems"] = 1
        # The application refuses a count listed twice; the chart's own lists dedupe.
        schema["uniqueItems"] = True
    schema["items"] = {"type": "integer", "minimum": entry.minimum, "maximum": most}
    return schema


def resource_schema(entry: Setting, most: int | None, choices: tuple[str, ...]) -> dict[str, Any]:
    local = QUALIFIED_NAME.pattern.replace("*", f"{{0,{MAX_LABEL_LENGTH - 2}}}")
    return {
        "type": "string",
        "maxLength": MAX_SUBDOMAIN_LENGTH + 1 + MAX_LABEL_LENGTH,
        "pattern": f"^{DNS_SUBDOMAIN.pattern}/{local}$",
        "not": {"pattern": "^([^/]*\\.)?kubernetes\\.io/"},
    }


def presets_schema(entry: Setting, most: int | None, choices: tuple[str, ...]) -> dict[str, Any]:
    count = {"type": "integer", "minimum": 1, "maximum": most}
    return {
        "type": "object",
        "propertyNames": {"pattern": "^[^=,\\s]+$"},
        "additionalProperties": nullable(count),
    }


def product_names_schema(
    entry: Setting, most: int | None, choices: tuple[str, ...]
) -> dict[str, Any]:
    # A name holds no comma (the variable's separator), no tab or line break, and more
    # than spaces.
    name = {"type": "string", "pattern": "^[^,\\t\\n\\r]*[^,\\s][^,\\t\\n\\r]*$"}
    names = {"type": "array", "minItems": 1, "uniqueItems": True, "items": name}
    return {
        "type": "object",
        "propertyNames": {"enum": list(choices)},
        "additionalProperties": names,
    }


def path_token_schema(entry: Setting, most: int | None, choices: tuple[str, ...]) -> dict[str, Any]:
    token = PATH_TOKEN.pattern.removesuffix("+") + f"{{{MIN_PATH_TOKEN_LENGTH},}}"
    return {"type": "string", "pattern": f"^{token}$"}


def boolean_schema(entry: Setting, most: int | None, choices: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "boolean"}


def dns_subdomain_schema(
    entry: Setting, most: int | None, choices: tuple[str, ...]
) -> dict[str, Any]:
    return {
        "type": "string",
        "maxLength": MAX_SUBDOMAIN_LENGTH,
        "pattern": f"^{DNS_SUBDOMAIN.pattern}$",
    }


def capacity_schema(entry: Setting, most: int | None, choices: tuple[str, ...]) -> dict[str, Any]:
    return {
        "type": "string",
        "maxLength": MAX_CAPACITY_DOMAIN_LENGTH + 1 + 32,
        "pattern": f"^({DNS_SUBDOMAIN.pattern}/)?{CAPACITY_NAME.pattern}$",
    }


def memory_schema(entry: Setting, most: int | None, choices: tuple[str, ...]) -> dict[str, Any]:
    assert most is not None, entry.variable
    units = [f"{decimal_range(most // size)}{unit}" for unit, size in MEMORY_UNITS.items()]
    return {"type": "string", "pattern": f"^({'|'.join(units)})$"}


def namespaces_schema(entry: Setting, most: int | None, choices: tuple[str, ...]) -> dict[str, Any]:
    item = {"type": "string", "pattern": f"^{DNS_LABEL.pattern}$"}
    return {"type": "array", "uniqueItems": True, "items": item}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` or null, written so that a bad value is answered with the rule it breaks
    (`maximum: got 49, want 48`), not with "'anyOf' failed"."""
    if "enum" in schema:
        return {**schema, "enum": [None, *schema["enum"]]}
    nullable_schema = {**schema, "type": ["null", schema["type"]]}
    if "not" in schema:
        # What the value may not be is of its type: null is never it.
        nullable_schema["not"] = {**schema["not"], "type": schema["type"]}
    return nullable_schema


def decimal_range(most: int) -> str:
    """A regular expression for the whole numbers 1 to `most`, written without leading zeros."""
    digits = str(most)
    shorter = [f"[1-9][0-9]{{0,{len(digits) - 2}}}"] if len(digits) > 1 else []
    return "(" + "|".join(shorter + _at_most(digits, first=True)) + ")"


def _at_most(digits: str, *, first: bool) -> list[str]:
    """Alternatives for the numbers of len(digits) digits up to `digits`."""
    low = 1 if first else 0
    head, rest = int(digits[0]), digits[1:]
    tail = f"[0-9]{{{len(rest)}}}" if len(rest) > 1 else "[0-9]" * len(rest)
    below = []
    if head - 1 >= low:
        span = str(low) if head - 1 == low else f"[{low}-{head - 1}]"
        below = [span + tail]
    if not rest:
        return [f"[{low}-{head}]" if head > low else str(head)]
    return below + [digits[0] + part for part in _at_most(rest, first=False)]


# Go templates: the value as its variable's text, in $value ("" when null).


def ref(variable: str) -> str:
    return "$.Values." + chart_value(variable)


def count_text(entry: Setting) -> list[str]:
    if entry.default is None:
        # Unset (null) stays unset: `int` would make it 0, which no count setting accepts.
        assign = "{{ $value = int . | toString }}{{ end }}"
        return ['{{- $value = "" }}', f"{{{{- with {ref(entry.variable)} }}}}{assign}"]
    return [f"{{{{- $value = int {ref(entry.variable)} | toString }}}}"]


def counts_text(entry: Setting) -> list[str]:
    return [
        "{{- $items := list }}",
        f"{{{{- range {ref(entry.variable)} }}}}"
        "{{ $items = append $items (int . | toString) }}{{ end }}",
        '{{- $value = join "," $items }}',
    ]


def presets_text(entry: Setting) -> list[str]:
    return [
        "{{- $items := list }}",
        f"{{{{- range $type, $count := {ref(entry.variable)} }}}}"
        '{{ if not (kindIs "invalid" $count) }}'
        '{{ $items = append $items (printf "%s=%d" $type (int $count)) }}{{ end }}{{ end }}',
        '{{- $value = join "," $items }}',
    ]


def product_names_text(entry: Setting) -> list[str]:
    return [
        "{{- $items := list }}",
        f"{{{{- range $model, $names := {ref(entry.variable)} }}}}{{{{ range $names }}}}"
        '{{ $items = append $items (printf "%s=%s" $model .) }}{{ end }}{{ end }}',
        '{{- $value = join "," $items }}',
    ]


def choices_text(entry: Setting) -> list[str]:
    joined = '{{ $value = join "," . }}{{ end }}'
    return ['{{- $value = "" }}', f"{{{{- with {ref(entry.variable)} }}}}{joined}"]


def boolean_text(entry: Setting) -> list[str]:
    return [f"{{{{- $value = toString {ref(entry.variable)} }}}}"]


def string_text(entry: Setting) -> list[str]:
    assign = "{{ $value = toString . }}{{ end }}"
    return ['{{- $value = "" }}', f"{{{{- with {ref(entry.variable)} }}}}{assign}"]


# Go templates: a bound by another setting (entry.maximum names it), refused as the
# application refuses its variable.


def _above(entry: Setting, value: str, shown: str = "") -> str:
    assert isinstance(entry.maximum, str), entry.variable
    name, bound = chart_value(entry.variable), chart_value(entry.maximum)
    why = f"the application refuses {entry.variable} above {entry.maximum}"
    most = f"(int {ref(entry.maximum)})"
    return (
        f'{{{{- fail (printf "{name}{shown}: %d is above {bound} (%d); {why}" {value} {most}) }}}}'
    )


def _most(entry: Setting) -> str:
    assert isinstance(entry.maximum, str), entry.variable
    return f"(int {ref(entry.maximum)})"


def count_bound(entry: Setting) -> list[str]:
    value = f"(int {ref(entry.variable)})"
    return [f"{{{{- if gt {value} {_most(entry)} }}}}", _above(entry, value), "{{- end }}"]


def counts_bound(entry: Setting) -> list[str]:
    return [
        f"{{{{- range {ref(entry.variable)} }}}}",
        f"{{{{- if gt (int .) {_most(entry)} }}}}",
        _above(entry, "(int .)"),
        "{{- end }}",
        "{{- end }}",
    ]


def presets_bound(entry: Setting) -> list[str]:
    return [
        f"{{{{- range $type, $count := {ref(entry.variable)} }}}}",
        '{{- if and (not (kindIs "invalid" $count)) (gt (int $count) ' + _most(entry) + ") }}",
        _above(entry, "$type (int $count)", ".%s"),
        "{{- end }}",
        "{{- end }}",
    ]


# Go templates: what a kind's schema cannot state.


def resource_checks(entry: Setting) -> list[str]:
    """A resource's domain is a DNS subdomain of at most 253 characters, a length the
    schema's pattern cannot count (Go's regular expressions have no lookahead)."""
    name, value = chart_value(entry.variable), ref(entry.variable)
    return [
        f'{{{{- if and {value} (gt (len (first (splitList "/" (toString {value})))) '
        f"{MAX_SUBDOMAIN_LENGTH}) }}}}",
        f'{{{{- fail (printf "{name}: the domain of %q is longer than {MAX_SUBDOMAIN_LENGTH} '
        f'characters ({entry.variable})" {value}) }}}}',
        "{{- end }}",
    ]


def product_names_checks(entry: Setting) -> list[str]:
    """A name given to two models, which the application refuses."""
    name = chart_value(entry.variable)
    return [
        "{{- $owner := dict }}",
        f"{{{{- range $model, $names := {ref(entry.variable)} }}}}{{{{ range $names }}}}",
        "{{- if hasKey $owner (trim .) }}",
        f'{{{{- fail (printf "{name}: %q is given to %s already ({entry.variable})" '
        "(trim .) (get $owner (trim .))) }}",
        "{{- end }}",
        "{{- $_ := set $owner (trim .) $model }}",
        "{{- end }}{{ end }}",
    ]


def presets_checks(entry: Setting) -> list[str]:
    """A map whose every entry is null would be an empty variable, which is refused."""
    name = chart_value(entry.variable)
    return [
        "{{- $kept := list }}",
        f"{{{{- range $type, $count := {ref(entry.variable)} }}}}",
        '{{- if not (kindIs "invalid" $count) }}{{ $kept = append $kept $type }}{{ end }}',
        "{{- end }}",
        "{{- if not $kept }}",
        f'{{{{- fail "{name}: every entry is null; keep at least one ({entry.variable} '
        'cannot be empty)" }}',
        "{{- end }}",
    ]


Schema = Callable[[Setting, int | None, tuple[str, ...]], dict[str, Any]]
TemplateLines = Callable[[Setting], list[str]]


@dataclass(frozen=True)
class ChartKind:
    """For a kind the chart sets: what its value may be (JSON Schema), how a template writes
    it back as the variable's text, how it checks a bound by another setting and what else
    the schema cannot state."""

    schema: Schema | None = None
    chart_text: TemplateLines = string_text
    bound_check: TemplateLines | None = None
    chart_checks: TemplateLines | None = None


CHART_KINDS: dict[Kind, ChartKind] = {
    Kind.CHOICE: ChartKind(choice_schema),
    Kind.CHOICES: ChartKind(choices_schema, choices_text),
    Kind.COUNT: ChartKind(count_schema, count_text, count_bound),
    Kind.COUNTS: ChartKind(counts_schema, counts_text, counts_bound),
    Kind.RESOURCE: ChartKind(resource_schema, chart_checks=resource_checks),
    Kind.PRESETS: ChartKind(presets_schema, presets_text, presets_bound, presets_checks),
    Kind.PRODUCT_NAMES: ChartKind(
        product_names_schema, product_names_text, chart_checks=product_names_checks
    ),
    Kind.PATH_TOKEN: ChartKind(path_token_schema),
    Kind.BOOLEAN: ChartKind(boolean_schema, boolean_text),
    Kind.DNS_SUBDOMAIN: ChartKind(dns_subdomain_schema),
    Kind.CAPACITY: ChartKind(capacity_schema),
    Kind.MEMORY: ChartKind(memory_schema),
    Kind.POLICY: ChartKind(),
    Kind.NAMESPACES: ChartKind(namespaces_schema),
}
