"""The ResourceClaimTemplates a claiming backend's Pods use: which slice counts get one,
and the object every template is. The webhook names a Pod's template from here; `castslice
claim-templates` and the chart make them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from castslice.backends.placer import whole_gpus
from castslice.contract import Manifest
from castslice.settings.config import Config

# Every template carries it: doctor and `kubectl get -l` find them by it.
PART_OF = ("app.kubernetes.io/part-of", "castslice")


class TemplateCounts(NamedTuple):
    """The slice counts to render, and what a user must do when some reachable ones are not."""

    counts: tuple[int, ...]
    note: str | None = None


def template_slices(config: Config, slices: int) -> int:
    """The slice count whose template serves `slices`: whole devices round up to a multiple of S.

    `slice-ratio: "5"` and `"8"` both get two whole devices, so one template serves both.
    """
    per_gpu = config.slices_per_gpu
    return slices if slices < per_gpu else whole_gpus(config, slices) * per_gpu


def configured_counts(config: Config) -> set[int]:
    """The counts the presets, the enrolment policy's rules and the default give."""
    counts = {config.default_slices, *config.presets.values()}
    if config.policy is not None:
        counts |= {rule.rule_slices for rule in config.policy.rules if rule.rule_slices}
    return {template_slices(config, count) for count in counts}


def enrolled_namespaces(config: Config) -> tuple[str, ...]:
    """The namespaces an enrolling rule of the policy names exactly, in order, each once.

    A glob (`ml-*`) names no namespace until one exists: those get templates by name.
    """
    if config.policy is None:
        return ()
    names = (
        pattern.text
        for rule in config.policy.rules
        if rule.optimize
        for pattern in rule.namespaces or ()
        if pattern.regex is None
    )
    return tuple(dict.fromkeys(names))


def resource_claim_template(
    name: str, spec: Mapping[str, Any], namespace: str | None = None
) -> Manifest:
    """A ResourceClaimTemplate CastSlice ships (None: no namespace, `kubectl apply -n` sets it)."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = {PART_OF[0]: PART_OF[1]}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": metadata,
        "spec": spec,
    }
