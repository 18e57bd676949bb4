"""The enrolment policy as data: ordered rules over namespaces and Pod labels, compiled once.

This is part of the configuration (castslice.settings.config holds a Policy); reading and
validating a policy document is castslice.settings.enrolment_policy, and deciding a Pod's
enrolment from these rules is castslice.decision.enrolment.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
OPERATORS: tuple[Operator, ...] = ("In", "NotIn", "Exists", "DoesNotExist")
# A rule's decisions are recorded as "policy:<rule name>" (the decision record's `source`).
POLICY_SOURCE_PREFIX = "policy:"


class Requirement(NamedTuple):
    """One term of a label selector; matchLabels entries become `In` with one value."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class NamespacePattern:
    """A namespace name, or a shell-style glob (`*`, `?`, `[a-c]`, `[!x]`) over names."""

    text: str
    # None for a plain name. Anchored at both ends, and the same text for Python's re and
    # for RE2 (CEL's matches()).
    regex: str | None


@dataclass(frozen=True)
class Rule:
    name: str
    # None: every namespace; an empty selector is also stored as None.
    namespaces: tuple[NamespacePattern, ...] | None
    selector: tuple[Requirement, ...] | None
    optimize: bool
    workload_type: str | None = None
    slices: int | None = None
    # The slice count the rule gives: `slices`, or the preset of `workloadType`.
    rule_slices: int | None = None
    # Compiled once: exact names in a set, every glob in one regular expression, the
    # selector's values in sets.
    _names: frozenset[str] = field(init=False, repr=False, compare=False)
    _globs: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _terms: tuple[tuple[str, str, frozenset[str]], ...] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        patterns = self.namespaces or ()
        globs = [p.regex for p in patterns if p.regex is not None]
        object.__setattr__(self, "_names", frozenset(p.text for p in patterns if p.regex is None))
        object.__setattr__(
            self, "_globs", re.compile("|".join(f"(?:{g})" for g in globs)) if globs else None
        )
        terms = tuple((t.key, t.operator, frozenset(t.values)) for t in self.selector or ())
        object.__setattr__(self, "_terms", terms)

    @property
    def source(self) -> str:
        """What the decision record, log line and audit annotation say decided."""
        return POLICY_SOURCE_PREFIX + self.name

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return self.matches_namespace(namespace) and self.selects(labels)

    def matches_namespace(self, namespace: str) -> bool:
        if self.namespaces is None or namespace in self._names:
            return True
        return self._globs is not None and self._globs.fullmatch(namespace) is not None

    def selects(self, labels: Mapping[str, str]) -> bool:
        """The label selector, as Kubernetes evaluates it (every term must hold)."""
        for key, operator, values in self._terms:
            if operator == "In":
                if labels.get(key) not in values:
                    return False
            elif operator == "NotIn":
                if labels.get(key) in values:
                    return False
            elif (key in labels) != (operator == "Exists"):
                return False
        return True


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]
    # The policy as compact JSON, as a registration records it (CASTSLICE_POLICY accepts it).
    document: str = field(default="", compare=False)
    _rules_in: Callable[[str], tuple[Rule, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # A cluster has a bounded set of namespaces; each is matched against the globs once.
        cached = functools.lru_cache(maxsize=4096)(self._rules_for)
        object.__setattr__(self, "_rules_in", cached)

    def first_match(self, namespace: str, labels: Mapping[str, str]) -> Rule | None:
        for rule in self._rules_in(namespace):
            if rule.selects(labels):
                return rule
        return None

    def _rules_for(self, namespace: str) -> tuple[Rule, ...]:
        """The rules whose namespaces include `namespace`, in order."""
        return tuple(rule for rule in self.rules if rule.matches_namespace(namespace))

    @property
    def enrols_anyone(self) -> bool:
        return any(rule.optimize for rule in self.rules)
