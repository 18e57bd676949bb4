"""Slice resolution: annotations in, a slice decision out."""

from __future__ import annotations

import pytest

from castslice.decision.slices import (
    MAX_WARNING_LENGTH,
    SliceDecision,
    is_mirror_pod,
    is_opted_in,
    resolve_slices,
    shorten,
)
from castslice.settings.config import Config
from tests.factories import opted_in

CONFIG = Config()

RATIO = "castops.io/slice-ratio"
TYPE = "castops.io/workload-type"


@pytest.mark.parametrize(
    ("annotations", "slices", "source"),
    [
        ({}, 1, "default"),
        ({TYPE: "training"}, 4, "workload-type"),
        ({TYPE: "inference"}, 2, "workload-type"),
        ({TYPE: "batch"}, 2, "workload-type"),
        ({TYPE: "dev"}, 1, "workload-type"),
        ({RATIO: "8"}, 8, "slice-ratio"),
        ({RATIO: "1"}, 1, "slice-ratio"),
        ({RATIO: "1000"}, 1000, "slice-ratio"),
        ({RATIO: "08"}, 8, "slice-ratio"),
        ({RATIO: "0000000000000000000000000000007"}, 7, "slice-ratio"),
        # The explicit ratio wins over the preset.
        ({RATIO: "3", TYPE: "training"}, 3, "slice-ratio"),
        ({RATIO: "3", TYPE: "gaming"}, 3, "slice-ratio"),
    ],
)
def test_resolution_order(annotations: dict, slices: int, source: str) -> None:
    assert resolve_slices(opted_in(**annotations), CONFIG) == SliceDecision(slices, source)


@pytest.mark.parametrize(
    "ratio",
    [
        "0",
        "-2",
        "+2",
        " 3",
        "3 ",
        "1.5",
        "abc",
        "",
        "1001",
        "99999999999999999999",
        "٣",
        "３",
        "1e3",
        "0x10",
        "1_0",
        "00",
    ],
)
def test_invalid_ratio_falls_back_to_workload_type_with_a_warning(ratio: str) -> None:
    decision = resolve_slices(opted_in(**{RATIO: ratio, TYPE: "training"}), CONFIG)
    assert (decision.slices, decision.source) == (4, "workload-type")
    (warning,) = decision.warnings
    assert warning.startswith(f"{RATIO}={shorten(ratio)} ignored")
    assert "using 4 slices from workload-type" in warning


def test_invalid_ratio_without_type_falls_back_to_default() -> None:
    decision = resolve_slices(opted_in(**{RATIO: "abc"}), CONFIG)
    assert (decision.slices, decision.source) == (1, "default")
    assert decision.warnings == (
        'castops.io/slice-ratio="abc" ignored (want a whole number 1-1000); '
        "using the default of 1 slice",
    )


@pytest.mark.parametrize("workload_type", ["Training", "TRAINING", "gaming", "", " dev", "dev "])
def test_unknown_workload_type_warns_and_uses_default(workload_type: str) -> None:
    decision = resolve_slices(opted_in(**{TYPE: workload_type}), CONFIG)
    assert (decision.slices, decision.source) == (1, "default")
    assert decision.warnings == (
        f"{TYPE}={shorten(workload_type)} ignored (want training|inference|batch|dev); "
        "using the default of 1 slice",
    )


def test_both_invalid_gives_two_warnings_and_default() -> None:
    decision = resolve_slices(opted_in(**{RATIO: "0", TYPE: "gpu"}), CONFIG)
    assert (decision.slices, decision.source) == (1, "default")
    assert [w.split("=")[0] for w in decision.warnings] == [RATIO, TYPE]


def test_configured_bound_default_and_presets() -> None:
    config = Config(presets={"llm": 8}, default_slices=3, max_slice_ratio=16)
    assert resolve_slices({RATIO: "16"}, config).slices == 16
    assert (
        resolve_slices({RATIO: "17"}, config)
        .warnings[0]
        .startswith(f'{RATIO}="17" ignored (want a whole number 1-16)')
    )
    assert resolve_slices({TYPE: "llm"}, config).slices == 8
    assert resolve_slices({TYPE: "training"}, config).slices == 3
    assert resolve_slices({}, config).slices == 3


@pytest.mark.parametrize(
    "value",
    [
        "x" * 500,
        "line\nbreak",
        "tab\there",
        "\x00\x07bell",
        "emoji \U0001f680",
        'quote"d',
        "\u202eright-to-left",
        "é" * 200,
    ],
)
def test_warnings_are_short_printable_single_lines(value: str) -> None:
    config = Config(
        presets={f"type-{i}": 999_999 for i in range(1, 60)},
        default_slices=999_999,
        max_slice_ratio=1_000_000,
    )
    for chosen in ({RATIO: value}, {TYPE: value}, {RATIO: value, TYPE: value}):
        warnings = resolve_slices(chosen, config).warnings
        assert warnings
        for warning in warnings:
            assert len(warning) <= MAX_WARNING_LENGTH
            assert warning.isascii() and warning.isprintable()
            # What was used instead is never clipped away.
            assert warning.endswith("; using the default of 999999 slices")


def test_long_values_are_shortened_in_the_warning() -> None:
    (warning,) = resolve_slices({RATIO: "9" * 50}, CONFIG).warnings
    assert warning.startswith(f'{RATIO}="{"9" * 17}..." ignored')


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({"castops.io/optimize": "true"}, True),
        ({"castops.io/optimize": "True"}, False),
        ({"castops.io/optimize": "yes"}, False),
        ({"castops.io/optimize": "1"}, False),
        ({"castops.io/optimize": ""}, False),
        ({"castops.io/optimize": " true"}, False),
        ({"castops.io/optimise": "true"}, False),
        ({}, False),
    ],
)
def test_only_exactly_true_opts_in(annotations: dict, expected: bool) -> None:
    assert is_opted_in(annotations) is expected


def test_mirror_pods_are_recognised_by_annotation() -> None:
    assert is_mirror_pod({"kubernetes.io/config.mirror": "abc"})
    assert not is_mirror_pod(opted_in())
