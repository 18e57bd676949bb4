"""Which objects the API server sends CastSlice: the registration's rules, namespace
exclusions and matchConditions (CEL), and the same selection as a Python predicate.

`pod_match_conditions` and `workload_match_conditions` are what the API server
evaluates; `sends_pod` and `sends_workload` decide the same in Python (property-tested
against the CEL), so `castslice preview` and policy mode select exactly what the
webhook would see. A matchCondition that errors makes the API server skip the
webhook, which must only happen by decision: every lookup is guarded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from castslice.contract import Manifest
from castslice.contract.definitions import (
    ANNOTATION_PREFIX,
    CONTAINER_LISTS,
    DEFAULT_NAMESPACE,
    MIRROR,
    OPTIMIZE,
    SYSTEM_NAMESPACES,
    WORKLOAD_KINDS,
    WorkloadKind,
    sites_at,
    workload_kind,
)
from castslice.contract.paths import EachItem, EachValue, Field, Segment
from castslice.render import cel
from castslice.settings.config import Config
from castslice.settings.enrolment_policy import glob_regex
from castslice.settings.rules import NamespacePattern, Policy, Requirement, Rule

# cel-go's default parser limit on one expression.
MAX_EXPRESSION_CODE_POINTS = 100_000

ANNOTATIONS = "object.metadata.annotations"
LABELS = "object.metadata.labels"
NAMESPACE = "request.namespace"


class RegistrationError(ValueError):
    """The registration cannot be generated as asked; the message says which input is wrong."""


# Rules and namespaces ------------------------------------------------------------------


def excluded_namespaces(own_namespace: str = DEFAULT_NAMESPACE) -> list[str]:
    """The namespaces nothing is ever sent from: the system's and CastSlice's own."""
    return list(dict.fromkeys([*SYSTEM_NAMESPACES, own_namespace]))


def namespace_selector(own_namespace: str = DEFAULT_NAMESPACE) -> Manifest:
    return {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": excluded_namespaces(own_namespace),
            }
        ]
    }


def pod_rules() -> list[Manifest]:
    """CREATE of core v1 Pods."""
    return [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "*",
        }
    ]


def workload_kinds(custom_resources: bool = False) -> tuple[WorkloadKind, ...]:
    """The workload kinds Kubernetes serves, and with `custom_resources` the operators' too."""
    return tuple(kind for kind in WORKLOAD_KINDS if custom_resources or not kind.custom_resource)


def workload_rules(kinds: Sequence[WorkloadKind] | None = None) -> list[Manifest]:
    """CREATE and UPDATE of `kinds` (by default, Kubernetes' own workload kinds), one rule an
    API group.

    An operator's group gets scope `*`: its kinds may be cluster-scoped (ClusterTrainingRuntime),
    and the API server accepts rules for groups it does not serve; they match once the
    operator's CRDs are installed.
    """
    groups: dict[tuple[str, bool], tuple[dict[str, None], dict[str, None]]] = {}
    for kind in workload_kinds() if kinds is None else kinds:
        versions, resources = groups.setdefault((kind.group, kind.custom_resource), ({}, {}))
        versions.update(dict.fromkeys(kind.versions))
        resources[kind.resource] = None
    return [
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": [group],
            "apiVersions": list(versions),
            "resources": list(resources),
            "scope": "*" if custom_resource else "Namespaced",
        }
        for (group, custom_resource), (versions, resources) in groups.items()
    ]


# The Pod webhook's matchConditions -------------------------------------------------


def pod_match_conditions(config: Config) -> list[Manifest]:
    """Only Pods that CastSlice would rewrite, or whose annotations ask for it, are sent.

    Without a policy (or with one that enrols no one) that is the annotated Pods;
    with one, also the unannotated GPU Pods its first matching rule enrols.
    Opted-out Pods (`castops.io/optimize: "false"`) and mirror Pods never are.
    """
    policy = config.policy
    if policy is None or not policy.enrols_anyone:
        conditions = [
            ("opted-in", opted_in()),
            ("not-a-mirror-pod", not_a_mirror_pod()),
        ]
    else:
        enrolled = cel.all_of(
            [requests_gpu(config.gpu_resource), policy_enrols(policy)], separator="\n"
        )
        conditions = [
            ("not-opted-out", not_opted_out()),
            ("opted-in-or-enrolled", cel.any_of([opted_in(), enrolled], separator="\n")),
            ("not-a-mirror-pod", not_a_mirror_pod()),
        ]
    return [condition(name, expression) for name, expression in conditions]


def condition(name: str, expression: str) -> Manifest:
    expression = cel.unwrap(expression)
    if len(expression) > MAX_EXPRESSION_CODE_POINTS:
        raise RegistrationError(
            f"the matchCondition {name} would be {len(expression)} characters, more than the "
            f"API server's {MAX_EXPRESSION_CODE_POINTS}; use fewer rules or globs"
        )
    return {"name": name, "expression": expression}


def opted_in() -> str:
    return cel.value_in(ANNOTATIONS, OPTIMIZE, ["true"])


def not_opted_out() -> str:
    return cel.negate(cel.value_in(ANNOTATIONS, OPTIMIZE, ["false"]))


def not_a_mirror_pod() -> str:
    return cel.lacks_key(ANNOTATIONS, MIRROR)


def requests_gpu(gpu: str) -> str:
    """Some container of any kind names `gpu` in its requests or limits."""
    resources = [f"c.resources.{field}" for field in ("requests", "limits")]
    names_it = cel.all_of(
        [
            "has(c.resources)",
            cel.any_of(cel.all_of([f"has({m})", f"{cel.string(gpu)} in {m}"]) for m in resources),
        ]
    )
    in_kinds = cel.any_of(
        (
            cel.all_of(
                [f"has(object.spec.{kind})", cel.exists(f"object.spec.{kind}", "c", names_it)]
            )
            for kind in CONTAINER_LISTS
        ),
        separator="\n",
    )
    return cel.all_of(["has(object.spec)", in_kinds])


def policy_enrols(policy: Policy) -> str:
    """Whether the first rule that matches the Pod enrols it (false when none matches).

    Consecutive rules with the same verdict form one group: `(a || b || rest)`
    for enrolling rules and `!(c || d) && rest` for excluding ones. Rules after
    the last enrolling one cannot enrol anyone and are left out.
    """
    groups: list[tuple[bool, list[Rule]]] = []
    for rule in policy.rules:
        if groups and groups[-1][0] == rule.optimize:
            groups[-1][1].append(rule)
        else:
            groups.append((rule.optimize, [rule]))
    expression = cel.FALSE
    for optimize, rules in reversed(groups):
        matches = [rule_matches(rule) for rule in rules]
        if optimize:
            expression = cel.any_of([*matches, expression], separator="\n")
        else:
            expression = cel.all_of([cel.negate(cel.any_of(matches)), expression], separator="\n")
    return expression


def rule_matches(rule: Rule) -> str:
    return cel.all_of(
        [
            cel.TRUE if rule.namespaces is None else namespace_matches(rule.namespaces),
            cel.TRUE if rule.selector is None else selector_matches(rule.selector),
        ]
    )


def namespace_matches(patterns: Sequence[NamespacePattern]) -> str:
    """`request.namespace` is one of the names, or matches one of the globs."""
    names = [pattern.text for pattern in patterns if pattern.regex is None]
    return cel.any_of(
        [
            cel.equals_any(NAMESPACE, names),
            *(glob_matches(NAMESPACE, pattern.text) for pattern in patterns if pattern.regex),
        ]
    )


def glob_matches(subject: str, glob: str) -> str:
    """A shell-style glob as CEL: startsWith/endsWith where a lone `*` allows, else a regex."""
    stem = glob.strip("*")
    if not any(char in stem for char in "*?["):
        if glob == "*" * len(glob):
            return cel.TRUE
        if glob.endswith("*") and not glob.startswith("*"):
            return cel.starts_with(subject, stem)
        if glob.startswith("*") and not glob.endswith("*"):
            return cel.ends_with(subject, stem)
    return cel.matches(subject, glob_regex(glob))


def selector_matches(requirements: Iterable[Requirement]) -> str:
    """A label selector over the Pod's labels, as Kubernetes evaluates it."""
    return cel.all_of(requirement_matches(requirement) for requirement in requirements)


def requirement_matches(requirement: Requirement) -> str:
    key, operator, values = requirement
    if operator == "In":
        return cel.value_in(LABELS, key, values)
    if operator == "NotIn":
        # As in Kubernetes, a Pod without the label is "not in" any set of values.
        return cel.negate(cel.value_in(LABELS, key, values))
    if operator == "Exists":
        return cel.has_key(LABELS, key)
    return cel.lacks_key(LABELS, key)


# The workload webhook's matchCondition -----------------------------------------------


def workload_match_conditions(kinds: Sequence[WorkloadKind] | None = None) -> list[Manifest]:
    return [condition("castslice-annotations", carries_castslice_annotations(kinds))]


def carries_castslice_annotations(kinds: Sequence[WorkloadKind] | None = None) -> str:
    """Any `castops.io/` annotation on the workload itself or on the Pods its templates create,
    at the template paths of `kinds` (by default, Kubernetes' own workload kinds).

    The built-in kinds' paths come first as one group (the condition policy mode uses); each
    operator's path not already in it is added after.
    """
    kinds = workload_kinds() if kinds is None else kinds
    # The object's own metadata is always there; a Pod template's may not be.
    own = [_annotated_at("object.metadata", (Field("annotations"),))]
    built_in = cel.any_of(
        dict.fromkeys([*own, *_template_terms(k for k in kinds if not k.custom_resource)]),
        separator="\n",
    )
    operators = _template_terms(k for k in kinds if k.custom_resource)
    return cel.any_of(
        [built_in, *(term for term in dict.fromkeys(operators) if term not in built_in)],
        separator="\n",
    )


def _template_terms(kinds: Iterable[WorkloadKind]) -> list[str]:
    return [
        _annotated_at("object", location.annotations_segments)
        for kind in kinds
        for location in kind.templates
    ]


def _annotated_at(base: str, segments: Sequence[Segment], depth: int = 0) -> str:
    """Some `castops.io/` annotation in the map at the template path `segments` below `base`.

    Every field is tested with has() before it is read, and each wildcard becomes an
    exists() over the map's keys or the list's items.
    """
    terms: list[str] = []
    current = base
    for index, segment in enumerate(segments):
        rest = segments[index + 1 :]
        terms.append(f"has({current}.{segment.name})")
        current = f"{current}.{segment.name}"
        variable = f"v{depth}"
        if isinstance(segment, EachValue):
            inner = _annotated_at(f"{current}[{variable}]", rest, depth + 1)
            return cel.all_of([*terms, cel.exists(current, variable, inner)])
        if isinstance(segment, EachItem):
            inner = _annotated_at(variable, rest, depth + 1)
            return cel.all_of([*terms, cel.exists(current, variable, inner)])
        assert isinstance(segment, Field)
    prefix = cel.string(ANNOTATION_PREFIX)
    return cel.all_of([*terms, cel.exists(current, "k", f"k.startsWith({prefix})")])


# The same selection in Python ----------------------------------------------------------


class Selection(NamedTuple):
    """Whether the API server sends an object to CastSlice, and why not when it does not."""

    sent: bool
    why_not: str | None = None


SENT = Selection(True)


def namespace_excluded(namespace: str, own_namespace: str = DEFAULT_NAMESPACE) -> str | None:
    """Why nothing in `namespace` is sent, or None when objects there can be."""
    if namespace in SYSTEM_NAMESPACES:
        return f"{namespace} is a system namespace"
    if namespace == own_namespace:
        return f"{namespace} is CastSlice's own namespace"
    return None


def sends_pod(
    config: Config,
    pod: Mapping[str, Any],
    namespace: str,
    own_namespace: str = DEFAULT_NAMESPACE,
) -> Selection:
    """Whether the registration sends the CREATE of `pod` in `namespace` (as
    pod_match_conditions and the namespaceSelector decide)."""
    excluded = namespace_excluded(namespace, own_namespace)
    if excluded:
        return Selection(False, excluded)
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if MIRROR in annotations:
        return Selection(False, "a mirror Pod")
    optimize = annotations.get(OPTIMIZE)
    policy = config.policy
    if policy is None or not policy.enrols_anyone:
        return SENT if optimize == "true" else Selection(False, f'{OPTIMIZE} is not "true"')
    if optimize == "false":
        return Selection(False, f'{OPTIMIZE} is "false"')
    if optimize == "true":
        return SENT
    rule = policy.first_match(namespace, metadata.get("labels") or {})
    if rule is None or not rule.optimize:
        return Selection(False, "not annotated, and no rule of the enrolment policy enrols it")
    if not names_gpu(pod.get("spec") or {}, config.gpu_resource):
        return Selection(False, f"not annotated, and no container names {config.gpu_resource}")
    return SENT


def names_gpu(spec: Mapping[str, Any], gpu: str) -> bool:
    """Whether some container of any kind names `gpu` in its requests or limits, as
    `requests_gpu` decides: by name, whatever the quantity (`0` included; the Pod decision
    leaves such a container as it is)."""
    for list_name in CONTAINER_LISTS:
        containers = spec.get(list_name)
        for container in containers if isinstance(containers, list) else ():
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for field in ("requests", "limits"):
                asked = resources.get(field)
                if isinstance(asked, Mapping) and gpu in asked:
                    return True
    return False


def sends_workload(
    workload: Mapping[str, Any],
    group: str,
    version: str,
    kind: str,
    namespace: str,
    own_namespace: str = DEFAULT_NAMESPACE,
) -> Selection:
    """Whether the registration sends the CREATE or UPDATE of `workload` (as
    workload_match_conditions and the namespaceSelector decide)."""
    row = workload_kind(group, version, kind)
    if row is None:
        return Selection(False, f"{kind} is not a workload CastSlice reviews")
    # The namespaceSelector never skips a cluster-scoped object.
    excluded = row.scope == "Namespaced" and namespace_excluded(namespace, own_namespace)
    if excluded:
        return Selection(False, excluded)
    # As the matchCondition does: every template path of every kind, whatever the object's kind.
    places = [(workload.get("metadata") or {}).get("annotations")]
    places += [
        location.shape.annotations(site.node)
        for row_kind in WORKLOAD_KINDS
        for location in row_kind.templates
        for site in sites_at(workload, location)
    ]
    for held in places:
        if isinstance(held, Mapping) and any(
            str(key).startswith(ANNOTATION_PREFIX) for key in held
        ):
            return SENT
    return Selection(False, f"no {ANNOTATION_PREFIX} annotation on it or its Pod template")
