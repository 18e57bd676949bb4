"""Slice resolution: a Pod's annotations in, a slice count out.

Pure functions on plain data; no HTTP, no AdmissionReview.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import NamedTuple

from castslice.contract.definitions import (
    GPU_MEMORY_BURST,
    MAX_WARNING_LENGTH,
    MIRROR,
    OPTIMIZE,
    SLICE_RATIO,
    WORKLOAD_TYPE,
)
from castslice.settings.config import Config
from castslice.settings.names import parse_bounded_int
from castslice.settings.rules import POLICY_SOURCE_PREFIX

_MAX_VALUE_LENGTH = 20

# "slice-ratio", "workload-type", "default", or "policy:<rule name>" when a rule of
# the enrolment policy gave the count.
SliceSource = str


class SliceDecision(NamedTuple):
    slices: int
    source: SliceSource
    warnings: tuple[str, ...] = ()


def is_opted_in(annotations: Mapping[str, str]) -> bool:
    return annotations.get(OPTIMIZE) == "true"


def is_mirror_pod(annotations: Mapping[str, str]) -> bool:
    # The kubelet owns mirror pods; the API server rejects changes to them.
    return MIRROR in annotations


def resolve_slices(
    annotations: Mapping[str, str], config: Config, fallback: SliceDecision | None = None
) -> SliceDecision:
    """Apply `slice-ratio` → `workload-type` → `fallback` (an enrolment rule's count) → the
    default, warning about each invalid value."""
    problems: list[tuple[str, str, str]] = []

    ratio = annotations.get(SLICE_RATIO)
    if ratio is not None:
        slices = parse_bounded_int(ratio, config.max_slice_ratio)
        if slices is not None:
            return SliceDecision(slices, "slice-ratio")
        problems.append((SLICE_RATIO, ratio, f"want a whole number 1-{config.max_slice_ratio}"))

    workload_type = annotations.get(WORKLOAD_TYPE)
    preset = config.presets.get(workload_type) if workload_type is not None else None
    if preset is not None:
        decision = SliceDecision(preset, "workload-type")
    else:
        decision = fallback or SliceDecision(config.default_slices, "default")
        if workload_type is not None:
            problems.append((WORKLOAD_TYPE, workload_type, known_types(config)))
    if not problems:
        return decision

    used = _describe(decision)
    warnings = tuple(_warning(key, value, why, used) for key, value, why in problems)
    return SliceDecision(decision.slices, decision.source, warnings)


def resolve_burst(
    annotations: Mapping[str, str], config: Config
) -> tuple[Fraction | None, tuple[str, ...]]:
    """The share of a GPU's memory `castops.io/gpu-memory-burst` lets a container take, in
    slices like `slice-ratio` (S slices are the whole GPU), or None; and the warning for a
    value that is no count."""
    value = annotations.get(GPU_MEMORY_BURST)
    if value is None:
        return None, ()
    slices = parse_bounded_int(value, config.max_slice_ratio)
    if slices is None:
        why = f"want a whole number of slices 1-{config.max_slice_ratio}"
        return None, (_warning(GPU_MEMORY_BURST, value, why, "no burst"),)
    return Fraction(slices, config.slices_per_gpu), ()


def _warning(key: str, value: str, why: str, fallback: str) -> str:
    # The annotation, the value and what was used always fit; only the reason is clipped.
    head, tail = f"{key}={shorten(value)} ignored (", f"); using {fallback}"
    return head + clip(why, MAX_WARNING_LENGTH - len(head) - len(tail)) + tail


def known_types(config: Config) -> str:
    if not config.presets:
        return "no workload types are configured"
    return "want " + "|".join(config.presets)


def _describe(decision: SliceDecision) -> str:
    unit = "slice" if decision.slices == 1 else "slices"
    if decision.source == "workload-type":
        return f"{decision.slices} {unit} from workload-type"
    if decision.source.startswith(POLICY_SOURCE_PREFIX):
        rule = decision.source.removeprefix(POLICY_SOURCE_PREFIX)
        return f"{decision.slices} {unit} from rule {shorten(rule)}"
    return f"the default of {decision.slices} {unit}"


def shorten(value: str) -> str:
    """A quoted, printable-ASCII, bounded rendering of an untrusted value."""
    rendered = ascii(value)[1:-1].replace('"', '\\"')
    return f'"{clip(rendered, _MAX_VALUE_LENGTH)}"'


def clip(text: str, limit: int = MAX_WARNING_LENGTH) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def share_text(gpus: Fraction) -> str:
    """A share of a GPU as messages write it: "1/4 of a GPU", "2 GPUs"."""
    if gpus.denominator == 1:
        return f"{gpus.numerator} GPU" + ("s" if gpus > 1 else "")
    return f"{gpus.numerator}/{gpus.denominator} of a GPU"
