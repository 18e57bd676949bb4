"""The objects of policy mode, rendered from the same Config as the webhook.

A MutatingAdmissionPolicy applies the webhook's mutation to Pods; a
ValidatingAdmissionPolicy gives the webhook's audit annotations on Pods, another
(`validationActions: [Warn, Audit]`) its warnings on Pods, a third its warnings
on workloads. Each policy matches what the webhook registration sends to the
function (the same rules, namespace exclusions and matchConditions) and has a
binding.

The Pod warnings have a policy of their own because the API server evaluates
every one of its WARNING_SLOTS validations for each Pod the policy matches, which
costs a Pod create about as much as the mutating policy does: its matchConditions
leave out, cheaply, the Pods that cannot get a warning (the common case, an
opted-in Pod given at least what it asked for), while the audit annotations,
which every mutated Pod gets, come from a policy without validations.
"""

from __future__ import annotations

from castslice.contract import Manifest
from castslice.contract.definitions import APPLIED, SLICE_RATIO, WORKLOAD_TYPE, json_string
from castslice.render import cel, selection
from castslice.render.admission_policies import messages
from castslice.render.admission_policies import workload_warnings as workloads
from castslice.render.admission_policies.mutation import (
    gpu_containers,
    original_entries,
    patch,
    record,
)
from castslice.render.admission_policies.placement import PlacementCel
from castslice.render.admission_policies.variables import (
    Variables,
    any_gpu_container,
    placed_by_hand,
    slice_variables,
)
from castslice.render.cel import Expr, string, variable
from castslice.render.selection import namespace_selector, pod_match_conditions, pod_rules
from castslice.render.webhook_configuration import POD_WEBHOOK
from castslice.settings.config import Config

API_VERSION = "admissionregistration.k8s.io/v1"
# The webhook's name: the audit policy's annotations then carry the same keys as
# the webhook's (`pods.castslice.castops.io/slices`).
NAME = POD_WEBHOOK
WARNINGS_NAME = "pod-warnings.castslice.castops.io"
LABELS = {"app.kubernetes.io/name": "castslice", "app.kubernetes.io/component": "policy"}
MINIMUM_KUBERNETES = "1.36"
# Warnings one object can get from a validating policy (a validation each): for a
# Pod, the two annotation warnings plus one per GPU container given less than it
# asked for. The API server's 4 KiB warning budget cuts in long before.
WARNING_SLOTS = 64
# The prefix the API server puts before every warning of a validating policy.
WARNING_PREFIX = (
    f"Validation failed for ValidatingAdmissionPolicy '{WARNINGS_NAME}' "
    f"with binding '{WARNINGS_NAME}': "
)
WORKLOAD_WARNING_PREFIX = WARNING_PREFIX.replace(WARNINGS_NAME, workloads.NAME)

_RECORD_MEMBERS = json_string("original") + ":{"
# A member of the record's `original` whose quantity is not exactly "1": only such a
# container can have been given less than it asked for (a whole number above 1).
_ASKED_MORE_THAN_ONE = r'(?s)"original":\{.*":"([^1"]|1[^"])'
_MEMBER = '"[^"]*":"[^"]*"'
_INSTANCE_MEMBER = "}," + json_string("instance") + ":"
_SEPARATOR = '":"'


def not_recorded() -> Expr:
    """CEL: the Pod has no decision record yet (idempotence: a recorded Pod is left alone)."""
    return (
        f"!has(object.metadata.annotations) || !({string(APPLIED)} in object.metadata.annotations)"
    )


def recorded_by_user() -> Expr:
    """CEL: the request itself carried the decision record (not an admission mutation).

    The validating policy sees the Pod after mutation. The API server computes
    managedFields before mutating admission, so a record some field manager owns
    came with the request: that Pod is idempotently left alone, without warnings.
    """
    owned = f"entry.?fieldsV1[?'f:metadata'][?'f:annotations'][?{string('f:' + APPLIED)}]"
    return f"object.metadata.?managedFields.orValue([]).exists(entry, {owned}.hasValue())"


def may_warn(config: Config, placement: PlacementCel, annotations: Expr) -> Expr:
    """CEL: the Pod (as mutated) can get a warning; false only when `warnings` is surely empty.

    Cheap tests on the annotations stand in for the warnings' own work: a slice-ratio
    annotation at all, a workload-type that names no preset, a decision record with
    an asked quantity other than 1, or (no record) a placement label set by hand.
    """
    ratio, kind = string(SLICE_RATIO), string(WORKLOAD_TYPE)
    applied = string(APPLIED)
    hand_placed = (
        f"size({placed_by_hand(placement.placement_keys)}) > 0"
        if placement.placement_keys
        else "false"
    )
    recorded_warns = f"{annotations}[{applied}].matches({string(_ASKED_MORE_THAN_ONE)})"
    if placement.has_notes():
        # The backend warns of what the record's `instance` states (an MPS client's cap).
        recorded_warns = cel.any_of(
            [recorded_warns, f"{annotations}[{applied}].contains({string(_INSTANCE_MEMBER)})"]
        )
    return cel.any_of(
        [
            f"{ratio} in {annotations}",
            f"({kind} in {annotations} && !({annotations}[{kind}] in "
            f"{cel.literal(list(config.presets))}))",
            cel.if_else(f"{applied} in {annotations}", recorded_warns, hand_placed),
        ]
    )


def _match_resources() -> Manifest:
    """As the Pod webhook's rules: CREATE of core v1 Pods, outside the excluded namespaces."""
    return {
        "namespaceSelector": namespace_selector(),
        "matchPolicy": "Equivalent",
        "resourceRules": pod_rules(),
    }


def pod_conditions(config: Config) -> list[tuple[str, Expr]]:
    """The webhook registration's own matchConditions: the Pods the function reviews."""
    return [(c["name"], c["expression"]) for c in pod_match_conditions(config)]


def validated_pod_conditions(config: Config) -> list[tuple[str, Expr]]:
    """The same Pods, seen after mutation: a Pod the policy enrolled may no longer ask
    for the GPU resource by name, but then it carries the decision record."""
    policy = config.policy
    if policy is None or not policy.enrols_anyone:
        return pod_conditions(config)
    recorded = cel.has_key(selection.ANNOTATIONS, APPLIED)
    reviewed = cel.any_of([selection.requests_gpu(config.gpu_resource), recorded])
    enrolled = cel.all_of([reviewed, selection.policy_enrols(policy)])
    return [
        ("not-opted-out", selection.not_opted_out()),
        ("opted-in-or-enrolled", cel.any_of([selection.opted_in(), enrolled])),
        ("not-a-mirror-pod", selection.not_a_mirror_pod()),
    ]


def _conditions(*named: tuple[str, Expr]) -> list[Manifest]:
    return [{"name": name, "expression": expression} for name, expression in named]


def _variables(named: Variables) -> list[Manifest]:
    return [{"name": name, "expression": expression} for name, expression in named]


def decision_variables(config: Config, placement: PlacementCel) -> Variables:
    return [*slice_variables(config), *placement.variables()]


def mutating_policy(config: Config, failure_policy: str = "Ignore") -> Manifest:
    placement = PlacementCel(config)
    conditions = [
        *pod_conditions(config),
        ("not-yet-recorded", not_recorded()),
        ("requests-the-gpu", any_gpu_container(config.gpu_resource)),
    ]
    if placement.placement_keys:
        conditions.append(
            ("not-placed-by-hand", f"size({placed_by_hand(placement.placement_keys)}) == 0")
        )
    variables = [
        *decision_variables(config, placement),
        ("gpuContainers", gpu_containers(config)),
        ("original", original_entries(config)),
        ("record", record(config.backend)),
    ]
    return _manifest(
        "MutatingAdmissionPolicy",
        NAME,
        {
            "failurePolicy": failure_policy,
            "reinvocationPolicy": "Never",
            "matchConstraints": _match_resources(),
            "matchConditions": _conditions(*conditions),
            "variables": _variables(variables),
            "mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression": patch(config, placement)}}
            ],
        },
    )


def warning_variables(config: Config, placement: PlacementCel) -> Variables:
    """The Pod warnings, worked out from the Pod as the validating policy sees it: mutated.

    A record the request itself carried: the webhook skipped the Pod, silently.
    A record the mutation added: the annotation warnings, the less-than-asked ones from
    the record's `original` quantities (the resources are rewritten), then the backend's
    notes on the placement (what the Pod really gets).
    No record: the annotation warnings, and the placed-by-hand one.
    """
    annotations = variable("annotations")
    applied = f"{annotations}[{string(APPLIED)}]"
    members = (
        f"{applied}.substring({applied}.indexOf({string(_RECORD_MEMBERS)}) + "
        f"{len(_RECORD_MEMBERS)}).findAll({string(_MEMBER)})"
    )
    asked = f"entry.substring(entry.indexOf({string(_SEPARATOR)}) + 3, size(entry) - 1)"
    name = f"entry.substring(1, entry.indexOf({string(_SEPARATOR)}))"
    less = messages.less_than_asked(placement, asked)
    hand_placed = variable("handPlaced")
    return [
        ("fallback", messages.fallback(config)),
        ("recordedByUser", recorded_by_user()),
        (
            "mutated",
            f"{string(APPLIED)} in {annotations} && !{variable('recordedByUser')}",
        ),
        ("handPlaced", placed_by_hand(placement.placement_keys)),
        ("members", cel.if_else(variable("mutated"), members, "[]")),
        (
            "lessThanAsked",
            f"{variable('members')}.filter(entry, {less}).map(entry, "
            f"{messages.less_than_asked_warning(name, asked, config.gpu_resource)})",
        ),
        (
            "warnings",
            cel.if_else(
                f"{string(APPLIED)} in {annotations} && {variable('recordedByUser')}",
                "[]",
                f"{messages.annotation_warnings(config)} + "
                + cel.if_else(
                    variable("mutated"),
                    f"{variable('lessThanAsked')} + {placement.notes()}",
                    cel.if_else(
                        f"size({hand_placed}) > 0 && {any_gpu_container(config.gpu_resource)}",
                        f"[{messages.hand_placed_warning(hand_placed + '[0]')}]",
                        "[]",
                    ),
                ),
            ),
        ),
    ]


def audit_policy(config: Config, failure_policy: str = "Ignore") -> Manifest:
    """The webhook's audit annotations on the Pods the mutating policy rewrote."""
    mutated = variable("mutated")
    placement = PlacementCel(config)
    audit = [
        ("slices", f"string({variable('slices')})"),
        ("slice-source", variable("source")),
        ("backend", string(config.backend)),
    ]
    placement_variables = []
    if placement.states_instance():
        # Blank when the share says it all: the API server then leaves the key out.
        audit.append(("instance", variable("instance")))
        placement_variables = [placement.degree(), placement.instance()]
    recorded = cel.has_key(selection.ANNOTATIONS, APPLIED)
    return _manifest(
        "ValidatingAdmissionPolicy",
        NAME,
        {
            "failurePolicy": failure_policy,
            "matchConstraints": _match_resources(),
            "matchConditions": _conditions(
                *validated_pod_conditions(config), ("recorded", recorded)
            ),
            "variables": _variables(
                [
                    *slice_variables(config),
                    # The `recorded` matchCondition has the record there: only whether
                    # the mutating policy wrote it, or the user sent it, is left.
                    ("mutated", f"!({recorded_by_user()})"),
                    *placement_variables,
                ]
            ),
            "auditAnnotations": [
                {"key": key, "valueExpression": f"{mutated} ? {value} : {string('')}"}
                for key, value in audit
            ],
        },
    )


def warning_policy(config: Config, failure_policy: str = "Ignore") -> Manifest:
    """The webhook's warnings on Pods, for the Pods that can get any."""
    placement = PlacementCel(config)
    annotations = cel.optional_map("object.?metadata.?annotations")
    return _manifest(
        "ValidatingAdmissionPolicy",
        WARNINGS_NAME,
        {
            "failurePolicy": failure_policy,
            "matchConstraints": _match_resources(),
            "matchConditions": _conditions(
                *validated_pod_conditions(config),
                ("may-warn", cel.let("a", annotations, may_warn(config, placement, "a"))),
            ),
            "variables": _variables(
                [*decision_variables(config, placement), *warning_variables(config, placement)]
            ),
            "validations": _warning_slots(),
        },
    )


def workload_policy(config: Config, failure_policy: str = "Ignore") -> Manifest:
    """The validating policy that warns about workloads, as the webhook's second webhook."""
    placement = PlacementCel(config)
    return _manifest(
        "ValidatingAdmissionPolicy",
        workloads.NAME,
        {
            "failurePolicy": failure_policy,
            "matchConstraints": workloads.match_resources(),
            "matchConditions": _conditions(*workloads.conditions()),
            "variables": _variables(workloads.workload_variables(config, placement)),
            "validations": _warning_slots(),
        },
    )


def _warning_slots() -> list[Manifest]:
    """One validation per warning a policy can give: the k-th fails when there are more than k."""
    warnings = variable("warnings")
    return [
        {
            "expression": f"size({warnings}) <= {slot}",
            "messageExpression": f"{warnings}[{slot}]",
        }
        for slot in range(WARNING_SLOTS)
    ]


def binding(kind: str, name: str = NAME) -> Manifest:
    spec: Manifest = {"policyName": name}
    if kind == "ValidatingAdmissionPolicyBinding":
        spec["validationActions"] = ["Warn", "Audit"]
    return _manifest(kind, name, spec)


def _manifest(kind: str, name: str, spec: Manifest) -> Manifest:
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "labels": dict(LABELS)},
        "spec": spec,
    }


def policies(config: Config, failure_policy: str = "Ignore") -> list[Manifest]:
    """The mutating policy, the validating policies (Pod audit annotations, Pod warnings,
    workload warnings) and their bindings."""
    return [
        mutating_policy(config, failure_policy),
        binding("MutatingAdmissionPolicyBinding"),
        audit_policy(config, failure_policy),
        binding("ValidatingAdmissionPolicyBinding"),
        warning_policy(config, failure_policy),
        binding("ValidatingAdmissionPolicyBinding", WARNINGS_NAME),
        workload_policy(config, failure_policy),
        binding("ValidatingAdmissionPolicyBinding", workloads.NAME),
    ]
