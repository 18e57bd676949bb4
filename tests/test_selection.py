"""The Python predicate "the registration sends this object" against the registration's own
CEL and namespaceSelector, evaluated by a CEL interpreter (celpy): the same answer for every
Pod, policy and namespace, and for every workload kind of the table."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from castslice.contract import definitions as contract
from castslice.contract import paths
from castslice.contract.definitions import (
    SYSTEM_NAMESPACES,
    WORKLOAD_KINDS,
    WorkloadKind,
    templates,
)
from castslice.contract.shapes import KSERVE_COMPONENT, TemplateShape
from castslice.environment import load_config
from castslice.render import selection
from castslice.render.selection import sends_pod, sends_workload
from castslice.render.webhook_configuration import (
    POD_WEBHOOK,
    WORKLOAD_WEBHOOK,
    webhook_configuration,
)
from castslice.settings.config import Config
from castslice.settings.rules import Policy
from tests.factories import TRAINER
from tests.registrations import (
    OWN,
    URL,
    WORKLOADS,
    Registration,
    pods,
    policies,
    registration,
    webhook,
)

# The excluded ones (the system's, the configured own namespace) among ordinary ones.
NAMESPACES = [*SYSTEM_NAMESPACES, OWN, "castslice", "research", "team-a", "default", "tx"]


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


# Operators' resources: objects built along every template path of the table ----------------

OPERATOR_KINDS = [kind for kind in WORKLOAD_KINDS if kind.custom_resource]
EVERY_LOCATION = [location for kind in WORKLOAD_KINDS for location in kind.templates]
TEMPLATE_ANNOTATIONS = st.sampled_from(
    [None, {}, {"other.io/x": "1"}, {"castops.io/optimize": "true"}, {"castops.io/any": "x"}]
)


def _template(shape: TemplateShape) -> st.SearchStrategy[dict]:
    """A Pod template of `shape` with or without annotations, or with no metadata at all."""

    def built(annotations: dict | None) -> dict:
        if shape is KSERVE_COMPONENT:
            return {"containers": []} if annotations is None else {"annotations": annotations}
        if annotations is None:
            return {"spec": {}}
        return {"metadata": {"annotations": annotations}, "container": {"image": "x"}}

    return TEMPLATE_ANNOTATIONS.map(built)


def _along(segments: tuple[paths.Segment, ...], shape: TemplateShape) -> st.SearchStrategy[dict]:
    """An object with templates at the path `segments`: zero to two at each wildcard."""
    if not segments:
        return _template(shape)
    segment, rest = segments[0], segments[1:]
    if isinstance(segment, paths.EachValue):
        values = st.dictionaries(st.sampled_from(["Master", "Worker"]), _along(rest, shape))
        return values.map(lambda children: {segment.name: children})
    if isinstance(segment, paths.Field):
        return _along(rest, shape).map(lambda child: {segment.name: child})
    items = st.lists(
        st.tuples(st.sampled_from(["a", "gpu-group"]), _along(rest, shape)), max_size=2
    )
    key = segment.key or "name"
    return items.map(lambda found: {segment.name: [{key: name, **item} for name, item in found]})


def _merged(base: Any, extra: Any) -> Any:
    """`extra` laid over `base`; where the two disagree on a type or hold lists, `base` wins."""
    if isinstance(base, dict) and isinstance(extra, dict):
        return {**extra, **{k: _merged(v, extra[k]) if k in extra else v for k, v in base.items()}}
    return base


@st.composite
def operator_resources(draw: st.DrawFn) -> dict:
    """An object holding templates at a few of the table's paths (any kind's: the registration's
    condition looks at every path whatever the kind), and maybe annotations of its own."""
    locations = draw(st.lists(st.sampled_from(EVERY_LOCATION), min_size=1, max_size=3))
    resource: dict = {"metadata": {}}
    own = draw(TEMPLATE_ANNOTATIONS)
    if own is not None:
        resource["metadata"]["annotations"] = own
    for location in locations:
        resource = _merged(resource, draw(_along(location.segments, location.shape)))
    return resource


@functools.cache
def _default_registration() -> Registration:
    return registration(load_config({}), WORKLOAD_WEBHOOK)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([(kind, version) for kind in OPERATOR_KINDS for version in kind.versions]),
    operator_resources(),
    st.sampled_from(NAMESPACES),
)
def test_the_predicate_sends_exactly_the_operator_resources_the_registration_sends(
    kind_version: tuple[WorkloadKind, str], resource: dict, namespace: str
) -> None:
    kind, version = kind_version
    selection = sends_workload(resource, kind.group, version, kind.kind, namespace, OWN)
    cluster_scoped = kind.scope == "Cluster"
    sent = _default_registration().sends(resource, namespace, cluster_scoped=cluster_scoped)
    assert selection.sent is sent, (kind.kind, resource, namespace, selection)
    assert (selection.why_not is None) is selection.sent


def test_kinds_outside_the_table_are_never_sent() -> None:
    annotated = {"metadata": {"annotations": {"castops.io/optimize": "true"}}}
    selection = sends_workload(annotated, "", "v1", "ConfigMap", "default")
    assert not selection.sent
    assert selection.why_not == "ConfigMap is not a workload CastSlice reviews"


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
