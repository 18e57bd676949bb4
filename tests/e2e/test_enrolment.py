"""The enrolment policy against the real API server: the generated registration's CEL
decides what reaches CastSlice, and that is exactly what the policy enrols.

CastSlice runs with CASTSLICE_POLICY and is registered with
`castslice webhook`'s output for the same settings (registration.config_of);
what reached the function is read from its own request log.
"""

from __future__ import annotations

import json
import os
import random
import uuid

import kubernetes.client

from castslice.contract import Manifest
from castslice.contract.patch import gpu_containers
from castslice.decision.enrolment import decide
from castslice.settings.rules import Policy

from .castslice_server import CastSliceServer, StartServer
from .pods import (
    GPU,
    OPTIMIZE,
    SHARED,
    container,
    create_namespace,
    create_pod,
    gpu_container,
    opted_in,
    pod,
    read_pod,
    resources_of,
)
from .registration import APPLIED, config_of, register_and_wait

UNMUTATED = {"app": {"requests": {"cpu": "100m", GPU: "1"}, "limits": {GPU: "1"}}}


def prefix() -> str:
    return f"e2e-{uuid.uuid4().hex[:6]}"


def start_with_policy(
    api: kubernetes.client.ApiClient, own_castslice: StartServer, rules: list[Manifest]
) -> tuple[CastSliceServer, Policy]:
    server = own_castslice({"CASTSLICE_POLICY": json.dumps({"rules": rules})})
    register_and_wait(api, server)
    policy = config_of(server).policy
    assert policy is not None
    return server, policy


def reviewed(server: CastSliceServer, namespaces: set[str]) -> set[tuple[str, str]]:
    """(namespace, name) of every Pod in `namespaces` that reached `server` so far."""
    return {
        (record["namespace"], record["pod"])
        for record in server.settled_log_records()
        if record.get("namespace") in namespaces and "decision" in record
    }


def test_an_enrolled_namespace_gets_its_unannotated_gpu_pods_sliced(
    api: kubernetes.client.ApiClient, own_castslice: StartServer
) -> None:
    name = prefix()
    enrolled = create_namespace(api, f"{name}-research")
    elsewhere = create_namespace(api, f"{name}-other")
    server, _ = start_with_policy(
        api,
        own_castslice,
        [
            {
                "name": "research",
                "namespaces": [f"{name}-research"],
                "optimize": True,
                "workloadType": "inference",
            }
        ],
    )

    create_pod(api, enrolled, pod("sliced", [gpu_container()]))
    create_pod(api, enrolled, pod("opted-out", [gpu_container()], annotations={OPTIMIZE: "false"}))
    create_pod(api, enrolled, pod("no-gpu", [container("app", limits={"cpu": "1"})]))
    create_pod(api, elsewhere, pod("elsewhere", [gpu_container()]))
    create_pod(api, elsewhere, pod("annotated", [gpu_container()], annotations=opted_in()))

    sliced = read_pod(api, enrolled, "sliced")
    assert resources_of(sliced) == {
        "app": {"requests": {"cpu": "100m", SHARED: "2"}, "limits": {SHARED: "2"}}
    }
    assert json.loads(sliced["metadata"]["annotations"][APPLIED]) == {
        "slices": 2,
        "source": "policy:research",
        "backend": "resource",
        "original": {"app": "1"},
    }
    (review,) = server.reviews_of(enrolled, "sliced")
    assert (review["decision"], review["source"]) == ("mutated", "policy:research")

    # Opted out, no GPU, another namespace: the API server never called CastSlice.
    assert resources_of(read_pod(api, enrolled, "opted-out")) == UNMUTATED
    assert resources_of(read_pod(api, elsewhere, "elsewhere")) == UNMUTATED
    assert reviewed(server, {enrolled, elsewhere}) == {
        (enrolled, "sliced"),
        (elsewhere, "annotated"),  # an annotated Pod is sliced wherever it is
    }
    assert json.loads(read_pod(api, elsewhere, "annotated")["metadata"]["annotations"][APPLIED])[
        "source"
    ] == ("default")


# The equivalence: N generated Pods in several namespaces, created as a server-side dry run.

LABEL_KEYS = ["tier", "team", "example.com/gpu"]
LABEL_VALUES = ["dev", "prod", "a"]
POD_COUNT = 72


def policy_rules(name: str) -> list[Manifest]:
    """Every kind of term: names, globs, each selector operator, excluding and enrolling."""
    return [
        {"name": "never in prod", "namespaces": [f"{name}-*-prod"], "optimize": False},
        {
            "name": "research dev",
            "namespaces": [f"{name}-research", f"{name}-team-?"],
            "podSelector": {"matchLabels": {"tier": "dev"}},
            "optimize": True,
            "workloadType": "dev",
        },
        {
            "name": "no prod tier",
            "podSelector": {
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["prod"]},
                    {"key": "team", "operator": "NotIn", "values": ["a"]},
                ]
            },
            "optimize": False,
        },
        {
            "name": "gpu teams",
            "namespaces": [f"{name}-[rt]*"],
            "podSelector": {
                "matchExpressions": [
                    {"key": "example.com/gpu", "operator": "Exists"},
                    {"key": "team", "operator": "DoesNotExist"},
                ]
            },
            "optimize": True,
            "slices": 3,
        },
        {"name": "everything else in team-b", "namespaces": [f"{name}-team-b"], "optimize": True},
    ]


def generated_pod(rng: random.Random, name: str) -> Manifest:
    def resources() -> Manifest:
        choice = rng.randrange(4)
        if choice == 0:
            return {}
        if choice == 1:
            return {"limits": {"cpu": "1"}}
        if choice == 2:
            return {"limits": {GPU: "1"}}
        return {"requests": {"cpu": "100m", GPU: "2"}, "limits": {GPU: "2"}}

    containers = [container(f"c{index}", **resources()) for index in range(rng.randint(1, 2))]
    init = [container("init", **resources())] if rng.random() < 0.3 else None
    labels = {key: rng.choice(LABEL_VALUES) for key in LABEL_KEYS if rng.random() < 0.5}
    annotations = {}
    optimize = rng.choice([None, None, None, "true", "false", "yes"])
    if optimize is not None:
        annotations[OPTIMIZE] = optimize
    return pod(
        name,
        containers,
        init_containers=init,
        labels=labels or None,
        annotations=annotations or None,
    )


def function_wants(policy: Policy, manifest: Manifest, namespace: str) -> bool:
    """The function's own decision: enrolled GPU Pods, or annotated ones, never opted out."""
    annotations = manifest["metadata"].get("annotations") or {}
    if annotations.get(OPTIMIZE) == "true":
        return True
    enrolment = decide(policy, annotations, namespace, manifest["metadata"].get("labels") or {})
    return enrolment.enrolled and bool(gpu_containers(manifest["spec"], GPU))


def test_the_api_server_sends_exactly_what_the_policy_enrols(
    api: kubernetes.client.ApiClient, own_castslice: StartServer
) -> None:
    name = prefix()
    namespaces = [
        create_namespace(api, f"{name}-{suffix}")
        for suffix in ("research", "team-a", "team-b", "team-prod", "other")
    ]
    server, policy = start_with_policy(api, own_castslice, policy_rules(name))
    seed = int(os.environ.get("CASTSLICE_E2E_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)

    expected: set[tuple[str, str]] = set()
    rewritten: dict[tuple[str, str], bool] = {}
    for index in range(POD_COUNT):
        namespace = rng.choice(namespaces)
        manifest = generated_pod(rng, f"pod-{index}")
        answered, _ = create_pod(api, namespace, manifest, dry_run=True)
        rewritten[(namespace, manifest["metadata"]["name"])] = APPLIED in (
            answered["metadata"].get("annotations") or {}
        )
        if function_wants(policy, manifest, namespace):
            expected.add((namespace, manifest["metadata"]["name"]))

    sent = reviewed(server, set(namespaces))
    assert sent == expected, f"CASTSLICE_E2E_SEED={seed}"
    # Not a vacuous check: the sample holds Pods on both sides.
    assert 0 < len(expected) < POD_COUNT, f"CASTSLICE_E2E_SEED={seed}"
    # Whatever was rewritten was sent; nothing the API server kept away was changed.
    assert {key for key, changed in rewritten.items() if changed} <= sent


def test_a_large_policy_is_accepted_and_evaluated_within_the_cel_limits(
    api: kubernetes.client.ApiClient, own_castslice: StartServer
) -> None:
    name = prefix()
    namespace = create_namespace(api, f"{name}-last")
    # Many rules, alternating verdicts (the deepest nesting), each with globs and selectors.
    rules: list[Manifest] = [
        {
            "name": f"rule {index}",
            "namespaces": [
                f"{name}-n{index}",
                f"{name}-g{index}-*",
                f"*-x{index}",
                f"{name}-[ab]?{index}",
            ],
            "podSelector": {
                "matchLabels": {"tier": "dev"},
                "matchExpressions": [
                    {"key": f"k{index}", "operator": "NotIn", "values": ["a", "b"]},
                    {"key": "example.com/gpu", "operator": "Exists"},
                ],
            },
            "optimize": index % 2 == 0,
        }
        for index in range(60)
    ]
    rules.append(
        {"name": "the last one", "namespaces": [f"{name}-last"], "optimize": True, "slices": 2}
    )
    server, _ = start_with_policy(api, own_castslice, rules)

    # A Pod the last rule enrols, with many containers for the CEL to look through.
    containers = [container(f"c{index}", limits={"cpu": "1"}) for index in range(60)]
    containers.append(gpu_container("gpu"))
    create_pod(api, namespace, pod("big", containers), dry_run=True)

    (review,) = server.reviews_of(namespace, "big")
    assert (review["decision"], review["source"]) == ("mutated", "policy:the last one")


WORKLOAD_TEMPLATE = {
    "metadata": {"labels": {"app": "w"}},
    "spec": {"containers": [gpu_container()]},
}


def deployment(name: str, template_annotations: dict[str, str] | None) -> Manifest:
    template = json.loads(json.dumps(WORKLOAD_TEMPLATE))
    if template_annotations is not None:
        template["metadata"]["annotations"] = template_annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": "w"}}, "template": template},
    }


def cron_job(name: str, template_annotations: dict[str, str] | None) -> Manifest:
    template = json.loads(json.dumps(WORKLOAD_TEMPLATE))
    template["spec"]["restartPolicy"] = "Never"
    if template_annotations is not None:
        template["metadata"]["annotations"] = template_annotations
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}},
    }


def test_only_annotated_workloads_reach_the_workload_webhook(
    api: kubernetes.client.ApiClient, castslice: CastSliceServer, namespace: str
) -> None:
    apps = kubernetes.client.AppsV1Api(api)
    batch = kubernetes.client.BatchV1Api(api)
    apps.create_namespaced_deployment(namespace, deployment("annotated", opted_in()), dry_run="All")
    apps.create_namespaced_deployment(
        namespace, deployment("plain", {"team": "vision"}), dry_run="All"
    )
    batch.create_namespaced_cron_job(namespace, cron_job("nightly", opted_in()), dry_run="All")
    batch.create_namespaced_cron_job(namespace, cron_job("plain-cron", None), dry_run="All")

    assert reviewed(castslice, {namespace}) == {(namespace, "annotated"), (namespace, "nightly")}


def test_system_and_own_namespaces_never_reach_castslice_whatever_the_policy(
    api: kubernetes.client.ApiClient, own_castslice: StartServer
) -> None:
    excluded = {create_namespace(api, name) for name in ("kube-node-lease", "castslice")}
    server, _ = start_with_policy(api, own_castslice, [{"name": "all", "optimize": True}])
    for namespace in sorted(excluded):
        for chosen in (None, opted_in()):
            manifest = pod(f"sys-{uuid.uuid4().hex[:6]}", [gpu_container()], annotations=chosen)
            create_pod(api, namespace, manifest, dry_run=True)
    assert reviewed(server, excluded) == set()
