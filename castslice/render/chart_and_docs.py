"""The files written from the settings table (castslice.settings.table), and the command that
writes them: `python -m castslice.render.chart_and_docs` (`make generate`).

- charts/castslice/values.schema.json: each setting's property (the chart's other values
  are the chart's own and stay as written);
- charts/castslice/values.yaml: the settings' documented defaults, between markers;
- charts/castslice/templates/_settings.tpl: the one check of the rules between settings
  that a JSON Schema cannot state, which `helm template` and `helm install` run;
- docs/configuration.md: the table of variables, between markers.

`--check` writes nothing and exits 1 naming each stale file (tests/deploy/test_chart_settings.py
runs the same comparison).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from castslice.backends import BACKENDS, SETTING_CHOICES, backend_class
from castslice.environment import MEMORY_UNITS
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
from castslice.settings.table import (
    BACKEND,
    SETTINGS,
    Kind,
    Setting,
    chart_value,
    environment_text,
    upper_bound,
)

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Path("charts/castslice/values.schema.json")
VALUES = Path("charts/castslice/values.yaml")
CHECK_TEMPLATE = Path("charts/castslice/templates/_settings.tpl")
CONFIGURATION = Path("docs/configuration.md")
COMMAND = "make generate"
SOURCE = "castslice/settings/table.py"

CHART_SETTINGS = tuple(entry for entry in SETTINGS if entry.value is not None)


# values.schema.json


def _resource_schema() -> dict[str, Any]:
    local = QUALIFIED_NAME.pattern.replace("*", f"{{0,{MAX_LABEL_LENGTH - 2}}}")
    return {
        "type": "string",
        "maxLength": MAX_SUBDOMAIN_LENGTH + 1 + MAX_LABEL_LENGTH,
        "pattern": f"^{DNS_SUBDOMAIN.pattern}/{local}$",
        "not": {"pattern": "^([^/]*\\.)?kubernetes\\.io/"},
    }


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


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [{"type": "null"}, schema]}


def property_schema(entry: Setting) -> dict[str, Any]:
    """The JSON Schema of one setting's chart value: what it alone may be."""
    most = None if entry.maximum is None else upper_bound(entry)
    kind = entry.kind
    if kind is Kind.CHOICE:
        schema: dict[str, Any] = {"enum": list(_choices(entry))}
    elif kind is Kind.CHOICES:
        # An empty list is an empty variable, and a name twice a refusal, as for COUNTS.
        schema = {
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": {"enum": list(_choices(entry))},
        }
    elif kind is Kind.COUNT:
        schema = {"type": "integer", "minimum": entry.minimum, "maximum": most}
        if entry.reserved is not None:
            schema["not"] = {"const": entry.reserved}
    elif kind is Kind.COUNTS:
        schema = {"type": "array"}
        if entry.in_environment:
            # An empty list is an empty variable, which the application refuses.
            schema["minItems"] = 1
            # The application refuses a count listed twice; the chart's own lists dedupe.
            schema["uniqueItems"] = True
        schema["items"] = {"type": "integer", "minimum": entry.minimum, "maximum": most}
    elif kind is Kind.RESOURCE:
        schema = _resource_schema()
    elif kind is Kind.PRESETS:
        count = {"type": "integer", "minimum": 1, "maximum": most}
        schema = {
            "type": "object",
            "propertyNames": {"pattern": "^[^=,\\s]+$"},
            "additionalProperties": _nullable(count),
        }
    elif kind is Kind.PATH_TOKEN:
        token = PATH_TOKEN.pattern.removesuffix("+") + f"{{{MIN_PATH_TOKEN_LENGTH},}}"
        schema = {"type": "string", "pattern": f"^{token}$"}
    elif kind is Kind.BOOLEAN:
        schema = {"type": "boolean"}
    elif kind is Kind.DNS_SUBDOMAIN:
        schema = {
            "type": "string",
            "maxLength": MAX_SUBDOMAIN_LENGTH,
            "pattern": f"^{DNS_SUBDOMAIN.pattern}$",
        }
    elif kind is Kind.CAPACITY:
        schema = {
            "type": "string",
            "maxLength": MAX_CAPACITY_DOMAIN_LENGTH + 1 + 32,
            "pattern": f"^({DNS_SUBDOMAIN.pattern}/)?{CAPACITY_NAME.pattern}$",
        }
    elif kind is Kind.MEMORY:
        assert most is not None
        units = [f"{decimal_range(most // size)}{unit}" for unit, size in MEMORY_UNITS.items()]
        schema = {"type": "string", "pattern": f"^({'|'.join(units)})$"}
    elif kind is Kind.NAMESPACES:
        item = {"type": "string", "pattern": f"^{DNS_LABEL.pattern}$"}
        schema = {"type": "array", "uniqueItems": True, "items": item}
    else:
        raise AssertionError(f"{entry.variable}: the chart does not set a {kind.value}")
    if entry.default is None and kind is not Kind.BOOLEAN:
        schema = _nullable(schema)
    schema["description"] = entry.variable if entry.in_environment else entry.meaning
    return schema


def _choices(entry: Setting) -> tuple[str, ...]:
    # What the backends name (their own names, MIG profiles) the settings cannot import.
    choices = SETTING_CHOICES.get(entry.variable, entry.choices)
    assert choices is not None, entry.variable
    return choices


def updated_schema(text: str) -> str:
    schema = json.loads(text)
    for entry in CHART_SETTINGS:
        *parents, name = chart_value(entry.variable).split(".")
        node = schema
        for parent in parents:
            node = node["properties"][parent]
        node["properties"][name] = property_schema(entry)
    return json.dumps(schema, indent=2) + "\n"


# values.yaml


def _begin(parent: str) -> str:
    return f"# BEGIN {parent or 'settings'}: generated from {SOURCE} by `{COMMAND}`"


def _end(parent: str) -> str:
    return f"# END {parent or 'settings'}"


def _yaml_value(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(_yaml_value(item) for item in value) + "]"
    return json.dumps(value) if isinstance(value, str) and not value.isprintable() else str(value)


def values_lines(parent: str) -> list[str]:
    """The documented defaults of the settings whose chart value is under `parent`."""
    lines = []
    for entry in CHART_SETTINGS:
        *path, name = chart_value(entry.variable).split(".")
        if ".".join(path) != parent:
            continue
        note = entry.chart_note
        if entry.kind is Kind.CHOICE:
            note = " | ".join(_choices(entry)) + (f" ({note})." if note else ".")
        if note:
            lines += textwrap.wrap(note, 80, initial_indent="# ", subsequent_indent="# ")
        if isinstance(entry.default, dict):
            lines.append(f"{name}:")
            lines += [f"  {key}: {_yaml_value(count)}" for key, count in entry.default.items()]
        else:
            lines.append(f"{name}: {_yaml_value(entry.default)}")
    return lines


def updated_values(text: str) -> str:
    parents = sorted({chart_value(e.variable).rpartition(".")[0] for e in CHART_SETTINGS})
    for parent in parents:
        text = _replace_region(text, parent, values_lines(parent), VALUES)
    return text


def _replace_region(text: str, parent: str, lines: list[str], path: Path) -> str:
    begin, end = _begin(parent), _end(parent)
    before, found, rest = text.partition(begin)
    if not found or end not in rest:
        raise SystemExit(f"{path}: the markers {begin!r} and {end!r} are missing")
    indent = before[before.rfind("\n") + 1 :]
    body = "".join(f"{indent}{line}\n" if line else "\n" for line in lines)
    return f"{before}{begin}\n{body}{indent}{end}{rest.split(end, 1)[1]}"


# docs/configuration.md

_TABLE_BEGIN = f"<!-- BEGIN generated from {SOURCE} by `{COMMAND}` -->"
_TABLE_END = "<!-- END generated -->"


def configuration_table() -> list[str]:
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for entry in SETTINGS:
        if not entry.in_environment:
            continue
        default = entry.default_text or (
            "unset" if entry.default is None else f"`{environment_text(entry.default)}`"
        )
        rows.append(f"| `{entry.variable}` | {default} | {entry.meaning} |")
    return rows


def updated_configuration(text: str) -> str:
    before, found, rest = text.partition(_TABLE_BEGIN)
    if not found or _TABLE_END not in rest:
        raise SystemExit(
            f"{CONFIGURATION}: the markers {_TABLE_BEGIN!r} and {_TABLE_END!r} are missing"
        )
    body = "\n".join(configuration_table())
    return f"{before}{_TABLE_BEGIN}\n{body}\n{_TABLE_END}{rest.split(_TABLE_END, 1)[1]}"


# templates/_settings.tpl


def _ref(variable: str) -> str:
    return "$.Values." + chart_value(variable)


def _bound_check(entry: Setting) -> list[str]:
    assert isinstance(entry.maximum, str)
    name, bound = chart_value(entry.variable), chart_value(entry.maximum)
    most = f"(int {_ref(entry.maximum)})"
    why = f"the application refuses {entry.variable} above {entry.maximum}"
    if entry.kind is Kind.COUNT:
        return [
            f"{{{{- if gt (int {_ref(entry.variable)}) {most} }}}}",
            f'{{{{- fail (printf "{name}: %d is above {bound} (%d); {why}" '
            f"(int {_ref(entry.variable)}) {most}) }}}}",
            "{{- end }}",
        ]
    if entry.kind is Kind.COUNTS:
        return [
            f"{{{{- range {_ref(entry.variable)} }}}}",
            f"{{{{- if gt (int .) {most} }}}}",
            f'{{{{- fail (printf "{name}: %d is above {bound} (%d); {why}" (int .) {most}) }}}}',
            "{{- end }}",
            "{{- end }}",
        ]
    if entry.kind is Kind.PRESETS:
        return [
            f"{{{{- range $type, $count := {_ref(entry.variable)} }}}}",
            '{{- if and (not (kindIs "invalid" $count)) (gt (int $count) ' + most + ") }}",
            f'{{{{- fail (printf "{name}.%s: %d is above {bound} (%d); {why}" '
            f"$type (int $count) {most}) }}}}",
            "{{- end }}",
            "{{- end }}",
        ]
    raise AssertionError(f"{entry.variable}: no bound by another setting for a {entry.kind.value}")


def _go_string(text: str) -> str:
    return json.dumps(text)


def _differs_check(entry: Setting) -> list[str]:
    """This value, or the backend's default for it when null, never equals the other's."""
    assert entry.differs_from is not None
    name, other = chart_value(entry.variable), chart_value(entry.differs_from)
    marker = "\0"
    defaults = []
    for backend in BACKENDS:
        pieces = backend_class(backend).default_shared_resource(marker).split(marker)
        parts = [_go_string(pieces[0])]
        for piece in pieces[1:]:
            parts += [_ref(entry.differs_from), _go_string(piece)]
        defaults += [_go_string(backend), f"(print {' '.join(parts)})"]
    return [
        f"{{{{- $default := get (dict {' '.join(defaults)}) (toString {_ref(BACKEND)}) }}}}",
        f"{{{{- if eq ({_ref(entry.variable)} | default $default) {_ref(entry.differs_from)} }}}}",
        f"{{{{- if {_ref(entry.variable)} }}}}",
        f'{{{{- fail (printf "{name}: %q is also {other}; the shared resource must differ '
        f'from the one it replaces ({entry.variable})" {_ref(entry.variable)}) }}}}',
        "{{- else }}",
        f"{{{{- fail (printf \"{name}: null is the %s backend's default %q, which is also "
        f'{other}; set {name} to another resource ({entry.variable})" '
        f"{_ref(BACKEND)} $default) }}}}",
        "{{- end }}",
        "{{- end }}",
    ]


def _domain_check(entry: Setting) -> list[str]:
    """A resource's domain is a DNS subdomain of at most 253 characters, a length the
    schema's pattern cannot count (Go's regular expressions have no lookahead)."""
    name, ref = chart_value(entry.variable), _ref(entry.variable)
    return [
        f'{{{{- if and {ref} (gt (len (first (splitList "/" (toString {ref})))) '
        f"{MAX_SUBDOMAIN_LENGTH}) }}}}",
        f'{{{{- fail (printf "{name}: the domain of %q is longer than {MAX_SUBDOMAIN_LENGTH} '
        f'characters ({entry.variable})" {ref}) }}}}',
        "{{- end }}",
    ]


def _not_empty_check(entry: Setting) -> list[str]:
    """A map whose every entry is null would be an empty variable, which is refused."""
    name = chart_value(entry.variable)
    return [
        "{{- $kept := list }}",
        f"{{{{- range $type, $count := {_ref(entry.variable)} }}}}",
        '{{- if not (kindIs "invalid" $count) }}{{ $kept = append $kept $type }}{{ end }}',
        "{{- end }}",
        "{{- if not $kept }}",
        f'{{{{- fail "{name}: every entry is null; keep at least one ({entry.variable} '
        'cannot be empty)" }}',
        "{{- end }}",
    ]


def _encoded(entry: Setting) -> list[str]:
    """Lines that set $value to the setting's value as its variable's text ("" when null)."""
    ref = _ref(entry.variable)
    if entry.kind is Kind.COUNT:
        return [f"{{{{- $value = int {ref} | toString }}}}"]
    if entry.kind in (Kind.COUNTS, Kind.PRESETS):
        each = (
            "{{- range " + ref + " }}{{ $items = append $items (int . | toString) }}{{ end }}"
            if entry.kind is Kind.COUNTS
            else "{{- range $type, $count := " + ref + ' }}{{ if not (kindIs "invalid" $count) }}'
            '{{ $items = append $items (printf "%s=%d" $type (int $count)) }}{{ end }}{{ end }}'
        )
        return ["{{- $items := list }}", each, '{{- $value = join "," $items }}']
    if entry.kind is Kind.CHOICES:
        joined = '{{ $value = join "," . }}{{ end }}'
        return ['{{- $value = "" }}', f"{{{{- with {ref} }}}}{joined}"]
    assign = "{{ $value = toString . }}{{ end }}"
    return ['{{- $value = "" }}', f"{{{{- with {ref} }}}}{assign}"]


def _flags_helper() -> list[str]:
    """The command line's flags for every setting of the release that is not the default:
    `castslice doctor` and `preview` then use the release's own configuration."""
    lines = [
        "",
        "{{- /* The release's settings as `castslice` flags, the defaults left out. */}}",
        '{{- define "castslice.commandFlags" -}}',
        "{{- $flags := list }}",
        '{{- $value := "" }}',
    ]
    for entry in CHART_SETTINGS:
        if entry.flag is None:
            continue
        default = entry.default
        if isinstance(default, dict):
            # Go templates range over a map in the order of its keys.
            default = dict(sorted(default.items()))
        default_text = "" if default is None else environment_text(default)
        lines += _encoded(entry)
        lines.append(
            f"{{{{- if and $value (ne $value {_go_string(default_text)}) }}}}"
            f'{{{{ $flags = append $flags (printf "{entry.flag} %s" '
            '(include "castslice.shellWord" $value)) }}{{ end }}'
        )
    lines += ['{{- join " " $flags }}', "{{- end -}}", ""]
    lines += [
        "{{- /* A word the shell reads as it is: quoted unless plainly safe. */}}",
        '{{- define "castslice.shellWord" -}}',
        '{{- if regexMatch "^[-A-Za-z0-9._/=,:@]+$" . }}{{ . }}'
        "{{- else }}'{{ replace \"'\" \"'\\\\''\" . }}'{{ end }}",
        "{{- end -}}",
    ]
    return lines


def check_template() -> str:
    lines = [
        f"{{{{- /* Generated from {SOURCE} by `{COMMAND}`; do not edit.",
        "",
        "The rules between settings that values.schema.json cannot state, each refused with",
        "the value's name as the application would refuse its variable. */}}",
        '{{- define "castslice.checkSettings" -}}',
    ]
    for entry in CHART_SETTINGS:
        if isinstance(entry.maximum, str):
            lines += _bound_check(entry)
        if entry.kind is Kind.RESOURCE:
            lines += _domain_check(entry)
        if entry.differs_from is not None:
            lines += _differs_check(entry)
        if entry.kind is Kind.PRESETS:
            lines += _not_empty_check(entry)
    lines.append("{{- end -}}")
    lines += _flags_helper()
    return "\n".join(lines) + "\n"


# The files


GENERATORS: dict[Path, Callable[[str], str]] = {
    SCHEMA: updated_schema,
    VALUES: updated_values,
    CHECK_TEMPLATE: lambda _text: check_template(),
    CONFIGURATION: updated_configuration,
}


def generated_files(root: Path = ROOT) -> dict[Path, tuple[str, str]]:
    """Each generated file: (its text now, its text as generated)."""
    out = {}
    for path, generate in GENERATORS.items():
        file = root / path
        current = file.read_text() if file.exists() else ""
        out[path] = (current, generate(current))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m castslice.render.chart_and_docs",
        description=f"Write the files generated from {SOURCE}.",
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    stale = [path for path, (now, new) in generated_files().items() if now != new]
    if args.check:
        for path in stale:
            print(f"{path} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        (ROOT / path).write_text(generated_files()[path][1])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
