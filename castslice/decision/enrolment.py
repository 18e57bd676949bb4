"""Enrolment: whether a Pod is opted in, by its own annotation or by the policy's rules.

Pure and cheap: the rules (castslice.settings.rules) were compiled once at start. The same
rules also become the registration's CEL (castslice.render.selection), so the function
and the API server decide alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from castslice.contract.definitions import OPTIMIZE
from castslice.decision.slices import SliceDecision
from castslice.settings.rules import Policy, Rule


class Enrolment(NamedTuple):
    """Whether a Pod is opted in, and the rule that decided (None: its annotation, or nothing)."""

    enrolled: bool
    rule: Rule | None = None
    reason: str | None = None


NOT_OPTED_IN = Enrolment(False, None, "not opted in")
OPTED_OUT = Enrolment(False, None, "opted out")
ANNOTATED = Enrolment(True)


def by_annotation(annotations: Mapping[str, str]) -> Enrolment:
    """The decision without a policy: only the Pod's own annotation counts."""
    optimize = annotations.get(OPTIMIZE)
    if optimize == "true":
        return ANNOTATED
    return OPTED_OUT if optimize == "false" else NOT_OPTED_IN


def decide(
    policy: Policy | None,
    annotations: Mapping[str, str],
    namespace: str,
    labels: Mapping[str, str],
) -> Enrolment:
    """Pod annotations win: "false" opts out, "true" opts in; otherwise the first matching rule.

    An opted-in Pod still takes the slice values of the first matching rule
    that enrols it, unless its own annotations override them.
    """
    if policy is None:
        return by_annotation(annotations)
    optimize = annotations.get(OPTIMIZE)
    if optimize == "false":
        return OPTED_OUT
    rule = policy.first_match(namespace, labels)
    if optimize == "true":
        return Enrolment(True, rule) if rule is not None and rule.optimize else ANNOTATED
    if rule is None:
        return NOT_OPTED_IN
    if not rule.optimize:
        return Enrolment(False, rule, "excluded by policy")
    return Enrolment(True, rule)


def rule_decision(rule: Rule | None) -> SliceDecision | None:
    """The slice count `rule` gives, for Pods whose own annotations give none."""
    if rule is None or rule.rule_slices is None:
        return None
    return SliceDecision(rule.rule_slices, rule.source)
