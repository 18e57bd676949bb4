"""CEL for the decision: the slice count from the annotations, then the backend's placement.

Mirrors castslice.decision.slices.resolve_slices and castslice.backends; the variables
defined here are shared by the mutating and the validating policy, so both
read the same answer.
"""

from __future__ import annotations

from castslice.contract.definitions import CONTAINER_LISTS, SLICE_RATIO, WORKLOAD_TYPE, json_string
from castslice.render import cel
from castslice.render.cel import Expr, literal, string, variable
from castslice.render.selection import namespace_matches
from castslice.settings.config import Config
from castslice.settings.rules import Policy, Requirement, Rule

# The Kubernetes field of a required node affinity.
REQUIRED_AFFINITY = "requiredDuringSchedulingIgnoredDuringExecution"

# (name, CEL expression) in the order the policy must declare them.
Variables = list[tuple[str, Expr]]


def annotation(key: str) -> Expr:
    """The Pod annotation `key` as an optional string."""
    return f"{variable('annotations')}[?{string(key)}]"


def ratio_pattern(max_slice_ratio: int) -> str:
    """RE2 pattern of what config.parse_bounded_int accepts below 10**len(str(max))."""
    digits = len(str(max_slice_ratio))
    return f"^0*[1-9][0-9]{{0,{digits - 1}}}$"


def slice_variables(config: Config, root: str = "object") -> Variables:
    """annotations (and labels, rule...), sliceRatio, presetSlices, slices, source, sourceJson.

    As resolve_slices: slice-ratio, then workload-type, then the count of the
    enrolment rule that enrolled the Pod, then the default. `root` is the Pod
    (or a workload's Pod template). `sliceRatio`, `presetSlices` and
    `ruleSlices` are 0 when they give nothing (no valid count is 0).
    """
    ratio = annotation(SLICE_RATIO)
    ratio_value = f"int({variable('annotations')}[{string(SLICE_RATIO)}])"
    presets = literal(dict(config.presets))
    slice_ratio, preset = variable("sliceRatio"), variable("presetSlices")
    counts = [(f"{slice_ratio} > 0", slice_ratio, "slice-ratio")]
    counts.append((f"{preset} > 0", preset, "workload-type"))
    found: Variables = [
        ("annotations", cel.optional_map(f"{root}.?metadata.?annotations")),
        (
            "sliceRatio",
            cel.if_else(
                cel.all_of(
                    [
                        f"{ratio}.orValue('').matches({string(ratio_pattern(config.max_slice_ratio))})",
                        f"{ratio_value} <= {config.max_slice_ratio}",
                    ]
                ),
                ratio_value,
                "0",
            ),
        ),
        ("presetSlices", f"{presets}[?{annotation(WORKLOAD_TYPE)}.orValue('')].orValue(0)"),
    ]
    if config.policy is not None:
        found += enrolment_variables(config.policy, root)
    slices = str(config.default_slices)
    source, source_json = string("default"), string(json_string("default"))
    if config.policy is not None:
        rules = config.policy.rules
        by_rule = f"[{variable('enrollingRule')}]"
        rule_source = literal([rule.source for rule in rules]) + by_rule
        rule_json = literal([json_string(rule.source) for rule in rules]) + by_rule
        rule_slices = variable("ruleSlices")
        slices = cel.if_else(f"{rule_slices} > 0", rule_slices, slices)
        source = cel.if_else(f"{rule_slices} > 0", rule_source, source)
        source_json = cel.if_else(f"{rule_slices} > 0", rule_json, source_json)
    for condition, count, name in reversed(counts):
        slices = cel.if_else(condition, count, slices)
        source = cel.if_else(condition, string(name), source)
        source_json = cel.if_else(condition, string(json_string(name)), source_json)
    return [*found, ("slices", slices), ("source", source), ("sourceJson", source_json)]


def enrolment_variables(policy: Policy, root: str) -> Variables:
    """labels, rule (the first matching rule's index, or -1), enrollingRule, ruleSlices.

    As enrolment.decide: `enrollingRule` is the first matching rule when it
    enrols (-1 otherwise); its count, if it gives one, is `ruleSlices`.
    """
    rule, enrolling = variable("rule"), variable("enrollingRule")
    first = "-1"
    for index, candidate in reversed(list(enumerate(policy.rules))):
        first = cel.if_else(rule_matches(candidate), str(index), first)
    enrols = literal([candidate.optimize for candidate in policy.rules])
    counts = literal([candidate.rule_slices or 0 for candidate in policy.rules])
    return [
        ("labels", cel.optional_map(f"{root}.?metadata.?labels")),
        ("rule", first),
        ("enrollingRule", cel.if_else(f"{rule} >= 0 && {enrols}[{rule}]", rule, "-1")),
        ("ruleSlices", cel.if_else(f"{enrolling} >= 0", f"{counts}[{enrolling}]", "0")),
    ]


def rule_matches(rule: Rule) -> Expr:
    """CEL: the Pod is in one of the rule's namespaces and its labels match the selector."""
    terms = []
    if rule.namespaces is not None:
        terms.append(namespace_matches(rule.namespaces))
    for requirement in rule.selector or ():
        terms.append(requirement_matches(requirement))
    return cel.all_of(terms) if terms else "true"


def requirement_matches(requirement: Requirement) -> Expr:
    """One label selector term over `variables.labels`, as Kubernetes evaluates it."""
    labels = variable("labels")
    key, operator, values = requirement
    present = f"{string(key)} in {labels}"
    if operator in ("In", "NotIn"):
        within = f"({present} && {labels}[{string(key)}] in {literal(list(values))})"
        return within if operator == "In" else f"!{within}"
    return present if operator == "Exists" else f"!({present})"


def gpu_requested(container: Expr, gpu: str) -> Expr:
    """CEL: `container` asks for the GPU resource (patch.gpu_containers): names it in its
    requests or limits with a count (the limit, else the request) other than zero."""
    resources = f"{container}.?resources"
    limits = cel.optional_map(resources + ".?limits")
    requests = cel.optional_map(resources + ".?requests")
    key = string(gpu)
    asked = cel.if_else(
        f"{key} in {limits}", f"string({limits}[{key}])", f"string({requests}[{key}])"
    )
    zero = cel.let("asked", asked, "isQuantity(asked) && sign(quantity(asked)) == 0")
    return cel.all_of([cel.any_of([f"{key} in {requests}", f"{key} in {limits}"]), f"!({zero})"])


def containers_of(kind: str, root: str = "object") -> Expr:
    """The Pod's containers of one kind, an empty list when the field is absent."""
    return f"{root}.?spec.?{kind}.orValue([])"


def any_gpu_container(gpu: str, root: str = "object") -> Expr:
    return cel.any_of(
        f"{containers_of(kind, root)}.exists(c, {gpu_requested('c', gpu)})"
        for kind in CONTAINER_LISTS
    )


def required_node_terms(root: str = "object") -> Expr:
    """CEL for patch.required_node_terms: the required node affinity terms, or []."""
    return (
        f"{root}.?spec.?affinity.?nodeAffinity.?{REQUIRED_AFFINITY}.?nodeSelectorTerms.orValue([])"
    )


def placed_by_hand(keys: tuple[str, ...], root: str = "object") -> Expr:
    """CEL list for admission._hand_placed: where the Pod already names a placement label.

    The first entry is what the warning says: a nodeSelector key, in the
    backend's order, else a key of a required node affinity term.
    """
    if not keys:
        return "[]"
    selector = cel.optional_map(f"{root}.?spec.?nodeSelector")
    in_selector = (
        f"{literal(list(keys))}.filter(k, k in {selector}).map(k, {string('nodeSelector ')} + k)"
    )
    in_affinity = (
        f"{required_node_terms(root)}.map(t, t.?matchExpressions.orValue([])"
        f".filter(e, e.?key.orValue('') in {literal(list(keys))})"
        f".map(e, {string('node affinity on ')} + e.key)).flatten()"
    )
    return f"{in_selector} + {in_affinity}"
