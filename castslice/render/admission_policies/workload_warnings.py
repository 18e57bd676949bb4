"""CEL for workload warnings: what a Deployment, Job, CronJob... will do to its Pods.

Mirrors castslice.decision.workloads.check_workload: the Pod the template would produce
goes through the same decision as a Pod (the same variables, rooted at the
template instead of `object`), its warnings are passed on, and the warnings
about the workload itself (misplaced annotations, skipped templates, no GPU)
are added. Workloads are never mutated.
"""

from __future__ import annotations

from castslice.contract import paths
from castslice.contract.definitions import (
    ANNOTATION_PREFIX,
    APPLIED,
    MIRROR,
    OPTIMIZE,
    USER_ANNOTATIONS,
    WORKLOAD_KINDS,
    TemplateLocation,
    WorkloadKind,
)
from castslice.decision.slices import MAX_WARNING_LENGTH
from castslice.decision.slices import clip as clip_text
from castslice.render import cel
from castslice.render.admission_policies import messages
from castslice.render.admission_policies.mutation import asked_quantity, gpu_containers
from castslice.render.admission_policies.placement import PlacementCel
from castslice.render.admission_policies.variables import Variables, placed_by_hand, slice_variables
from castslice.render.cel import Expr, literal, string, variable
from castslice.render.selection import (
    namespace_selector,
    workload_match_conditions,
    workload_rules,
)
from castslice.render.webhook_configuration import WORKLOAD_WEBHOOK
from castslice.settings.config import Config

NAME = WORKLOAD_WEBHOOK
POD = "variables.pod"


def shown_key(key: Expr) -> Expr:
    """CEL for workloads._key: CastSlice's own keys as they are, any other shortened."""
    return cel.if_else(f"{key} in {literal(list(USER_ANNOTATIONS))}", key, messages.shorten(key))


def our_keys(annotations: Expr) -> Expr:
    """CEL list of the `castops.io/` keys of a map, in the order the webhook reads them.

    The API server sends objects with map keys sorted; CEL's map order is not defined.
    """
    return f"{annotations}.filter(key, key.startsWith({string(ANNOTATION_PREFIX)})).sort()"


def rendered_kinds() -> tuple[WorkloadKind, ...]:
    """The workload kinds policy mode warns about: Kubernetes' own with one Pod template at a
    fixed path. Kinds whose templates sit in maps or lists, and operators' resources (whose
    templates come in shapes of their own), are left to the webhook."""
    return tuple(
        kind
        for kind in WORKLOAD_KINDS
        if not kind.custom_resource
        and len(kind.templates) == 1
        and not kind.templates[0].has_wildcards
    )


def template_groups() -> list[tuple[TemplateLocation, list[str]]]:
    """Each template location of the rendered kinds with the kinds that have it; the first
    kind's location first (the fallback the CEL chooses when no other kind matches)."""
    groups: dict[TemplateLocation, list[str]] = {}
    for kind in rendered_kinds():
        groups.setdefault(kind.templates[0], []).append(kind.kind)
    return list(groups.items())


def _is_kind(kinds: list[str]) -> Expr:
    if len(kinds) == 1:
        return f"request.kind.kind == {string(kinds[0])}"
    return f"request.kind.kind in {literal(kinds)}"


def _by_kind(choices: list[tuple[list[str], Expr]]) -> Expr:
    """CEL choosing the expression of the request's kind; the first choice is the fallback."""
    (_, chosen), *others = choices
    for kinds, expression in reversed(others):
        chosen = cel.if_else(_is_kind(kinds), expression, chosen)
    return chosen


def _optional_path(dotted: str) -> Expr:
    """`object.?a.?b` for the template path `a.b`, read by the one path parser; policy mode
    renders fixed paths only (rendered_kinds leaves out those with wildcards)."""
    segments = paths.parse(dotted)
    if paths.has_wildcards(segments):
        raise paths.PathError(f"template path {dotted!r}: policy mode renders no wildcards")
    return "object" + "".join(f".?{segment.name}" for segment in segments)


def workload_variables(config: Config, placement: PlacementCel) -> Variables:
    groups = template_groups()
    template = _by_kind([(kinds, _optional_path(location.path)) for location, kinds in groups])
    annotations = variable("annotations")
    optimize = f"{annotations}[?{string(OPTIMIZE)}]"
    gpu = variable("gpuContainers")
    hand_placed = variable("handPlaced")
    asked = asked_quantity(config.gpu_resource)
    less_than_asked_warning = messages.less_than_asked_warning(
        "found.name", asked, config.gpu_resource
    )
    if config.policy is None:
        enrolled = f"{optimize}.orValue('') == {string('true')}"
    else:
        enrolled = (
            f"{optimize}.orValue('') != {string('false')} && "
            f"({optimize}.orValue('') == {string('true')} || {variable('enrollingRule')} >= 0)"
        )
    return [
        ("hasTemplate", f"{template}.hasValue()"),
        ("pod", f"{template}.orValue({{}})"),
        *slice_variables(config, root=POD),
        *placement.variables(),
        ("fallback", messages.fallback(config)),
        ("gpuContainers", gpu_containers(config, root=POD)),
        ("handPlaced", placed_by_hand(placement.placement_keys, POD)),
        ("enrolled", enrolled),
        (
            "skipped",
            f"!{variable('enrolled')} || {string(MIRROR)} in {annotations} || "
            f"{string(APPLIED)} in {annotations}",
        ),
        (
            # What the Pod review of the template warns about (admission.Admission.review).
            "podWarnings",
            f"{messages.annotation_warnings(config)} + "
            + cel.if_else(
                f"size({gpu}) == 0",
                "[]",
                cel.if_else(
                    f"size({hand_placed}) > 0",
                    f"[{messages.hand_placed_warning(hand_placed + '[0]')}]",
                    f"{gpu}.filter(found, {messages.less_than_asked(placement, asked)})"
                    f".map(found, {less_than_asked_warning}) + {placement.notes()}",
                ),
            ),
        ),
        ("misplaced", _misplaced(groups)),
        ("skippedWarnings", _skipped()),
        (
            "warnings",
            cel.if_else(
                f"!{variable('hasTemplate')}",
                "[]",
                f"({variable('misplaced')} + "
                + cel.if_else(
                    variable("skipped"),
                    variable("skippedWarnings"),
                    f"{variable('podWarnings')} + "
                    + cel.if_else(f"size({gpu}) == 0", f"[{string(_no_gpu(config))}]", "[]"),
                )
                + f").map(w, {cel.clip('w', MAX_WARNING_LENGTH)})",
            ),
        ),
    ]


def _no_gpu(config: Config) -> str:
    return (
        f"the Pod template is opted in but no container asks for "
        f"{clip_text(config.gpu_resource, 40)}; there is nothing to slice"
    )


def _misplaced(groups: list[tuple[TemplateLocation, list[str]]]) -> Expr:
    """CEL list for workloads._misplaced: our annotations above the template never reach Pods."""
    template_annotations = variable("annotations")

    def ignored(metadata: Expr, where: Expr, destination: str) -> Expr:
        keys = our_keys(cel.optional_map(f"{metadata}.?annotations"))
        return (
            f"{keys}.filter(key, !(key in {template_annotations})).map(key, "
            f"{shown_key('key')} + {string(' on ')} + {where} + "
            f"{string(' is ignored; move it to ' + destination)})"
        )

    workload = f"{string('the ')} + request.kind.kind"

    def of_location(location: TemplateLocation) -> Expr:
        destination = location.annotations_path
        places = [ignored("object.?metadata", workload, destination)]
        places += [
            ignored(_optional_path(f"{path}.metadata"), string(name), destination)
            for name, path in location.between
        ]
        return " + ".join(places)

    return _by_kind([(kinds, of_location(location)) for location, kinds in groups])


def _skipped() -> Expr:
    """CEL list for workloads._skipped: why an annotated template's Pods stay unchanged."""
    annotations = variable("annotations")
    optimize = f"{annotations}[?{string(OPTIMIZE)}]"
    reason = cel.if_else(
        f"{string(MIRROR)} in {annotations}", string("mirror pod"), string("already applied")
    )
    not_true = string(' is not "true"; the Pods are not sliced')
    shown_value = messages.shorten(optimize + ".value()")
    is_set = string(" is set but " + OPTIMIZE)
    ours = our_keys(annotations)
    return cel.if_else(
        f"{optimize}.orValue('') == {string('true')}",
        f"[{string('castslice leaves the Pods of this template unchanged: ')} + {reason}]",
        cel.if_else(
            f"{optimize}.orValue('') == {string('false')}",
            "[]",
            cel.if_else(
                f"{optimize}.hasValue()",
                f"[{string(OPTIMIZE + '=')} + {shown_value} + {not_true}]",
                cel.if_else(
                    f"size({ours}) == 0",
                    "[]",
                    f"[{shown_key(ours + '[0]')} + {is_set} + {not_true}]",
                ),
            ),
        ),
    )


def match_resources() -> dict:
    return {
        "namespaceSelector": namespace_selector(),
        "matchPolicy": "Equivalent",
        "resourceRules": workload_rules(rendered_kinds()),
    }


def conditions() -> list[tuple[str, Expr]]:
    """The workload webhook's own matchConditions: only annotated workloads are reviewed."""
    return [(c["name"], c["expression"]) for c in workload_match_conditions(rendered_kinds())]
