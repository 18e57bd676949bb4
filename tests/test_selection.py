"""The Python predicate "the registration sends this object" against the registration's own
CEL and namespaceSelector, evaluated by a CEL interpreter (celpy): the same answer for every
Pod, policy and namespace, and for every workload kind of the table."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from castslice import contract, selection
from castslice.config import Config
from castslice.contract import (
    SYSTEM_NAMESPACES,
    WORKLOAD_KINDS,
    TemplateLocation,
    WorkloadKind,
    templates,
)
from castslice.environment import load_config
from castslice.registration import POD_WEBHOOK, WORKLOAD_WEBHOOK, webhook_configuration
from castslice.rules import Policy
from castslice.selection import sends_pod, sends_workload
from tests.test_registration import URL, WORKLOADS, Sender, pods, policies, webhook

OWN = "gpu-tools"
# The excluded ones (the system's, the configured own namespace) among ordinary ones.
NAMESPACES = [*SYSTEM_NAMESPACES, OWN, "castslice", "research", "team-a", "default", "tx"]


class Registration:
    """What the API server does with one webhook of a registration: its namespaceSelector,
    then every matchCondition."""

    def __init__(self, hook: dict) -> None:
        self.sender = Sender(hook)
        (expression,) = hook["namespaceSelector"]["matchExpressions"]
        assert (expression["key"], expression["operator"]) == (
            "kubernetes.io/metadata.name",
            "NotIn",
        )
        self.excluded = set(expression["values"])

    def sends(self, obj: dict, namespace: str, *, cluster_scoped: bool = False) -> bool:
        # The namespaceSelector never skips a cluster-scoped object.
        in_scope = cluster_scoped or namespace not in self.excluded
        return in_scope and self.sender.sends(obj, namespace)


def registration(config: Config, name: str) -> Registration:
    document = webhook_configuration(config, url=URL, own_namespace=OWN)
    return Registration(webhook(document, name))


@settings(max_examples=60, deadline=None)
@given(
    st.one_of(st.none(), policies()),
    st.lists(st.tuples(pods(), st.sampled_from(NAMESPACES)), min_size=8, max_size=8),
)
def test_the_predicate_sends_exactly_the_pods_the_registration_sends(
    policy: Policy | None, cases: list[tuple[dict, str]]
) -> None:
    config = Config(policy=policy)
    api_server = registration(config, POD_WEBHOOK)
    for pod, namespace in cases:
        selection = sends_pod(config, pod, namespace, OWN)
        assert selection.sent is api_server.sends(pod, namespace), (pod, namespace, selection)
        # A Pod left out is always told why; a sent one never is.
        assert (selection.why_not is None) is selection.sent


def test_the_reasons_name_what_kept_the_pod_away() -> None:
    config = load_config({})
    annotated = {"metadata": {"annotations": {"castops.io/optimize": "true"}}, "spec": {}}
    assert (
        sends_pod(config, annotated, "kube-system").why_not == "kube-system is a system namespace"
    )
    assert sends_pod(config, annotated, OWN, OWN).why_not == f"{OWN} is CastSlice's own namespace"
    mirror = copy.deepcopy(annotated)
    mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"] = "x"
    assert sends_pod(config, mirror, "default").why_not == "a mirror Pod"
    plain = {"metadata": {}, "spec": {}}
    assert sends_pod(config, plain, "default").why_not == 'castops.io/optimize is not "true"'
    assert sends_pod(config, annotated, "default").sent


def _workload_cases() -> list[tuple[dict[str, Any], str]]:
    return [(workload, namespace) for workload, _ in WORKLOADS for namespace in NAMESPACES[:4]]


@pytest.mark.parametrize(
    ("kind", "version"),
    [(kind, version) for kind in WORKLOAD_KINDS for version in kind.versions],
    ids=lambda value: getattr(value, "kind", value),
)
def test_the_predicate_sends_exactly_the_workloads_the_registration_sends(
    kind: Any, version: str
) -> None:
    api_server = registration(load_config({}), WORKLOAD_WEBHOOK)
    rules = webhook(webhook_configuration(load_config({}), url=URL), WORKLOAD_WEBHOOK)["rules"]
    assert any(
        kind.group in rule["apiGroups"]
        and version in rule["apiVersions"]
        and kind.resource in rule["resources"]
        for rule in rules
    )
    for workload, namespace in [*_workload_cases(), *((w, "default") for w, _ in WORKLOADS)]:
        selection = sends_workload(workload, kind.group, version, kind.kind, namespace, OWN)
        sent = api_server.sends(workload, namespace, cluster_scoped=kind.scope == "Cluster")
        assert selection.sent is sent, (workload, namespace)


def test_kinds_outside_the_table_are_never_sent() -> None:
    annotated = {"metadata": {"annotations": {"castops.io/optimize": "true"}}}
    selection = sends_workload(annotated, "", "v1", "ConfigMap", "default")
    assert not selection.sent
    assert selection.why_not == "ConfigMap is not a workload CastSlice reviews"


# A kind with templates in a map and in a list, as operators' kinds have them.
TRAINER = WorkloadKind(
    "example.com",
    ("v1",),
    "Trainer",
    "trainers",
    (
        TemplateLocation("spec.replicaSpecs.*.template"),
        TemplateLocation("spec.groups[name].template.spec.template"),
    ),
)


def _trainer(replicas: dict | None, groups: list | None) -> dict:
    spec: dict[str, Any] = {}
    if replicas is not None:
        spec["replicaSpecs"] = replicas
    if groups is not None:
        spec["groups"] = groups
    return {"metadata": {"name": "t"}, "spec": spec}


ANNOTATED = {"metadata": {"annotations": {"castops.io/optimize": "true"}}}
PLAIN = {"metadata": {"annotations": {"other.io/x": "1"}}}
TRAINERS = [
    _trainer({"Master": {"template": PLAIN}, "Worker": {"template": ANNOTATED}}, None),
    _trainer({"Master": {"template": PLAIN}, "Worker": {}}, None),
    _trainer({}, [{"template": {"spec": {"template": PLAIN}}}]),
    _trainer(None, [{}, {"template": {"spec": {"template": ANNOTATED}}}]),
    _trainer(None, [{"template": {"spec": {}}}]),
    _trainer({"Master": {"template": {}}}, []),
]


@pytest.mark.parametrize("trainer", TRAINERS)
def test_templates_in_maps_and_lists_are_selected_alike(
    trainer: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selection, "WORKLOAD_KINDS", (*WORKLOAD_KINDS, TRAINER))
    monkeypatch.setitem(contract.WORKLOADS, ("example.com", "v1", "Trainer"), TRAINER)
    api_server = registration(load_config({}), WORKLOAD_WEBHOOK)
    chosen = sends_workload(trainer, "example.com", "v1", "Trainer", "default")
    annotated = any(
        (site.node.get("metadata") or {}).get("annotations", {}).get("castops.io/optimize")
        for site in templates(TRAINER, trainer)
    )
    assert chosen.sent is annotated
    assert api_server.sends(trainer, "default") is annotated
