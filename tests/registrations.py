"""The webhook registration as the API server applies it, for the tests of the registration
and of the predicates that mirror it: its matchConditions evaluated by a CEL interpreter
(celpy), its namespaceSelector, and the Pods, policies and workloads drawn for them."""

from __future__ import annotations

import json
from typing import Any

import celpy
from hypothesis import strategies as st

from castslice.render.webhook_configuration import webhook_configuration
from castslice.settings.config import Config
from castslice.settings.enrolment_policy import load_policy
from castslice.settings.rules import Policy

CEL = celpy.Environment()


PRESETS = {"training": 4, "inference": 2, "batch": 2, "dev": 1}


URL = "https://castslice.example/"


def webhook(document: dict, name: str) -> dict:
    return next(hook for hook in document["webhooks"] if hook["name"] == name)


class Sender:
    """The API server's choice for one webhook: every matchCondition must be true."""

    def __init__(self, hook: dict) -> None:
        self.programs = [
            CEL.program(CEL.compile(condition["expression"]))
            for condition in hook["matchConditions"]
        ]

    def sends(self, obj: dict, namespace: str) -> bool:
        activation = {
            "object": celpy.json_to_cel(obj),
            "request": celpy.json_to_cel({"namespace": namespace, "operation": "CREATE"}),
        }
        results = []
        for program in self.programs:
            result = program.evaluate(activation)
            assert isinstance(result, celpy.celtypes.BoolType), result
            results.append(bool(result))
        return all(results)


def template(annotations: dict | None) -> dict:
    metadata = {} if annotations is None else {"annotations": annotations}
    return {"metadata": metadata, "spec": {"containers": [{"name": "a"}]}}


WORKLOADS = [
    # (workload, sent): annotations on the object, on its template, on a CronJob's template.
    ({"metadata": {"annotations": {"castops.io/optimize": "true"}}, "spec": {}}, True),
    ({"metadata": {}, "spec": {"template": template({"castops.io/slice-ratio": "x"})}}, True),
    ({"metadata": {}, "spec": {"template": template({"castops.io/optimize": "true"})}}, True),
    (
        {
            "metadata": {},
            "spec": {"jobTemplate": {"spec": {"template": template({"castops.io/a": "1"})}}},
        },
        True,
    ),
    ({"metadata": {"annotations": {"other.io/x": "y"}}, "spec": {"template": template({})}}, False),
    ({"metadata": {}, "spec": {"template": template(None)}}, False),
    ({"metadata": {}, "spec": {"jobTemplate": {"spec": {"template": {}}}}}, False),
    ({"metadata": {}, "spec": {"jobTemplate": {}}}, False),
    ({"metadata": {}}, False),
    ({"metadata": {"annotations": {"castops.io.example/x": "y"}}}, False),
]


KINDS = ("initContainers", "containers", "ephemeralContainers")


LABEL_KEYS = ["tier", "team", "example.com/gpu"]


LABEL_VALUES = ["dev", "prod", "a"]


# Resources as the API server hands them to CEL (a null map is never there: it is dropped
# when the request is decoded); half of them name the GPU, in requests, limits or both.
resources = st.sampled_from(
    [
        None,
        {},
        {"limits": {"cpu": "1"}},
        {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}},
        {"limits": {"nvidia.com/gpu": "1"}},
        {"requests": {"nvidia.com/gpu": "2"}},
        {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
        {"limits": {"nvidia.com/gpu-shared": "1"}},
        # Zero and odd spellings: the CEL goes by the GPU's name, whatever the quantity.
        {"limits": {"nvidia.com/gpu": "0"}},
        {"requests": {"nvidia.com/gpu": "00"}},
        {"limits": {"nvidia.com/gpu": 0.0}},
        {"limits": {"nvidia.com/gpu": "1e0"}},
        {"requests": {"nvidia.com/gpu": 0}, "limits": {"cpu": "1"}},
    ]
)


@st.composite
def pods(draw: st.DrawFn) -> dict:
    spec: dict[str, Any] = {}
    for kind in KINDS:
        # Every Pod has containers; init and ephemeral ones sometimes.
        count = draw(st.integers(1, 2)) if kind == "containers" else draw(st.integers(0, 1))
        if count or draw(st.booleans()):
            items = []
            for index in range(count):
                item: dict[str, Any] = {"name": f"{kind}-{index}"}
                chosen = draw(resources)
                if chosen is not None:
                    item["resources"] = chosen
                items.append(item)
            spec[kind] = items
    metadata: dict[str, Any] = {"name": "p"}
    labels = draw(st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES)))
    if labels or draw(st.booleans()):
        metadata["labels"] = labels
    annotations: dict[str, str] = {}
    optimize = draw(st.sampled_from([None, None, None, None, "true", "false", "yes", ""]))
    if optimize is not None:
        annotations["castops.io/optimize"] = optimize
    if draw(st.integers(0, 9)) == 0:
        annotations["kubernetes.io/config.mirror"] = "x"
    if draw(st.booleans()):
        annotations["team.example.com/owner"] = "vision"
    if annotations or draw(st.booleans()):
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}


requirements = st.one_of(
    st.builds(
        lambda key, operator, values: {"key": key, "operator": operator, "values": values},
        st.sampled_from(LABEL_KEYS),
        st.sampled_from(["In", "NotIn"]),
        st.lists(st.sampled_from(LABEL_VALUES), min_size=1, max_size=2, unique=True),
    ),
    st.builds(
        lambda key, operator: {"key": key, "operator": operator},
        st.sampled_from(LABEL_KEYS),
        st.sampled_from(["Exists", "DoesNotExist"]),
    ),
)


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    rules = []
    for index in range(draw(st.integers(1, 4))):
        optimize = draw(st.sampled_from([True, True, False]))
        rule: dict[str, Any] = {"name": f"rule {index}", "optimize": optimize}
        if draw(st.booleans()):
            rule["namespaces"] = draw(
                st.lists(
                    st.sampled_from(["research", "team-*", "*-prod", "t?", "[rt]*", "default"]),
                    min_size=1,
                    max_size=3,
                )
            )
        if draw(st.booleans()):
            selector: dict[str, Any] = {}
            if draw(st.booleans()):
                selector["matchLabels"] = draw(
                    st.dictionaries(
                        st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2
                    )
                )
            selector["matchExpressions"] = draw(st.lists(requirements, max_size=2))
            rule["podSelector"] = selector
        if rule["optimize"] and draw(st.booleans()):
            rule["workloadType"] = "dev"
        rules.append(rule)
    policy = load_policy(json.dumps({"rules": rules}), PRESETS, 1000)
    assert policy is not None
    return policy


OWN = "gpu-tools"


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


# Kubernetes' label selector semantics, written out: (operator, values, labels, matches).
SELECTOR_CASES = [
    ("In", ["a", "b"], {"k": "a"}, True),
    ("In", ["a", "b"], {"k": "c"}, False),
    ("In", ["a"], {}, False),
    ("NotIn", ["a", "b"], {"k": "c"}, True),
    ("NotIn", ["a", "b"], {"k": "a"}, False),
    ("NotIn", ["a"], {}, True),  # a Pod without the label is not in the set
    ("Exists", [], {"k": ""}, True),
    ("Exists", [], {"x": "k"}, False),
    ("DoesNotExist", [], {}, True),
    ("DoesNotExist", [], {"k": "a"}, False),
]
