"""The files written from the settings table (castslice.settings.table), and the command that
writes them: `python -m castslice.render.chart_and_docs` (`make generate`).

- charts/castslice/values.schema.json: each setting's property (the chart's other values
  are the chart's own and stay as written);
- charts/castslice/values.yaml: the settings' documented defaults, between markers;
- charts/castslice/templates/_settings.tpl: the one check of the rules between settings
  that a JSON Schema cannot state, which `helm template` and `helm install` run, the
  CASTSLICE_* environment written from the values and the release's command-line flags;
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

from castslice.backends import PLACERS, placer_class
from castslice.backends.tools import (
    MIG_MODEL_PROFILES,
    extender_backends,
    foreign_profiles_chart_check,
)
from castslice.environment import choices
from castslice.render.chart_values import CHART_KINDS, nullable, ref
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
MIG_PROFILES_TF = Path("infra/mig-profiles.tf")
COMMAND = "make generate"
SOURCE = "castslice/settings/table.py"

CHART_SETTINGS = tuple(entry for entry in SETTINGS if entry.value is not None)


# values.schema.json


def property_schema(entry: Setting) -> dict[str, Any]:
    """The JSON Schema of one setting's chart value: what it alone may be."""
    most = None if entry.maximum is None else upper_bound(entry)
    kind = CHART_KINDS[entry.kind]
    if kind.schema is None:
        raise AssertionError(f"{entry.variable}: the chart does not set a {entry.kind.value}")
    found = choices(entry) if entry.kind in (Kind.CHOICE, Kind.CHOICES, Kind.PRODUCT_NAMES) else ()
    schema = kind.schema(entry, most, found)
    if entry.default is None and entry.kind is not Kind.BOOLEAN:
        schema = nullable(schema)
    schema["description"] = entry.variable if entry.in_environment else entry.meaning
    return schema


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
            note = " | ".join(choices(entry)) + (f" ({note})." if note else ".")
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


def _go_string(text: str) -> str:
    return json.dumps(text)


def _differs_check(entry: Setting) -> list[str]:
    """This value, or the backend's default for it when null, never equals the other's."""
    assert entry.differs_from is not None
    name, other = chart_value(entry.variable), chart_value(entry.differs_from)
    marker = "\0"
    defaults = []
    for backend in PLACERS:
        pieces = placer_class(backend).default_shared_resource(marker).split(marker)
        parts = [_go_string(pieces[0])]
        for piece in pieces[1:]:
            parts += [ref(entry.differs_from), _go_string(piece)]
        defaults += [_go_string(backend), f"(print {' '.join(parts)})"]
    return [
        f"{{{{- $default := get (dict {' '.join(defaults)}) (toString {ref(BACKEND)}) }}}}",
        f"{{{{- if eq ({ref(entry.variable)} | default $default) {ref(entry.differs_from)} }}}}",
        f"{{{{- if {ref(entry.variable)} }}}}",
        f'{{{{- fail (printf "{name}: %q is also {other}; the shared resource must differ '
        f'from the one it replaces ({entry.variable})" {ref(entry.variable)}) }}}}',
        "{{- else }}",
        f"{{{{- fail (printf \"{name}: null is the %s backend's default %q, which is also "
        f'{other}; set {name} to another resource ({entry.variable})" '
        f"{ref(BACKEND)} $default) }}}}",
        "{{- end }}",
        "{{- end }}",
    ]


def _backend_refusal_check(entry: Setting) -> list[str]:
    """Set, this value is refused with each backend that says why it cannot take it."""
    assert entry.backend_refusal is not None
    name = chart_value(entry.variable)
    lines = []
    for backend in PLACERS:
        refusal = getattr(placer_class(backend), entry.backend_refusal)
        if not refusal:
            continue
        message = f"{name} is set, but with backend {backend} {refusal} ({entry.variable})"
        lines += [
            f"{{{{- if and {ref(entry.variable)} (eq (toString {ref(BACKEND)}) "
            f"{_go_string(backend)}) }}}}",
            f"{{{{- fail {_go_string(message)} }}}}",
            "{{- end }}",
        ]
    return lines


def _extender_check() -> list[str]:
    """extender.enabled only with a backend the extender scores, as `castslice extender`
    refuses the others."""
    scored = extender_backends()
    names = " ".join(_go_string(name) for name in scored)
    return [
        "{{- if and $.Values.extender $.Values.extender.enabled }}",
        f"{{{{- if not (has (toString {ref(BACKEND)}) (list {names})) }}}}",
        '{{- fail (printf "extender.enabled: the scheduler extender scores GPUs shared as '
        f"DRA devices or by sharing node pools; set backend to {', '.join(scored)} "
        f'(backend is %s)" (toString {ref(BACKEND)})) }}}}',
        "{{- end }}",
        "{{- end }}",
    ]


def _environment_helper() -> list[str]:
    """The CASTSLICE_* environment from the values named after each variable, one
    `VARIABLE: "text"` line each; a null value leaves its variable out (the application's
    default applies), and a secret one is the Deployment's to read from its Secret."""
    lines = [
        "",
        '{{- /* The CASTSLICE_* environment, one `VARIABLE: "value"` line each, from the',
        "values named after each variable. Metrics come from metrics.*, so the port the",
        "container declares and the one the application listens on cannot drift apart. */}}",
        '{{- define "castslice.settings" -}}',
        "{{- $lines := list }}",
        '{{- $value := "" }}',
    ]
    for entry in CHART_SETTINGS:
        if not entry.in_environment or entry.secret:
            continue
        line = f'{{{{- $lines = append $lines (printf "{entry.variable}: %s" (quote $value)) }}}}'
        if entry.default is None:
            line = f"{{{{- if $value }}}}\n{line}\n{{{{- end }}}}"
        if entry.chart_when is not None:
            line = f"{{{{- if {ref(entry.chart_when)} }}}}\n{line}\n{{{{- end }}}}"
        lines += [*CHART_KINDS[entry.kind].chart_text(entry), *line.split("\n")]
    lines += ['{{- join "\\n" $lines }}', "{{- end -}}"]
    return lines


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
        lines += CHART_KINDS[entry.kind].chart_text(entry)
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
        kind = CHART_KINDS[entry.kind]
        if isinstance(entry.maximum, str):
            if kind.bound_check is None:
                raise AssertionError(f"{entry.variable}: no bound by another setting for a kind")
            lines += kind.bound_check(entry)
        if kind.chart_checks is not None:
            lines += kind.chart_checks(entry)
        if entry.differs_from is not None:
            lines += _differs_check(entry)
        if entry.backend_refusal is not None:
            lines += _backend_refusal_check(entry)
    lines += _extender_check()
    lines += foreign_profiles_chart_check("mig.profiles", "mig.gpuModels")
    lines.append("{{- end -}}")
    lines += _environment_helper()
    lines += _flags_helper()
    return "\n".join(lines) + "\n"


# The files


def mig_profiles_terraform() -> str:
    """The profile table's profiles per model, for Terraform's validation of
    gke_gpu_node_pools.mig_partition_sizes against its mig_gpu_model."""
    width = max(len(name) for name in MIG_MODEL_PROFILES) + 2
    rows = [
        f"    {json.dumps(name):<{width}} = [{', '.join(json.dumps(p) for p in profiles)}]"
        for name, profiles in MIG_MODEL_PROFILES.items()
    ]
    return "\n".join(
        [
            f"# Generated from castslice/backends/mig/profiles.py by `{COMMAND}`; do not edit.",
            "# The MIG profiles of each GPU model: gke_gpu_node_pools.mig_partition_sizes must be",
            "# profiles of its mig_gpu_model, as CASTSLICE_MIG_PROFILES must be of",
            "# CASTSLICE_MIG_GPU_MODELS.",
            "locals {",
            "  mig_profiles = {",
            *rows,
            "  }",
            "}",
            "",
        ]
    )


GENERATORS: dict[Path, Callable[[str], str]] = {
    SCHEMA: updated_schema,
    VALUES: updated_values,
    CHECK_TEMPLATE: lambda _text: check_template(),
    CONFIGURATION: updated_configuration,
    MIG_PROFILES_TF: lambda _text: mig_profiles_terraform(),
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
