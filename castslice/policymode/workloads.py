"""CEL for workload warnings: what a Deployment, Job, CronJob... will do to its Pods.

Mirrors castslice.workloads.check_workload: the Pod the template would produce
goes through the same decision as a Pod (the same variables, rooted at the
template instead of `object`), its warnings are passed on, and the warnings
about the workload itself (misplaced annotations, skipped templates, no GPU)
are added. Workloads are never mutated.
"""

from __future__ import annotations

from ..admission import APPLIED
from ..config import Config
from ..kube import WORKLOAD_TEMPLATES
from ..registration import (
    DEFAULT_NAMESPACE,
    namespace_selector,
    workload_rules,
    workload_webhook,
)
from ..slices import MAX_WARNING_LENGTH, MIRROR, OPTIMIZE, SLICE_RATIO, WORKLOAD_TYPE
from ..slices import clip as clip_text
from ..workloads import PREFIX
from . import expr, messages
from .decision import Variables, placed_by_hand, slice_variables
from .expr import Expr, literal, string, variable
from .mutation import asked_quantity, gpu_containers
from .placement import PlacementCel

NAME = "workloads.castslice.castops.io"
POD = "variables.pod"
_KNOWN_KEYS = (OPTIMIZE, WORKLOAD_TYPE, SLICE_RATIO)


def shown_key(key: Expr) -> Expr:
    """CEL for workloads._key: CastSlice's own keys as they are, any other shortened."""
    return expr.if_else(f"{key} in {literal(list(_KNOWN_KEYS))}", key, messages.shorten(key))


def our_keys(annotations: Expr) -> Expr:
    """CEL list of the `castops.io/` keys of a map, in the order the webhook reads them.

    The API server sends objects with map keys sorted; CEL's map order is not defined.
    """
    return f"{annotations}.filter(key, key.startsWith({string(PREFIX)})).sort()"


def template_paths() -> tuple[str, str]:
    """Where Deployments & co. and CronJobs keep their Pod template, as dotted paths."""
    paths = {".".join(path) for path in WORKLOAD_TEMPLATES.values()}
    cron = ".".join(WORKLOAD_TEMPLATES[("batch", "v1", "CronJob")])
    (other,) = paths - {cron}
    return other, cron


def workload_variables(config: Config, placement: PlacementCel) -> Variables:
    other, cron = template_paths()
    is_cron = f"request.kind.kind == {string('CronJob')}"
    template = expr.if_else(
        is_cron, "object.?" + cron.replace(".", ".?"), "object.?" + other.replace(".", ".?")
    )
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
            # What the Pod review of the template warns about (admission.PodAdmission.review).
            "podWarnings",
            f"{messages.annotation_warnings(config)} + "
            + expr.if_else(
                f"size({gpu}) == 0",
                "[]",
                expr.if_else(
                    f"size({hand_placed}) > 0",
                    f"[{messages.hand_placed_warning(hand_placed + '[0]')}]",
                    f"{gpu}.filter(found, {messages.less_than_asked(placement, asked)})"
                    f".map(found, {less_than_asked_warning})",
                ),
            ),
        ),
        ("misplaced", _misplaced(is_cron, other, cron)),
        ("skippedWarnings", _skipped()),
        (
            "warnings",
            expr.if_else(
                f"!{variable('hasTemplate')}",
                "[]",
                f"({variable('misplaced')} + "
                + expr.if_else(
                    variable("skipped"),
                    variable("skippedWarnings"),
                    f"{variable('podWarnings')} + "
                    + expr.if_else(f"size({gpu}) == 0", f"[{string(_no_gpu(config))}]", "[]"),
                )
                + f").map(w, {expr.clip('w', MAX_WARNING_LENGTH)})",
            ),
        ),
    ]


def _no_gpu(config: Config) -> str:
    return (
        f"the Pod template is opted in but no container asks for "
        f"{clip_text(config.gpu_resource, 40)}; there is nothing to slice"
    )


def _misplaced(is_cron: Expr, other: str, cron: str) -> Expr:
    """CEL list for workloads._misplaced: our annotations above the template never reach Pods."""
    template_annotations = variable("annotations")

    def ignored(metadata: Expr, where: Expr, destination: str) -> Expr:
        keys = our_keys(expr.optional_map(f"{metadata}.?annotations"))
        return (
            f"{keys}.filter(key, !(key in {template_annotations})).map(key, "
            f"{shown_key('key')} + {string(' on ')} + {where} + "
            f"{string(' is ignored; move it to ' + destination)})"
        )

    workload = f"{string('the ')} + request.kind.kind"
    return expr.if_else(
        is_cron,
        ignored("object.?metadata", workload, f"{cron}.metadata.annotations")
        + " + "
        + ignored(
            "object.?spec.?jobTemplate.?metadata",
            string("the jobTemplate"),
            f"{cron}.metadata.annotations",
        ),
        ignored("object.?metadata", workload, f"{other}.metadata.annotations"),
    )


def _skipped() -> Expr:
    """CEL list for workloads._skipped: why an annotated template's Pods stay unchanged."""
    annotations = variable("annotations")
    optimize = f"{annotations}[?{string(OPTIMIZE)}]"
    reason = expr.if_else(
        f"{string(MIRROR)} in {annotations}", string("mirror pod"), string("already applied")
    )
    not_true = string(' is not "true"; the Pods are not sliced')
    shown_value = messages.shorten(optimize + ".value()")
    is_set = string(" is set but " + OPTIMIZE)
    ours = our_keys(annotations)
    return expr.if_else(
        f"{optimize}.orValue('') == {string('true')}",
        f"[{string('castslice leaves the Pods of this template unchanged: ')} + {reason}]",
        expr.if_else(
            f"{optimize}.orValue('') == {string('false')}",
            "[]",
            expr.if_else(
                f"{optimize}.hasValue()",
                f"[{string(OPTIMIZE + '=')} + {shown_value} + {not_true}]",
                expr.if_else(
                    f"size({ours}) == 0",
                    "[]",
                    f"[{shown_key(ours + '[0]')} + {is_set} + {not_true}]",
                ),
            ),
        ),
    )


def match_resources() -> dict:
    return {
        "namespaceSelector": namespace_selector(DEFAULT_NAMESPACE),
        "matchPolicy": "Equivalent",
        "resourceRules": workload_rules(),
    }


def conditions() -> list[tuple[str, Expr]]:
    """The workload webhook's own matchConditions: only annotated workloads are reviewed."""
    # Policy mode reviews the built-in kinds only; the operators' are the webhook's.
    hook = workload_webhook(client={}, namespaces={}, operators=False)
    return [(c["name"], c["expression"]) for c in hook["matchConditions"]]
