"""The chart refuses what the application refuses: every setting of the settings table at
each bound (the least and the most it may be, and one past each) and every rule between
settings, rendered by the real helm and read by `load_config` from the same values as
the chart's Deployment would have them; the two verdicts agree on every case. The files
generated from the table are current.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

from castslice.cli import main as castslice_main
from castslice.environment import choices, load_config
from castslice.render import chart_and_docs as generated
from castslice.settings.config import ConfigError
from castslice.settings.table import (
    MAX_SLICE_RATIO,
    SETTINGS,
    Kind,
    Setting,
    chart_value,
    environment_text,
    setting,
    upper_bound,
)
from tests.helm import CHART, Objects, installed_objects, run_helm, template_args, values_file

from .variants import container_environment_with_secrets, only

DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
RATIO = setting(MAX_SLICE_RATIO).default
assert isinstance(RATIO, int)


def nested(path: str, value: object) -> dict[str, Any]:
    """{"a": {"b": value}} for the value path "a.b"."""
    *parents, name = path.split(".")
    out: dict[str, Any] = {name: value}
    for parent in reversed(parents):
        out = {parent: out}
    return out


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` over `base`, maps merged key by key."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = merged(base[key], value)
        else:
            out[key] = value
    return out


def helm_values(user: Mapping[str, Any], defaults: Mapping[str, Any] = DEFAULTS) -> dict[str, Any]:
    """Helm's merge of user values into the chart's defaults: a null deletes the default."""
    out = dict(defaults)
    for key, value in user.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(defaults.get(key), dict):
            out[key] = helm_values(value, defaults[key])
        else:
            out[key] = value
    return out


def lookup(values: Mapping[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def environment_of(values: Mapping[str, Any]) -> dict[str, str]:
    """The CASTSLICE_* environment the chart gives the container for `values`, from the
    table; checked against the chart's own rendering on every case the chart renders."""
    full = helm_values(values)
    environment = {}
    for entry in SETTINGS:
        if not entry.in_environment or entry.value is None:
            continue
        value = lookup(full, entry.value)
        # The port is the chart's only setting passed on a condition: metrics on.
        if entry.variable == "CASTSLICE_METRICS_PORT" and not lookup(full, "metrics.enabled"):
            continue
        if isinstance(value, dict):
            # Go templates range over a map in the order of its keys.
            value = dict(sorted(value.items()))
        # The chart writes no variable for an empty path token or map of names.
        empty = value == {"PATH_TOKEN": "", "PRODUCT_NAMES": {}}.get(entry.kind.name)
        if value is not None and not empty:
            environment[entry.variable] = environment_text(value)
    return environment


def bounds_of(entry: Setting) -> list[tuple[str, object]]:
    """(label, value) at the bounds of one setting: the least and the most, one past each."""
    assert entry.value is not None
    low = entry.minimum
    high = 0
    if entry.maximum is not None:
        high = RATIO if entry.maximum == MAX_SLICE_RATIO else upper_bound(entry)
    kind = entry.kind
    if kind is Kind.COUNT:
        return [(f"{n}", n) for n in (low - 1, low, high, high + 1)]
    if kind is Kind.COUNTS:
        counts = [[low - 1], [low], [high], [high + 1], [low, low], [low, high]]
        return [(json.dumps(c), c) for c in counts] + [("[]", [])]
    if kind is Kind.PRESETS:
        cases: list[tuple[str, object]] = [(f"dev={n}", {"dev": n}) for n in (0, 1, high, high + 1)]
        every_null = dict.fromkeys(entry.default, None)  # type: ignore[arg-type]
        return [*cases, ("all null", every_null), ("a=b", {"a=b": 1}), ("new", {"llm": 8})]
    if kind is Kind.MEMORY:
        return [
            (text, text)
            for text in ("0Mi", "1Mi", "1024Ti", "1025Ti", "1048576Gi", "1048577Gi",
                         "1073741824Mi", "1073741825Mi", "080Gi", "80G")
        ]  # fmt: skip
    if kind is Kind.RESOURCE:
        texts = ["example.com/gpu", "gpu", "kubernetes.io/gpu", "x.kubernetes.io/gpu",
                 "example.com/" + "g" * 63, "example.com/" + "g" * 64,
                 "a" * 253 + "/gpu", "a" * 254 + "/gpu", "Example.com/gpu"]  # fmt: skip
        return [(_label(text), text) for text in texts]
    if kind is Kind.CHOICE:
        return [(name, name) for name in choices(entry)] + [("bad", "nope")]
    if kind is Kind.CHOICES:
        names = list(choices(entry))
        lists = [names[:1], names, names[-1:], [names[0], names[0]], ["nope"], []]
        return [(_label(json.dumps(chosen)), chosen) for chosen in lists]
    if kind is Kind.PRODUCT_NAMES:
        named = [
            {"H200": ["NVIDIA H200 NVL"]},
            {"H200": ["NVIDIA H200 NVL", "NVIDIA-H200-NVL"], "H100-80GB": ["NVIDIA H100 PCIe"]},
            {"H200": ["NVIDIA H200 NVL"], "H100-NVL": ["NVIDIA H200 NVL"]},
            {"h200": ["NVIDIA H200 NVL"]},
            {"H200": []},
            {"H200": ["a,b"]},
            {"H200": ["  "]},
            {"H200": ["x", "x"]},
            {},
        ]
        return [(_label(json.dumps(n)), n) for n in named]
    if kind is Kind.PATH_TOKEN:
        return [(f"{n} characters", "t" * n) for n in (15, 16, 200)] + [("slash", "a/" * 10)]
    if kind is Kind.BOOLEAN:
        return [("true", True), ("false", False)]
    if kind is Kind.DNS_SUBDOMAIN:
        texts = ["gpu.example.com", "a" * 253, "a" * 254, "GPU.example.com", "gpu_x"]
        return [(_label(text), text) for text in texts]
    if kind is Kind.CAPACITY:
        texts = ["shares", "s" * 32, "s" * 33, "example.com/shares", "9shares"]
        return [(_label(text), text) for text in texts]
    if kind is Kind.NAMESPACES:
        texts = [["research"], ["a" * 63], ["a" * 64], ["Research"]]
        return [(_label(json.dumps(t)), t) for t in texts]
    raise AssertionError(f"{entry.variable}: no bounds for a {kind.value}")


def _label(text: str) -> str:
    return text if len(text) < 24 else f"{text[:12]}... ({len(text)} characters)"


# What a value needs beside it for the application to read it at all.
CONTEXT = {
    "metrics.port": {"metrics": {"enabled": True}},
    "claimTemplates.namespaces": {"backend": "dra"},
    "schedulerName": {"backend": "dra"},
}
# Everything CASTSLICE_MAX_SLICE_RATIO bounds, at 1: the ratio's own least value can pass.
ALL_AT_ONE = {
    "slicesPerGpu": 1,
    "defaultSlices": 1,
    "presets": {"training": 1, "inference": 1, "batch": 1, "dev": 1},
}


def cases() -> Iterator[tuple[str, dict[str, Any]]]:
    for entry in SETTINGS:
        if entry.value is None:
            continue
        for label, value in bounds_of(entry):
            values = merged(CONTEXT.get(entry.value, {}), nested(entry.value, value))
            yield f"{entry.value}={label}", values
            if entry.variable == MAX_SLICE_RATIO:
                yield f"{entry.value}={label} (the rest at 1)", merged(ALL_AT_ONE, values)
    # The rules between settings, on both sides of each.
    for name in ("slicesPerGpu", "defaultSlices"):
        yield f"{name} above maxSliceRatio", {name: 9, "maxSliceRatio": 8, **_presets_at(8)}
        yield f"{name} at maxSliceRatio", {name: 8, "maxSliceRatio": 8, **_presets_at(8)}
    yield "maxSliceRatio below a default preset", {"maxSliceRatio": 3, "slicesPerGpu": 2}
    yield "presets at maxSliceRatio", {"maxSliceRatio": 4}
    # The profiles offered belong to the models listed: H200 nodes offer no 1g.10gb.
    h200 = {"gpuModels": ["H200"], "profiles": ["1g.10gb", "3g.40gb"]}
    yield "mig.profiles of no model in mig.gpuModels", {"mig": h200}
    yield (
        "mig.profiles of one of mig.gpuModels each",
        {"mig": {"gpuModels": ["H200", "A100-80GB"], "profiles": ["1g.10gb", "1g.18gb"]}},
    )
    yield "the issue's six at once", {"slicesPerGpu": 2000}
    yield "sharedResource equal to gpuResource", {"sharedResource": "nvidia.com/gpu"}
    yield (
        "sharedResource equal to a changed gpuResource",
        {
            "sharedResource": "example.com/gpu",
            "gpuResource": "example.com/gpu",
        },
    )
    for backend in choices(setting("CASTSLICE_BACKEND")):
        # Only a backend whose shared GPUs no other scheduler can allocate takes one.
        yield f"{backend}: schedulerName", {"backend": backend, "schedulerName": "second"}
    for backend in choices(setting("CASTSLICE_BACKEND")):
        # Unset, the shared resource is the backend's default, which gpuResource may equal.
        yield (
            f"{backend}: gpuResource nvidia.com/gpu-shared",
            {
                "backend": backend,
                "gpuResource": "nvidia.com/gpu-shared",
            },
        )


def _presets_at(most: int) -> dict[str, Any]:
    return {"presets": {"training": most, "inference": 2, "batch": 2, "dev": 1}}


CASES = dict(cases())


def application_verdict(values: Mapping[str, Any], environment: Mapping[str, str]) -> str | None:
    """What the application says of these settings: None (accepted) or its refusal."""
    try:
        load_config(environment)
    except ConfigError as error:
        return str(error)
    full = helm_values(values)
    claim_templates = full["claimTemplates"]
    # No namespace or no count: the chart renders no template, nor is there one to render.
    if full["backend"] != "dra" or not claim_templates["namespaces"]:
        return None
    # The claim templates are what `castslice claim-templates` renders for them.
    args = ["claim-templates"]
    for namespace in full["claimTemplates"]["namespaces"]:
        args += ["-n", namespace]
    errors = io.StringIO()
    with (
        mock.patch.dict(os.environ, environment, clear=True),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(errors),
    ):
        status = castslice_main(args)
    return None if status == 0 else errors.getvalue()


@pytest.fixture(scope="module")
def chart_verdicts(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each case rendered once by `helm template`, several at a time: its objects, or its
    refusal (standard error)."""
    root = tmp_path_factory.mktemp("settings")

    def render(item: tuple[int, dict[str, Any]]) -> Objects | str:
        number, values = item
        directory = root / str(number)
        directory.mkdir()
        result = run_helm(helm, *template_args(values_file(directory, values)), check=False)
        if result.returncode != 0:
            return result.stderr
        return installed_objects(result.stdout)

    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(render, enumerate(CASES.values())))
    return dict(zip(CASES, outcomes, strict=True))


@pytest.mark.parametrize("case", CASES)
def test_the_chart_refuses_what_the_application_refuses(
    chart_verdicts: dict[str, Any], case: str
) -> None:
    values = CASES[case]
    outcome = chart_verdicts[case]
    if isinstance(outcome, str):
        refusal = application_verdict(values, environment_of(values))
        assert refusal is not None, f"the chart refused what the application accepts:\n{outcome}"
        # The refusal names the value the user wrote.
        assert any(_names(outcome, path) for path in _paths(values)), outcome
        return
    (container,) = only(outcome, "Deployment")["spec"]["template"]["spec"]["containers"]
    environment = container_environment_with_secrets(outcome, container)
    del environment["CASTSLICE_POLICY_FILE"]
    assert environment == environment_of(values)
    refusal = application_verdict(values, environment)
    assert refusal is None, f"the chart installs what the application refuses: {refusal}"


def _paths(values: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}{key}"
        yield path
        if isinstance(value, dict):
            yield from _paths(value, f"{path}.")


def _names(refusal: str, path: str) -> bool:
    """The schema names a value by its JSON pointer, the generated check by its path."""
    pointer = "/" + path.replace(".", "/")
    # A bad property name is reported at an odd place, but quoted.
    quoted = f"'{path.rpartition('.')[2]}'"
    return (
        f"at '{pointer}" in refusal
        or quoted in refusal
        or re.search(rf"(^|\s){re.escape(path)}\b", refusal)
    )


def test_every_setting_of_the_chart_and_every_rule_has_cases() -> None:
    named = {case.partition("=")[0] for case in CASES}
    assert {entry.value for entry in SETTINGS if entry.value is not None} <= named
    rules = [
        e
        for e in SETTINGS
        if isinstance(e.maximum, str) or e.differs_from is not None or e.backend_refusal
    ]
    for entry in rules:
        assert any(chart_value(entry.variable) in case and " " in case for case in CASES)
    # Both verdicts occur: a test of one side only would prove nothing.
    assert len(CASES) > 100


@pytest.mark.parametrize("path", list(generated.GENERATORS), ids=str)
def test_the_generated_file_is_current(path: Path) -> None:
    current, fresh = generated.generated_files()[path]
    assert current == fresh, f"{path} is stale: run `{generated.COMMAND}`"


def test_the_generator_notices_a_stale_file(tmp_path: Path) -> None:
    for path in generated.GENERATORS:
        copy = tmp_path / path
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text((generated.ROOT / path).read_text())
    schema = tmp_path / generated.SCHEMA
    schema.write_text(schema.read_text().replace('"maximum": 1000000', '"maximum": 2000000'))
    stale = [p for p, (now, new) in generated.generated_files(tmp_path).items() if now != new]
    assert stale == [generated.SCHEMA]


def test_the_schema_names_the_rule_a_value_breaks(chart_verdicts: dict[str, Any]) -> None:
    """A value the schema refuses is answered with the rule, as the application names the
    range, never with "'anyOf' failed" alone."""
    refusals = [outcome for outcome in chart_verdicts.values() if isinstance(outcome, str)]
    assert refusals
    assert not [refusal for refusal in refusals if "'anyOf' failed" in refusal]
    bound = chart_verdicts["mig.timeSharedClients=49"]
    assert "at '/mig/timeSharedClients': maximum: got 49, want 48" in bound
