"""The generated webhook registration: its CEL builders, the configuration, the
`castslice webhook` command and the shipped file, and the equivalence of the
matchConditions with the policy, evaluated by a CEL interpreter (celpy).

The real API server evaluates the same expressions in tests/e2e/test_enrolment.py.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import re
import shlex
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from castslice.contract.definitions import POLICY_ANNOTATION
from castslice.decision.enrolment import decide
from castslice.environment import load_config
from castslice.render import cel
from castslice.render.selection import glob_matches
from castslice.render.webhook_configuration import (
    POD_WEBHOOK,
    WORKLOAD_WEBHOOK,
    RegistrationError,
    to_yaml,
    webhook_configuration,
)
from castslice.settings.config import Config
from castslice.settings.rules import Policy
from tests.conftest import ROOT
from tests.helpers import run_cli
from tests.registrations import (
    CEL,
    KINDS,
    SELECTOR_CASES,
    URL,
    WORKLOADS,
    Sender,
    pods,
    policies,
    webhook,
)

SHIPPED = ROOT / "infra" / "webhook" / "mutatingwebhookconfiguration.yaml"
EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"


def evaluate(expression: str, **variables: Any) -> bool:
    """`expression` as a CEL interpreter computes it; an evaluation error fails the test."""
    program = CEL.program(CEL.compile(expression))
    result = program.evaluate({name: celpy.json_to_cel(value) for name, value in variables.items()})
    assert isinstance(result, celpy.celtypes.BoolType), result
    return bool(result)


def with_policy(text: str, **environment: str) -> Config:
    return load_config({"CASTSLICE_POLICY": text, **environment})


# CEL builders ---------------------------------------------------------------------------------


@given(st.text(max_size=30))
def test_string_literals_round_trip_through_cel(text: str) -> None:
    literal = cel.string(text)
    assert literal.isascii() and literal.isprintable()
    assert evaluate(f"{literal} == value", value=text)


def test_string_literals_escape_quotes_and_backslashes() -> None:
    assert cel.string("it's a \\ path") == "'it\\'s a \\\\ path'"
    assert cel.string_list(["a", "b'c"]) == "['a', 'b\\'c']"


def test_constants_fold_and_groups_parenthesize() -> None:
    assert cel.all_of([]) == "true"
    assert cel.any_of([]) == "false"
    assert cel.all_of(["a", "true", "b"]) == "(a && b)"
    assert cel.all_of(["a", "false"]) == "false"
    assert cel.any_of(["a", "true"]) == "true"
    assert cel.any_of(["a", "false"]) == "a"
    assert cel.negate("true") == "false"
    assert cel.negate("has(x)") == "!has(x)"
    assert cel.negate("!has(x)") == "has(x)"
    assert cel.negate("a == 'b'") == "!(a == 'b')"
    assert cel.negate("(a || b)") == "!(a || b)"
    assert cel.negate("(a) || (b)") == "!((a) || (b))"
    assert cel.unwrap("(a && b)") == "a && b"
    assert cel.unwrap("(a) && (b)") == "(a) && (b)"
    assert cel.unwrap("f(')') && (b)") == "f(')') && (b)"


@pytest.mark.parametrize(
    ("metadata", "present"),
    [({}, False), ({"labels": {}}, False), ({"labels": {"k": "v"}}, True)],
)
def test_map_lookups_are_guarded_when_the_map_is_absent(metadata: dict, present: bool) -> None:
    obj = {"metadata": metadata}
    assert evaluate(cel.has_key("object.metadata.labels", "k"), object=obj) is present
    assert evaluate(cel.lacks_key("object.metadata.labels", "k"), object=obj) is not present
    assert evaluate(cel.value_in("object.metadata.labels", "k", ["v"]), object=obj) is present
    assert (
        evaluate(cel.negate(cel.value_in("object.metadata.labels", "k", ["w", "x"])), object=obj)
        is True
    )


def test_has_path_guards_every_level_below_what_is_known() -> None:
    assert cel.has_path("object.spec.template.metadata", "object.spec") == (
        "(has(object.spec.template) && has(object.spec.template.metadata))"
    )
    assert evaluate(cel.has_path("object.spec.template.metadata"), object={"spec": {}}) is False


@pytest.mark.parametrize(
    ("glob", "expression"),
    [
        ("team-*", "request.namespace.startsWith('team-')"),
        ("*-prod", "request.namespace.endsWith('-prod')"),
        ("*", "true"),
        ("**", "true"),
        ("t?am", "request.namespace.matches('^t.am$')"),
        ("*-[ab]-*", "request.namespace.matches('^.*\\\\-[ab]\\\\-.*$')"),
        ("[!a]*", "request.namespace.matches('^[^a].*$')"),
    ],
)
def test_globs_become_the_cheapest_cel(glob: str, expression: str) -> None:
    assert glob_matches("request.namespace", glob) == expression


namespaces = st.text(alphabet="abt-0", min_size=1, max_size=7)
glob_parts = st.one_of(
    st.sampled_from(["*", "?", "a", "b", "t", "-", "0", "[ab]", "[!a]", "[a-c]", "[-0]"])
)
globs = st.lists(glob_parts, min_size=1, max_size=5).map("".join)


@settings(max_examples=150, deadline=None)
@given(globs, namespaces)
def test_glob_cel_matches_as_the_shell_and_the_function_do(glob: str, namespace: str) -> None:
    expected = fnmatch.fnmatchcase(namespace, glob)
    assert evaluate(glob_matches("request.namespace", glob), request={"namespace": namespace}) is (
        expected
    )


# The generated configuration ------------------------------------------------------------------


def test_without_a_policy_only_annotated_pods_are_sent() -> None:
    document = webhook_configuration(load_config({}), url=URL)
    pods = webhook(document, POD_WEBHOOK)
    assert pods["matchConditions"] == [
        {
            "name": "opted-in",
            "expression": "has(object.metadata.annotations) && "
            "'castops.io/optimize' in object.metadata.annotations && "
            "object.metadata.annotations['castops.io/optimize'] == 'true'",
        },
        {
            "name": "not-a-mirror-pod",
            "expression": "!has(object.metadata.annotations) || "
            "!('kubernetes.io/config.mirror' in object.metadata.annotations)",
        },
    ]
    assert "annotations" not in document["metadata"]


def test_a_policy_that_enrols_no_one_registers_as_no_policy() -> None:
    excluding = with_policy("rules: [{name: never, namespaces: [prod], optimize: false}]")
    assert (
        webhook_configuration(excluding, url=URL)["webhooks"]
        == (webhook_configuration(load_config({}), url=URL)["webhooks"])
    )


def test_both_webhooks_share_the_endpoint_and_the_safety_settings() -> None:
    document = webhook_configuration(
        load_config({}), url=URL, token="0123456789abcdefghij", ca_bundle=b"PEM"
    )
    assert document["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert document["kind"] == "MutatingWebhookConfiguration"
    assert document["metadata"] == {
        "name": "castslice",
        "labels": {"app.kubernetes.io/name": "castslice"},
    }
    assert [hook["name"] for hook in document["webhooks"]] == [POD_WEBHOOK, WORKLOAD_WEBHOOK]
    for hook in document["webhooks"]:
        assert hook["clientConfig"] == {
            "url": "https://castslice.example/0123456789abcdefghij",
            "caBundle": base64.b64encode(b"PEM").decode(),
        }
        settings_ = {key: hook[key] for key in ("failurePolicy", "sideEffects", "timeoutSeconds")}
        assert settings_ == {"failurePolicy": "Ignore", "sideEffects": "None", "timeoutSeconds": 5}
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["namespaceSelector"]["matchExpressions"] == [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", "kube-node-lease", "castslice"],
            }
        ]
    # Separate copies: editing one webhook's clientConfig leaves the other's alone.
    first, second = document["webhooks"]
    assert first["clientConfig"] is not second["clientConfig"]


def test_the_workload_webhook_covers_every_pod_template_kind() -> None:
    hook = webhook(webhook_configuration(load_config({}), url=URL), WORKLOAD_WEBHOOK)
    # Then one rule per operator's API group (tests/test_operator_kinds.py).
    assert hook["rules"][:2] == [
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["apps"],
            "apiVersions": ["v1"],
            "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"],
            "scope": "Namespaced",
        },
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["batch"],
            "apiVersions": ["v1"],
            "resources": ["jobs", "cronjobs"],
            "scope": "Namespaced",
        },
    ]


@pytest.mark.parametrize(("workload", "sent"), WORKLOADS)
def test_only_workloads_with_castslice_annotations_are_sent(workload: dict, sent: bool) -> None:
    hook = webhook(webhook_configuration(load_config({}), url=URL), WORKLOAD_WEBHOOK)
    assert Sender(hook).sends(workload, "default") is sent


def test_the_own_namespace_and_name_are_configurable() -> None:
    document = webhook_configuration(
        load_config({}), url=URL, name="castslice-staging", own_namespace="gpu-system"
    )
    assert document["metadata"]["name"] == "castslice-staging"
    for hook in document["webhooks"]:
        assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == [
            "kube-system",
            "kube-node-lease",
            "gpu-system",
        ]
    kube_system = webhook_configuration(load_config({}), url=URL, own_namespace="kube-system")
    assert kube_system["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "kube-system",
        "kube-node-lease",
    ]


def test_a_service_gets_its_path_and_the_token() -> None:
    document = webhook_configuration(
        load_config({}), service=("castslice", "castslice", "/"), token="0123456789abcdefghij"
    )
    assert document["webhooks"][0]["clientConfig"] == {
        "service": {
            "namespace": "castslice",
            "name": "castslice",
            "path": "/0123456789abcdefghij",
            "port": 443,
        }
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"url": "http://x.example/"}, "must be https://HOST[/PATH]"),
        ({"url": "https://x.example/?a=b"}, "must have no query and no fragment"),
        ({"url": "https://x.example/#a"}, "must have no query and no fragment"),
        ({"url": "https:///path"}, "must be https://HOST[/PATH]"),
        ({"url": "https://u:p@x.example/"}, "must not carry a user or password"),
        ({"url": "https://x.example:99999/"}, "is not valid"),
        ({"url": URL, "token": "short"}, "the path token must be at least 16 characters"),
        ({"url": URL, "service": ("a", "b", "/")}, "give either a URL or a Service"),
        ({}, "give either a URL or a Service"),
        ({"service": ("A", "b", "/")}, "is not a valid namespace/name"),
        ({"service": ("a", "b", "x")}, "must start with '/'"),
        ({"url": URL, "name": "Castslice"}, "is not a valid Kubernetes object name"),
        ({"url": URL, "own_namespace": "a.b"}, "is not a valid namespace name"),
    ],
)
def test_bad_endpoints_are_refused_with_a_reason(arguments: dict, message: str) -> None:
    with pytest.raises(RegistrationError, match=re.escape(message)):
        webhook_configuration(load_config({}), **arguments)


def test_the_policy_is_recorded_so_the_service_can_run_with_the_same_one() -> None:
    text = "rules: [{name: research, namespaces: [research], optimize: true, slices: 2}]"
    document = webhook_configuration(with_policy(text), url=URL)
    recorded = document["metadata"]["annotations"][POLICY_ANNOTATION]
    assert json.loads(recorded) == yaml.safe_load(text)
    # The recorded policy is itself a valid CASTSLICE_POLICY, and generates the same registration.
    assert webhook_configuration(with_policy(recorded), url=URL) == document


def test_too_long_an_expression_is_refused_before_the_api_server_sees_it() -> None:
    names = [f"ns-{index:05d}" for index in range(9000)]
    text = json.dumps({"rules": [{"name": "many", "namespaces": names, "optimize": True}]})
    with pytest.raises(RegistrationError, match="more than the API server's 100000"):
        webhook_configuration(with_policy(text), url=URL)


def test_the_gpu_resource_is_the_configured_one() -> None:
    config = with_policy(
        "rules: [{name: all, optimize: true}]", CASTSLICE_GPU_RESOURCE="example.com/tpu"
    )
    hook = webhook(webhook_configuration(config, url=URL), POD_WEBHOOK)
    sender = Sender(hook)
    tpu = {
        "metadata": {},
        "spec": {"containers": [{"resources": {"limits": {"example.com/tpu": 1}}}]},
    }
    gpu = {
        "metadata": {},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }
    assert sender.sends(tpu, "x") and not sender.sends(gpu, "x")


# Equivalence: what the CEL sends is what the policy enrols ----------------------------------

NAMESPACES = ["research", "team-a", "team-b", "prod", "t0-prod", "default", "tx"]


def function_wants(policy: Policy | None, pod: dict, namespace: str) -> bool:
    """What CastSlice itself decides: the policy enrols the GPU Pod, or it is annotated
    (and not opted out, not a mirror Pod)."""
    metadata = pod["metadata"]
    annotations = metadata.get("annotations") or {}
    if "kubernetes.io/config.mirror" in annotations:
        return False
    if annotations.get("castops.io/optimize") == "true":
        return True
    enrolment = decide(policy, annotations, namespace, metadata.get("labels") or {})
    # By the GPU's name: a Pod naming it with a count of 0 is sent, and left as it is.
    return enrolment.enrolled and any(
        "nvidia.com/gpu" in ((item.get("resources") or {}).get(field) or {})
        for kind in KINDS
        for item in pod["spec"].get(kind) or ()
        for field in ("requests", "limits")
    )


@settings(max_examples=60, deadline=None)
@given(policies(), st.lists(st.tuples(pods(), st.sampled_from(NAMESPACES)), min_size=8, max_size=8))
def test_the_cel_sends_exactly_what_the_policy_enrols_or_is_annotated(
    policy: Policy, cases: list[tuple[dict, str]]
) -> None:
    config = Config(policy=policy)
    sender = Sender(webhook(webhook_configuration(config, url=URL), POD_WEBHOOK))
    for pod, namespace in cases:
        assert sender.sends(pod, namespace) is function_wants(policy, pod, namespace), (
            pod,
            namespace,
        )


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(pods(), st.sampled_from(NAMESPACES)), min_size=5, max_size=5))
def test_without_a_policy_the_cel_sends_exactly_the_annotated_pods(
    cases: list[tuple[dict, str]],
) -> None:
    sender = Sender(webhook(webhook_configuration(load_config({}), url=URL), POD_WEBHOOK))
    for pod, namespace in cases:
        assert sender.sends(pod, namespace) is function_wants(None, pod, namespace)


@pytest.mark.parametrize(("operator", "values", "labels", "expected"), SELECTOR_CASES)
def test_every_selector_operator_sends_as_kubernetes_selects(
    operator: str, values: list[str], labels: dict[str, str], expected: bool
) -> None:
    expression: dict[str, Any] = {"key": "k", "operator": operator}
    if values:
        expression["values"] = values
    rule = {"name": "r", "podSelector": {"matchExpressions": [expression]}, "optimize": True}
    sender = Sender(
        webhook(
            webhook_configuration(with_policy(json.dumps({"rules": [rule]})), url=URL), POD_WEBHOOK
        )
    )
    gpu_pod = {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    assert sender.sends(gpu_pod, "any") is expected
    unlabelled = {"metadata": {}, "spec": gpu_pod["spec"]}
    assert sender.sends(unlabelled, "any") is (operator in ("NotIn", "DoesNotExist"))


def test_an_enrolled_namespace_sends_gpu_pods_of_every_container_kind() -> None:
    config = with_policy("rules: [{name: research, namespaces: [research], optimize: true}]")
    sender = Sender(webhook(webhook_configuration(config, url=URL), POD_WEBHOOK))
    for kind in KINDS:
        spec: dict[str, Any] = {"containers": [{"name": "plain"}]}
        spec.setdefault(kind, []).append(
            {"name": "g", "resources": {"limits": {"nvidia.com/gpu": 1}}}
        )
        pod = {"metadata": {}, "spec": spec}
        assert sender.sends(pod, "research"), kind
        assert not sender.sends(pod, "elsewhere"), kind
    assert not sender.sends({"metadata": {}, "spec": {"containers": [{"name": "a"}]}}, "research")


# `castslice webhook` and the shipped file ---------------------------------------------------


def test_the_shipped_file_is_the_output_of_the_command_in_its_header(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    text = SHIPPED.read_text()
    command = re.match(r"# Generated by `castslice (.*?)`;", text)
    assert command, "the shipped file names the command that generated it"
    status, out, _ = run_cli(shlex.split(command.group(1)), monkeypatch, capsys)
    assert status == 0
    assert out == text, "regenerate: " + command.group(0)


def test_the_shipped_file_is_the_default_registration() -> None:
    shipped = yaml.safe_load(SHIPPED.read_text())
    assert shipped == webhook_configuration(load_config({}), url="https://castslice.invalid/")


def test_the_command_prints_yaml_with_its_origin_and_hides_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("rules: [{name: research, namespaces: [research], optimize: true}]")
    token = "s3cr3t-t0ken-0123456789"
    status, out, err = run_cli(
        ["webhook", "--url", URL, "--token", token, "--policy", str(policy_file), "--name", "cs"],
        monkeypatch,
        capsys,
    )
    assert (status, err) == (0, "")
    header = out.splitlines()[0]
    assert header == (
        f"# Generated by `castslice webhook --url {URL} --token TOKEN --policy {policy_file} "
        "--name cs`; do not edit: run it again."
    )
    document = yaml.safe_load(out)
    config = load_config({"CASTSLICE_POLICY_FILE": str(policy_file)})
    assert document == webhook_configuration(config, url=URL, token=token, name="cs")
    assert out.count(token) == 2  # only in the two URLs


def test_the_policy_option_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("rules: [{name: from-file, optimize: true}]")
    environment = {"CASTSLICE_POLICY": "rules: [{name: from-env, optimize: true}]"}
    _, with_option, _ = run_cli(
        ["webhook", "--url", URL, "--policy", str(policy_file)], monkeypatch, capsys, environment
    )
    _, from_env, _ = run_cli(["webhook", "--url", URL], monkeypatch, capsys, environment)
    assert "from-file" in with_option and "from-env" not in with_option
    assert "from-env" in from_env
    assert "# With CASTSLICE_POLICY from the environment." in from_env.splitlines()[1]


def test_a_service_registration_from_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    status, out, _ = run_cli(
        ["webhook", "--service", "gpu/castslice", "--path", "/mutate", "--namespace", "gpu"],
        monkeypatch,
        capsys,
    )
    assert status == 0
    document = yaml.safe_load(out)
    assert document == webhook_configuration(
        load_config({}), service=("gpu", "castslice", "/mutate"), own_namespace="gpu"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--url", "http://x/"], "the URL 'http://x/' must be https://HOST[/PATH]"),
        (["--service", "castslice"], "--service 'castslice' must be NAMESPACE/NAME"),
        (["--url", URL, "--path", "/x"], "--path is for --service; put the path in --url"),
        (["--url", URL, "--policy", "/nonexistent"], "cannot read /nonexistent"),
        (["--url", URL, "--ca-bundle", "/nonexistent"], "cannot read /nonexistent"),
        (["--helm-values"], "--helm-values needs --policy FILE"),
        (
            ["--helm-values", "--policy", str(EXAMPLE_POLICY), "--token", "x" * 20],
            "--token is for a registration; the chart sets it",
        ),
    ],
)
def test_bad_input_exits_2_with_a_message_and_no_traceback(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    status, out, err = run_cli(["webhook", *argv], monkeypatch, capsys)
    assert (status, out) == (2, "")
    assert err.startswith(f"castslice webhook: {message}")
    assert "Traceback" not in err


def test_an_invalid_policy_file_names_the_file_rule_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("rules: [{name: a, optimize: true, slices: 0}]")
    status, _, err = run_cli(["webhook", "--url", URL, "--policy", str(path)], monkeypatch, capsys)
    assert status == 2
    assert err == (
        f'castslice webhook: {path}: rule 1 ("a"): slices: must be a whole number from 1 to '
        "1000, got 0\n"
    )


def test_a_token_mismatch_with_the_environment_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    token = "0123456789abcdefghij"
    environment = {"CASTSLICE_PATH_TOKEN": token}
    _, _, err = run_cli(["webhook", "--url", URL], monkeypatch, capsys, environment)
    assert "CASTSLICE_PATH_TOKEN is set but the endpoint does not end with it" in err
    _, _, err = run_cli(
        ["webhook", "--url", URL, "--token", token], monkeypatch, capsys, environment
    )
    assert err == ""


def test_yaml_output_has_no_anchors_and_keeps_expressions_readable() -> None:
    config = with_policy("rules: [{name: research, namespaces: [research], optimize: true}]")
    text = to_yaml(webhook_configuration(config, url=URL))
    assert "&id" not in text and "*id" not in text
    assert "expression: |-" in text
    assert yaml.safe_load(text) == webhook_configuration(config, url=URL)


def test_helm_values_carry_the_policy_as_written_and_the_conditions_made_for_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    environment = {"CASTSLICE_GPU_RESOURCE": "example.com/gpu"}
    status, out, err = run_cli(
        ["webhook", "--helm-values", "--policy", str(EXAMPLE_POLICY)],
        monkeypatch,
        capsys,
        environment,
    )
    assert (status, err) == (0, "")
    assert out.splitlines()[:2] == [
        f"# Generated by `castslice webhook --helm-values --policy {EXAMPLE_POLICY}`; do not "
        "edit: run it again.",
        "# With CASTSLICE_GPU_RESOURCE from the environment.",
    ]
    values = yaml.safe_load(out)
    text = EXAMPLE_POLICY.read_text()
    config = load_config({**environment, "CASTSLICE_POLICY": text})
    registration = webhook_configuration(config, url=URL)
    assert values == {
        "policy": text,
        "policyRegistration": {
            "policySha256": hashlib.sha256(text.encode()).hexdigest(),
            "gpuResource": "example.com/gpu",
            "podMatchConditions": registration["webhooks"][0]["matchConditions"],
            "annotation": registration["metadata"]["annotations"][POLICY_ANNOTATION],
        },
    }
