"""`castslice policy`: the rendered admission policies and the CEL builders they are made of.

What the policies do on a real API server, against the webhook, is proven in
tests/e2e/test_policy_mode.py; here: structure, configuration and the text
each builder writes.
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from castslice.backends import Placement
from castslice.cli import main
from castslice.contract.definitions import WORKLOAD_KINDS, TemplateLocation, WorkloadKind
from castslice.decision.slices import share_text
from castslice.environment import load_config
from castslice.render import cel
from castslice.render.admission_policies import (
    NAME,
    WARNING_PREFIX,
    render,
    render_json,
    render_yaml,
    workload_warnings,
)
from castslice.render.admission_policies.placement import PlacementCel
from castslice.render.admission_policies.policies import WARNING_SLOTS, WARNINGS_NAME
from castslice.render.admission_policies.variables import ratio_pattern
from castslice.render.selection import workload_match_conditions, workload_rules
from castslice.render.webhook_configuration import webhook_configuration
from castslice.settings.names import parse_bounded_int

EXAMPLE_POLICY = (Path(__file__).parent.parent / "examples" / "policy.yaml").read_text()

BACKENDS = {
    "resource": {},
    "nvidia": {"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_SHARING_DEGREES": "2,4"},
    "nvidia-mps": {
        "CASTSLICE_BACKEND": "nvidia",
        "CASTSLICE_SHARING_DEGREES": "2,4",
        "CASTSLICE_SHARING_STRATEGY": "mps",
    },
    "gke": {
        "CASTSLICE_BACKEND": "gke",
        "CASTSLICE_SLICES_PER_GPU": "8",
        "CASTSLICE_SHARING_DEGREES": "2,4,8",
    },
    "enrolment": {"CASTSLICE_POLICY": EXAMPLE_POLICY},
}
KINDS = [
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    *["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 3,
]


def expressions(manifest: dict) -> list[str]:
    """Every CEL expression in one policy."""
    spec = manifest["spec"]
    found = [c["expression"] for c in spec.get("matchConditions", [])]
    found += [v["expression"] for v in spec.get("variables", [])]
    found += [m["jsonPatch"]["expression"] for m in spec.get("mutations", [])]
    for validation in spec.get("validations", []):
        found += [validation["expression"], validation["messageExpression"]]
    found += [a["valueExpression"] for a in spec.get("auditAnnotations", [])]
    return found


# --- the rendered objects ----------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.36.0", "1.37.0"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_rendered_objects_match_the_kubernetes_schemas(backend: str, version: str) -> None:
    objects = render(load_config(BACKENDS[backend]))
    assert [obj["kind"] for obj in objects] == KINDS
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_policies_never_block_and_match_what_the_webhook_registration_matches(
    backend: str,
) -> None:
    config = load_config(BACKENDS[backend])
    (
        mutating,
        mutating_binding,
        audit,
        audit_binding,
        warnings,
        warnings_binding,
        workloads,
        workload_binding,
    ) = render(config)
    for policy in (mutating, audit, warnings):
        spec = policy["spec"]
        assert spec["failurePolicy"] == "Ignore"
        assert spec["matchConstraints"]["resourceRules"] == [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "scope": "*",
            }
        ]
        [excluded] = spec["matchConstraints"]["namespaceSelector"]["matchExpressions"]
        assert excluded == {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", "kube-node-lease", "castslice"],
        }
    assert mutating["spec"]["reinvocationPolicy"] == "Never"
    assert [m["patchType"] for m in mutating["spec"]["mutations"]] == ["JSONPatch"]
    assert mutating_binding["spec"] == {"policyName": NAME}
    # The audit annotations carry the webhook's keys: `pods.castslice.castops.io/slices`...
    assert audit["metadata"]["name"] == NAME
    assert audit_binding["spec"] == {"policyName": NAME, "validationActions": ["Warn", "Audit"]}
    assert "validations" not in audit["spec"]
    # ...and `instance` where a placement states what the Pod really gets (an MPS client).
    stated = (
        ["instance"] if config.sharing_strategy == "mps" and config.backend != "resource" else []
    )
    assert [a["key"] for a in audit["spec"]["auditAnnotations"]] == [
        "slices",
        "slice-source",
        "backend",
        *stated,
    ]
    assert warnings_binding["spec"] == {
        "policyName": WARNINGS_NAME,
        "validationActions": ["Warn", "Audit"],
    }
    assert len(warnings["spec"]["validations"]) == WARNING_SLOTS
    assert "auditAnnotations" not in warnings["spec"]
    # The webhook registration is the one source of what is reviewed at all.
    registration = webhook_configuration(config, url="https://castslice.example/")
    pods, workload_hook = registration["webhooks"]
    assert (
        mutating["spec"]["matchConditions"][: len(pods["matchConditions"])]
        == (pods["matchConditions"])
    )
    assert mutating["spec"]["matchConstraints"]["namespaceSelector"] == pods["namespaceSelector"]
    assert workloads["spec"]["failurePolicy"] == "Ignore"
    # Policy mode reviews the built-in workload kinds only; the webhook adds the operators'
    # (docs/operators.md).
    assert workloads["spec"]["matchConditions"] == workload_match_conditions()
    assert workloads["spec"]["matchConstraints"]["resourceRules"] == workload_rules()
    assert workload_hook["rules"][: len(workload_rules())] == workload_rules()
    assert len(workloads["spec"]["validations"]) == WARNING_SLOTS
    assert workload_binding["spec"] == {
        "policyName": "workloads.castslice.castops.io",
        "validationActions": ["Warn", "Audit"],
    }


def test_the_yaml_says_what_policy_mode_lacks_and_parses_to_the_objects() -> None:
    config = load_config({})
    text = render_yaml(config)
    comments = [line for line in text.splitlines() if line.startswith("#")]
    header = "\n".join(comments)
    assert "Kubernetes 1.36 or later" in header
    assert "no request log" in header and "no Prometheus metrics" in header
    assert "workloads.castslice.castops.io for workloads" in header
    assert WARNING_PREFIX.strip() in header
    assert "backend=resource" in header and "presets=training=4,inference=2,batch=2,dev=1" in header
    assert list(yaml.safe_load_all(text)) == render(config)
    assert yaml.safe_load(render_json(config))["items"] == render(config)


def test_castslice_policy_prints_the_rendering_of_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CASTSLICE_BACKEND", "gke")
    assert main(["policy"]) == 0
    assert capsys.readouterr().out == render_yaml(load_config({"CASTSLICE_BACKEND": "gke"}))
    assert main(["policy", "-o", "json"]) == 0
    assert capsys.readouterr().out == render_json(load_config({"CASTSLICE_BACKEND": "gke"}))


def test_castslice_policy_refuses_an_invalid_setting_by_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CASTSLICE_SHARING_DEGREES", "1")
    assert main(["policy"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "CASTSLICE_SHARING_DEGREES" in captured.err and "Traceback" not in captured.err


def test_names_and_presets_come_from_the_configuration() -> None:
    config = load_config(
        {
            "CASTSLICE_GPU_RESOURCE": "example.com/accel",
            "CASTSLICE_SHARED_RESOURCE": "example.com/accel-part",
            "CASTSLICE_PRESETS": "big=7,tiny=1",
            "CASTSLICE_DEFAULT_SLICES": "3",
            "CASTSLICE_MAX_SLICE_RATIO": "50",
        }
    )
    text = "\n".join(e for policy in render(config)[::2] for e in expressions(policy))
    assert "nvidia.com" not in text
    assert "'example.com/accel'" in text and "'example.com~1accel-part'" not in text
    assert "/resources/requests/example.com~1accel-part" in text
    assert "{'big': 7, 'tiny': 1}" in text
    assert "want a whole number 1-50" in text
    assert "want big|tiny" in text
    assert ": 3))" in text  # the default slice count


# --- the builders ------------------------------------------------------------------------


def test_literals_of_configuration_values() -> None:
    assert cel.literal({"a/b": 1, "c": [2, "x"]}) == "{'a/b': 1, 'c': [2, 'x']}"
    assert cel.literal(True) == "true"
    assert cel.literal([]) == "[]"
    with pytest.raises(TypeError):
        cel.literal(1.5)


def test_small_combinators() -> None:
    assert cel.if_else("a", "1", "2") == "(a ? 1 : 2)"
    assert cel.concat(["[a]"]) == "[a]"
    assert cel.concat(["[a]", "[b]"]) == "([a] +\n[b])"
    assert cel.let("x", "f(y)", "x + x") == "[f(y)].map(x, x + x)[0]"
    assert cel.optional_map("o.?m") == "o.?m.orValue({})"
    assert cel.variable("slices") == "variables.slices"
    assert cel.jsonpatch("add", "'/a'", "'1'") == "JSONPatch{op: 'add', path: '/a', value: '1'}"
    assert cel.jsonpatch("remove", "'/a'") == "JSONPatch{op: 'remove', path: '/a'}"
    assert cel.clip("m", 10) == "[m].map(t, size(t) <= 10 ? t : t.substring(0, 7) + '...')[0]"


@pytest.mark.parametrize("maximum", [1, 9, 10, 1000, 1_000_000])
@pytest.mark.parametrize(
    "text", ["1", "0", "00", "007", "9", "10", "11", "1000", "1001", "+1", "1.0", "", " 1", "x"]
)
def test_the_slice_ratio_pattern_accepts_what_parse_bounded_int_accepts(
    maximum: int, text: str
) -> None:
    # The pattern bounds the digits; the policy then compares the number with the maximum.
    matches = re.fullmatch(ratio_pattern(maximum).strip("^$"), text) is not None
    accepted = matches and int(text) <= maximum
    assert accepted == (parse_bounded_int(text, maximum) is not None)


_NVIDIA_SHARED = "nvidia.com/gpu.shared"
_REPLICAS, _NVIDIA_STRATEGY = "nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy"
_GKE_STRATEGY = "cloud.google.com/gke-gpu-sharing-strategy"
_GKE_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"
_GKE_PARTITION = "cloud.google.com/gke-gpu-partition-size"
_RESOURCE_WHOLE = Placement("nvidia.com/gpu-shared", 4, {}, Fraction(1))
# What docs/backends.md says each backend gives, per sharing degree and for whole GPUs.
EXPECTED_PLACEMENT: dict[str, tuple[dict[int, Placement], Placement]] = {
    "resource": ({}, _RESOURCE_WHOLE),
    "enrolment": ({}, _RESOURCE_WHOLE),
    "nvidia": (
        {
            degree: Placement(
                _NVIDIA_SHARED,
                1,
                {_REPLICAS: str(degree), _NVIDIA_STRATEGY: "time-slicing"},
                Fraction(1, degree),
            )
            for degree in (2, 4)
        },
        Placement("nvidia.com/gpu", 1, {_NVIDIA_STRATEGY: "none"}, Fraction(1)),
    ),
    "nvidia-mps": (
        {
            degree: Placement(
                _NVIDIA_SHARED,
                1,
                {_REPLICAS: str(degree), _NVIDIA_STRATEGY: "mps"},
                Fraction(1, degree),
                instance=(
                    f"MPS client, at most 1/{degree} of the GPU's memory per process "
                    "(enforced in software, not with MIG)"
                ),
            )
            for degree in (2, 4)
        },
        Placement("nvidia.com/gpu", 1, {_NVIDIA_STRATEGY: "none"}, Fraction(1)),
    ),
    "gke": (
        {
            degree: Placement(
                "nvidia.com/gpu",
                1,
                {_GKE_STRATEGY: "time-sharing", _GKE_CLIENTS: str(degree)},
                Fraction(1, degree),
            )
            for degree in (2, 4, 8)
        },
        Placement("nvidia.com/gpu", 1, {}, Fraction(1), (_GKE_STRATEGY, _GKE_PARTITION)),
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_placement_values_are_what_each_backend_gives(backend: str) -> None:
    config = load_config(BACKENDS[backend])
    placement = PlacementCel(config)
    sharing, whole = EXPECTED_PLACEMENT[backend]
    assert placement.sharing == sharing
    assert placement.whole == whole
    variables = dict(placement.variables())
    for degree, answer in placement.sharing.items():
        assert f"{degree}: {cel.string(share_text(answer.gpus))}" in variables["share"]
    assert (
        placement.renamed()
        == {"resource": "true", "nvidia": "variables.degree > 0", "gke": "false"}[config.backend]
    )


def test_a_backend_with_no_reachable_sharing_degree_only_gives_whole_gpus() -> None:
    config = load_config(
        {
            "CASTSLICE_BACKEND": "gke",
            "CASTSLICE_SLICES_PER_GPU": "2",
            "CASTSLICE_SHARING_DEGREES": "4",
        }
    )
    placement = PlacementCel(config)
    assert placement.sharing == {}
    assert placement.renamed() == "false"


def test_kinds_with_templates_in_maps_or_lists_are_left_to_the_webhook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = render(load_config({}))
    trainer = WorkloadKind(
        "example.com",
        ("v1",),
        "Trainer",
        "trainers",
        (TemplateLocation("spec.replicaSpecs.*.template"),),
    )
    monkeypatch.setattr(workload_warnings, "WORKLOAD_KINDS", (*WORKLOAD_KINDS, trainer))
    after = render(load_config({}))
    # The workload policy neither matches the kind nor changes for the kinds it renders.
    assert after == before
    rules = after[6]["spec"]["matchConstraints"]["resourceRules"]
    assert all("trainers" not in rule["resources"] for rule in rules)
