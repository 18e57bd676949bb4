"""Policy mode's CEL against the webhook's Python decision, with either CEL engine.

`run_policy` is an engine: tests/kubernetes_cel.run_policy (celpy, in process, the
unit suite) or tests/e2e/celeval.run_policy (the API server's own CEL environment).
Both run a policy as the API server does and answer a run per object with
`matched`, `patch`, `messages` and `audit`; the comparisons here do the rest: the
webhook's answer through the Python decision, the policy's by applying its patch.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from castslice.contract.definitions import APPLIED
from castslice.decision.admission import Admission
from castslice.render.admission_policies import render
from castslice.render.selection import pod_match_conditions
from castslice.settings.config import Config

POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}
# A namespace the comparison's enrolment policy enrols (`e2e-*`), one it excludes (`*-prod`).
NAMESPACES = ("e2e-0123abcd", "pm-0123abcd-prod")


@dataclass(frozen=True)
class PolicyRun:
    """What one admission policy made of one object (with the API server's evaluator, also
    the CEL cost it took)."""

    matched: bool
    variables: dict[str, Any] = field(default_factory=dict)
    cost: int = 0
    patch: list[dict[str, Any]] | None = None
    messages: list[str] | None = None
    audit: dict[str, str] | None = None


RunPolicy = Callable[
    [dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]], Sequence[PolicyRun]
]


def webhook_result(
    config: Config, manifest: dict[str, Any], namespace: str
) -> tuple[dict[str, Any], list[str], dict[str, str] | None]:
    """The Pod the webhook's answer stores (its patch applied), its warnings and audit."""
    request = {
        "uid": "u",
        "operation": "CREATE",
        "kind": POD_KIND,
        "namespace": namespace,
        "object": manifest,
    }
    response = Admission(config).review(copy.deepcopy(request)).response
    stored = copy.deepcopy(manifest)
    if "patch" in response:
        stored = jsonpatch.apply_patch(stored, json.loads(response["patch"]))
    return stored, response.get("warnings", []), response.get("auditAnnotations")


def as_sent(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects as the API server sends them to a webhook: JSON with map keys sorted."""
    return json.loads(json.dumps(objects, sort_keys=True))


def pod_requests(namespaces: Sequence[str]) -> list[dict[str, Any]]:
    return [{"namespace": namespace, "kind": POD_KIND} for namespace in namespaces]


def as_admitted(manifest: dict[str, Any], patch: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The Pod the validating policy sees: mutated, with the request's managedFields.

    The API server records who set which field before mutating admission runs,
    so a decision record that came with the request is owned by its manager.
    """
    admitted = jsonpatch.apply_patch(manifest, patch) if patch else copy.deepcopy(manifest)
    if APPLIED in (manifest["metadata"].get("annotations") or {}):
        owned = {"f:metadata": {"f:annotations": {f"f:{APPLIED}": {}}}}
        admitted["metadata"]["managedFields"] = [
            {"manager": "kubectl", "operation": "Update", "fieldsV1": owned}
        ]
    return admitted


def pod_differences(
    config: Config, shapes: list[dict[str, Any]], run_policy: RunPolicy
) -> tuple[list[str], int]:
    """Where the policies and the webhook store a different Pod, warn or audit differently.

    Shapes alternate between NAMESPACES. The webhook is called only for what its
    registration's matchConditions pass (evaluated by the same engine); the Pod the
    mutating policy stores is its JSON Patch applied to the whole Pod. Also gives how
    many Pods the mutating policy changed, so a comparison of untouched Pods shows.
    """
    mutating, _, audit, _, warning, *_ = render(config)
    shapes = as_sent(shapes)
    namespaces = [NAMESPACES[index % 2] for index in range(len(shapes))]
    requests = pod_requests(namespaces)
    mutations = run_policy(mutating, shapes, requests)
    admitted = [
        as_admitted(shape, run.patch if run.matched else None)
        for shape, run in zip(shapes, mutations, strict=True)
    ]
    validations = run_policy(warning, admitted, requests)
    audits = run_policy(audit, admitted, requests)
    registration = {"spec": {"matchConditions": pod_match_conditions(config)}}
    called = run_policy(registration, shapes, requests)

    differences = []
    for shape, admitted_pod, validation, audited, namespace, call in zip(
        shapes, admitted, validations, audits, namespaces, called, strict=True
    ):
        webhook = webhook_result(config, shape, namespace) if call.matched else (shape, [], None)
        admitted_pod["metadata"].pop("managedFields", None)
        policy = (
            admitted_pod,
            (validation.messages or []) if validation.matched else [],
            audited.audit if audited.matched else None,
        )
        if webhook != policy:
            differences.append(f"{shape}\n webhook: {webhook}\n policy:  {policy}")
    return differences, sum(run.matched for run in mutations)


def workload_requests(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each workload's request: its kind, CREATE and UPDATE in turn, NAMESPACES in turn."""
    requests = []
    for index, workload in enumerate(objects):
        group, _, version = workload["apiVersion"].rpartition("/")
        kind = {"group": group, "version": version, "kind": workload["kind"]}
        operation = ("CREATE", "UPDATE")[index % 2]
        requests.append({"namespace": NAMESPACES[index % 2], "kind": kind, "operation": operation})
    return requests


def workload_differences(
    config: Config, objects: list[dict[str, Any]], run_policy: RunPolicy
) -> tuple[list[str], int]:
    """Where the workload policy and the webhook warn differently about a workload; also how
    many workloads got warnings at all."""
    policy = render(config)[6]
    objects = as_sent(objects)
    requests = workload_requests(objects)
    runs = run_policy(policy, objects, requests)
    differences = []
    for workload, request, run in zip(objects, requests, runs, strict=True):
        # The registration's matchConditions are the policy's: unmatched, no call at all.
        expected: list[str] = []
        if run.matched:
            review = {"uid": "u", **request, "object": copy.deepcopy(workload)}
            response = Admission(config).review(review).response
            if "patch" in response:
                differences.append(f"{workload}\n webhook patched a workload")
            expected = response.get("warnings", [])
        if (run.messages or []) != expected:
            differences.append(f"{workload}\n webhook: {expected}\n policy:  {run.messages}")
    return differences, sum(bool(run.messages) for run in runs)
