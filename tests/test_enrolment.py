"""The enrolment policy: parsing and its error messages, matching, and the decision it
drives through the deployed entry point."""

from __future__ import annotations

import fnmatch
import json
import string
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from castslice.decision.enrolment import decide
from castslice.environment import load_config
from castslice.settings.config import Config, ConfigError
from castslice.settings.enrolment_policy import (
    PolicyError,
    glob_regex,
    load_policy,
    namespace_pattern,
)
from castslice.settings.rules import OPERATORS, Policy, Requirement
from tests.factories import (
    GPU,
    SHARED,
    applied,
    apply_response,
    container,
    gpu_container,
    log_lines,
    make_pod,
    make_review,
    review_response,
)
from tests.registrations import SELECTOR_CASES

PRESETS = {"training": 4, "inference": 2, "batch": 2, "dev": 1}
SPEC_EXAMPLE = """
rules:                       # first match wins
  - name: research namespaces share by default
    namespaces: [research, "team-*"]          # names or shell-style globs
    podSelector: {matchLabels: {tier: dev}}   # a standard label selector; optional
    optimize: true                            # false: never slice these
    workloadType: dev                         # or slices: 2
"""


def policy(text: str, max_ratio: int = 1000) -> Policy:
    parsed = load_policy(text, PRESETS, max_ratio)
    assert parsed is not None
    return parsed


def rules_json(*rules: dict) -> str:
    return json.dumps({"rules": list(rules)})


# Parsing ----------------------------------------------------------------------------------


def test_the_spec_example_parses_as_written() -> None:
    (rule,) = policy(SPEC_EXAMPLE).rules
    assert rule.name == "research namespaces share by default"
    assert [p.text for p in rule.namespaces or ()] == ["research", "team-*"]
    assert rule.selector == (Requirement("tier", "In", ("dev",)),)
    assert (rule.optimize, rule.workload_type, rule.slices, rule.rule_slices) == (
        True,
        "dev",
        None,
        1,
    )
    assert rule.source == "policy:research namespaces share by default"


def test_json_and_yaml_give_the_same_policy() -> None:
    as_json = rules_json(
        {
            "name": "research",
            "namespaces": ["research", "team-*"],
            "podSelector": {"matchLabels": {"tier": "dev"}},
            "optimize": True,
            "slices": 2,
        }
    )
    as_yaml = """
rules:
- name: research
  namespaces: [research, team-*]
  podSelector:
    matchLabels:
      tier: dev
  optimize: true
  slices: 2
"""
    assert policy(as_json) == policy(as_yaml)
    assert policy(as_json).rules[0].rule_slices == 2


def test_no_rules_is_no_policy() -> None:
    assert load_policy("rules: []", PRESETS, 1000) is None


def test_the_policy_keeps_its_document_as_compact_json() -> None:
    parsed = policy(SPEC_EXAMPLE)
    assert json.loads(parsed.document) == {
        "rules": [
            {
                "name": "research namespaces share by default",
                "namespaces": ["research", "team-*"],
                "podSelector": {"matchLabels": {"tier": "dev"}},
                "optimize": True,
                "workloadType": "dev",
            }
        ]
    }
    # The same text loads back into the same policy: it is what CASTSLICE_POLICY may hold.
    assert policy(parsed.document) == parsed


BAD_POLICIES = [
    ("[]", "must be a mapping with a list of rules, as in `rules: [...]`"),
    ("rules: x", 'rules: must be a list, got "x"'),
    ("{}", "rules: required (write `rules: []` for none)"),
    ("rules: []\nrule: []", "rule: unknown field (known: rules)"),
    ("rules: [x]", 'rule 1: must be a mapping, got "x"'),
    ("rules: [{optimize: true}]", "rule 1: name: required"),
    ("rules: [{name: 7, optimize: true}]", "rule 1: name: must be a string, got 7"),
    ("rules: [{name: ' ', optimize: true}]", "rule 1: name: must not be empty"),
    (
        "rules: [{name: " + "n" * 64 + ", optimize: true}]",
        'rule 1 ("' + "n" * 35 + '..."): name: must be at most 63 characters',
    ),
    (
        'rules: [{name: "a\\tb", optimize: true}]',
        'rule 1 ("a\\tb"): name: must be printable, on one line',
    ),
    (
        "rules: [{name: a, optimize: true}, {name: a, optimize: false}]",
        'rule 2 ("a"): name: also the name of rule 1',
    ),
    (
        "rules: [{name: a}]",
        'rule 1 ("a"): optimize: required (true enrols the matching Pods, false excludes them)',
    ),
    (
        'rules: [{name: a, optimize: "true"}]',
        'rule 1 ("a"): optimize: must be true or false, got "true"',
    ),
    (
        "rules: [{name: a, optimize: true, priority: 1}]",
        'rule 1 ("a"): priority: unknown field (known: name, namespaces, podSelector, '
        "optimize, workloadType, slices)",
    ),
    (
        "rules: [{name: a, optimize: true, workloadType: gpu}]",
        'rule 1 ("a"): workloadType: "gpu" is not a configured workload type '
        "(training, inference, batch, dev)",
    ),
    (
        "rules: [{name: a, optimize: true, slices: 0}]",
        'rule 1 ("a"): slices: must be a whole number from 1 to 1000, got 0',
    ),
    (
        "rules: [{name: a, optimize: true, slices: 1001}]",
        'rule 1 ("a"): slices: must be a whole number from 1 to 1000, got 1001',
    ),
    (
        "rules: [{name: a, optimize: true, slices: true}]",
        'rule 1 ("a"): slices: must be a whole number from 1 to 1000, got true',
    ),
    (
        "rules: [{name: a, optimize: true, slices: '2'}]",
        'rule 1 ("a"): slices: must be a whole number from 1 to 1000, got "2"',
    ),
    (
        "rules: [{name: a, optimize: true, slices: 2, workloadType: dev}]",
        'rule 1 ("a"): workloadType and slices: give one of them, not both',
    ),
    (
        "rules: [{name: a, optimize: false, workloadType: dev}]",
        'rule 1 ("a"): workloadType: only a rule with optimize: true slices Pods',
    ),
    (
        "rules: [{name: a, optimize: false, slices: 2}]",
        'rule 1 ("a"): slices: only a rule with optimize: true slices Pods',
    ),
    (
        "rules: [{name: a, optimize: true, namespaces: research}]",
        'rule 1 ("a"): namespaces: must be a list of names or globs, as in '
        '[research, "team-*"], got "research"',
    ),
    (
        "rules: [{name: a, optimize: true, namespaces: []}]",
        'rule 1 ("a"): namespaces: an empty list matches no namespace; leave it out for all',
    ),
    (
        "rules: [{name: a, optimize: true, namespaces: [ok, no]}]",
        'rule 1 ("a"): namespaces[1]: false is not a string; quote it',
    ),
    (
        "rules: [{name: a, optimize: true, namespaces: [Research]}]",
        'rule 1 ("a"): namespaces[0]: "Research" can never match a namespace: names have '
        "lowercase letters, digits and '-'; globs add *, ? and [...]",
    ),
    (
        "rules: [{name: a, optimize: true, namespaces: [-research]}]",
        'rule 1 ("a"): namespaces[0]: "-research" is not a namespace name',
    ),
    (
        "rules: [{name: a, optimize: true, namespaces: ['team-[a']}]",
        "rule 1 (\"a\"): namespaces[0]: \"team-[a\" has a '[' without its ']'",
    ),
    (
        "rules: [{name: a, optimize: true, namespaces: ['team-[z-a]']}]",
        'rule 1 ("a"): namespaces[0]: "team-[z-a]" has a reversed range z-a',
    ),
    (
        "rules: [{name: a, optimize: true, namespaces: ['team-*]']}]",
        'rule 1 ("a"): namespaces[0]: "team-*]" has a stray \']\'',
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: [tier]}]",
        'rule 1 ("a"): podSelector: must be a label selector (matchLabels, matchExpressions), '
        "got a list",
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: {matchLabel: {a: b}}}]",
        'rule 1 ("a"): podSelector.matchLabel: unknown field (known: matchLabels, '
        "matchExpressions)",
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: {matchLabels: {tier: true}}}]",
        'rule 1 ("a"): podSelector.matchLabels.tier: true is not a string; quote it',
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: {matchLabels: {'a b': x}}}]",
        'rule 1 ("a"): podSelector.matchLabels.a b: "a b" is not a valid label key: its name '
        "must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter "
        "or digit",
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: {matchLabels: {'Example.com/a': x}}}]",
        'rule 1 ("a"): podSelector.matchLabels.Example.com/a: "Example.com/a" is not a valid '
        "label key: its prefix must be a lowercase DNS subdomain",
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: {matchLabels: {tier: -dev}}}]",
        'rule 1 ("a"): podSelector.matchLabels.tier: "-dev" is not a valid label value: at most '
        "63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: {matchExpressions: {key: a}}}]",
        'rule 1 ("a"): podSelector.matchExpressions: must be a list, got a mapping',
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: {matchExpressions: [{operator: In}]}}]",
        'rule 1 ("a"): podSelector.matchExpressions[0].key: required',
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: {matchExpressions: [{key: a}]}}]",
        'rule 1 ("a"): podSelector.matchExpressions[0].operator: required '
        "(one of In, NotIn, Exists, DoesNotExist)",
    ),
    (
        "rules: [{name: x, optimize: true}, {name: research, optimize: true, podSelector: "
        "{matchExpressions: [{key: a, operator: Equals, values: [b]}]}}]",
        'rule 2 ("research"): podSelector.matchExpressions[0].operator: "Equals" is not one '
        "of In, NotIn, Exists, DoesNotExist",
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: "
        "{matchExpressions: [{key: a, operator: In}]}}]",
        'rule 1 ("a"): podSelector.matchExpressions[0].values: required and non-empty for '
        "operator In",
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: "
        "{matchExpressions: [{key: a, operator: NotIn, values: []}]}}]",
        'rule 1 ("a"): podSelector.matchExpressions[0].values: required and non-empty for '
        "operator NotIn",
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: "
        "{matchExpressions: [{key: a, operator: Exists, values: [b]}]}}]",
        'rule 1 ("a"): podSelector.matchExpressions[0].values: must be empty for operator Exists',
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: "
        "{matchExpressions: [{key: a, operator: DoesNotExist, values: [b]}]}}]",
        'rule 1 ("a"): podSelector.matchExpressions[0].values: must be empty for operator '
        "DoesNotExist",
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: "
        "{matchExpressions: [{key: a, operator: In, values: [1]}]}}]",
        'rule 1 ("a"): podSelector.matchExpressions[0].values[0]: 1 is not a string; quote it',
    ),
    (
        "rules: [{name: a, optimize: true, podSelector: "
        "{matchExpressions: [{key: a, operator: In, values: [b], value: c}]}}]",
        'rule 1 ("a"): podSelector.matchExpressions[0].value: unknown field '
        "(known: key, operator, values)",
    ),
    ("rules: [a", "not valid YAML or JSON: expected ',' or ']', but got '<stream end>' at line 1"),
]


@pytest.mark.parametrize(("text", "message"), BAD_POLICIES)
def test_each_invalid_policy_is_refused_naming_the_rule_and_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config({"CASTSLICE_POLICY": text})
    assert str(raised.value).startswith(f"CASTSLICE_POLICY: {message}")


def test_an_invalid_policy_stops_the_function_at_start(
    make_client: Callable[..., TestClient],
) -> None:
    with pytest.raises(SystemExit, match=r'CASTSLICE_POLICY: rule 1 \("a"\): optimize: required'):
        make_client(CASTSLICE_POLICY="rules: [{name: a}]")


def test_the_policy_is_checked_against_the_configured_presets_and_bound() -> None:
    text = "rules: [{name: a, optimize: true, workloadType: llm}]"
    with pytest.raises(ConfigError, match='"llm" is not a configured workload type'):
        load_config({"CASTSLICE_POLICY": text})
    config = load_config({"CASTSLICE_POLICY": text, "CASTSLICE_PRESETS": "llm=8"})
    assert config.policy is not None and config.policy.rules[0].rule_slices == 8
    with pytest.raises(ConfigError, match="from 1 to 16, got 17"):
        load_config(
            {
                "CASTSLICE_POLICY": "rules: [{name: a, optimize: true, slices: 17}]",
                "CASTSLICE_MAX_SLICE_RATIO": "16",
            }
        )


def test_the_policy_file_is_read_once_and_named_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(SPEC_EXAMPLE)
    config = load_config({"CASTSLICE_POLICY_FILE": str(path)})
    path.write_text("rules: [{name: changed}]")  # read at start only: this changes nothing
    assert config.policy == policy(SPEC_EXAMPLE)

    with pytest.raises(ConfigError) as raised:
        load_config({"CASTSLICE_POLICY_FILE": str(path)})
    assert str(raised.value) == (
        f'CASTSLICE_POLICY_FILE ({path}): rule 1 ("changed"): optimize: required '
        "(true enrols the matching Pods, false excludes them)"
    )


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: None, "CASTSLICE_POLICY_FILE: cannot read {p}: No such file or directory"),
        (lambda p: p.mkdir(), "CASTSLICE_POLICY_FILE: cannot read {p}: Is a directory"),
        (lambda p: p.write_bytes(b"\xff\xfe"), "CASTSLICE_POLICY_FILE: {p} is not UTF-8 text"),
        (
            lambda p: p.write_bytes(b"#" * (1024 * 1024 + 1)),
            "CASTSLICE_POLICY_FILE: {p} is larger than 1048576 bytes",
        ),
    ],
)
def test_an_unusable_policy_file_is_named(
    tmp_path: Path, setup: Callable[[Path], object], message: str
) -> None:
    path = tmp_path / "policy.yaml"
    setup(path)
    with pytest.raises(ConfigError) as raised:
        load_config({"CASTSLICE_POLICY_FILE": str(path)})
    assert str(raised.value) == message.format(p=path)


def test_inline_and_file_policies_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="CASTSLICE_POLICY and CASTSLICE_POLICY_FILE are both"):
        load_config({"CASTSLICE_POLICY": "rules: []", "CASTSLICE_POLICY_FILE": str(tmp_path)})


def test_an_empty_policy_variable_is_refused() -> None:
    with pytest.raises(ConfigError, match="CASTSLICE_POLICY is set but empty"):
        load_config({"CASTSLICE_POLICY": " "})


# Matching ---------------------------------------------------------------------------------

# Namespace-name characters and the glob syntax around them.
NAME_CHARS = "abct-0"
names = st.text(alphabet=NAME_CHARS, min_size=1, max_size=8).filter(
    lambda s: s[0] != "-" and s[-1] != "-"
)
glob_sets = st.builds(
    lambda negated, members: "[" + ("!" if negated else "") + members + "]",
    st.booleans(),
    st.sampled_from(["a", "ab", "a-c", "0-9", "t", "-a", "a-", "a-c0"]),
)
globs = st.lists(
    st.one_of(st.sampled_from(["*", "?"]), st.sampled_from(list("abct0-")), glob_sets),
    min_size=1,
    max_size=6,
).map("".join)


@given(globs, names)
def test_globs_match_as_the_shell_does(glob: str, namespace: str) -> None:
    try:
        pattern = namespace_pattern(glob)
    except PolicyError:
        return  # validation may refuse odd globs; those that pass must agree with fnmatch
    rule = policy(rules_json({"name": "r", "namespaces": [glob], "optimize": True})).rules[0]
    assert rule.matches(namespace, {}) == fnmatch.fnmatchcase(namespace, glob)
    if pattern.regex is not None:
        assert pattern.regex == glob_regex(glob)


def test_a_glob_is_compiled_once_and_a_name_is_not_a_glob() -> None:
    rule = policy(
        rules_json({"name": "r", "namespaces": ["research", "team-*", "t?"], "optimize": True})
    ).rules[0]
    assert [p.regex for p in rule.namespaces or ()] == [None, r"^team\-.*$", "^t.$"]
    assert [rule.matches(ns, {}) for ns in ("research", "team-a", "team-", "tx", "researchx")] == [
        True,
        True,
        True,
        True,
        False,
    ]


@pytest.mark.parametrize(("operator", "values", "labels", "expected"), SELECTOR_CASES)
def test_every_selector_operator_matches_as_kubernetes_does(
    operator: str, values: list[str], labels: dict[str, str], expected: bool
) -> None:
    expression: dict = {"key": "k", "operator": operator}
    if values:
        expression["values"] = values
    text = rules_json(
        {"name": "r", "podSelector": {"matchExpressions": [expression]}, "optimize": True}
    )
    assert policy(text).rules[0].matches("any", labels) is expected
    assert {case[0] for case in SELECTOR_CASES} == set(OPERATORS)


def test_match_labels_and_expressions_must_all_hold() -> None:
    rule = policy(
        rules_json(
            {
                "name": "r",
                "podSelector": {
                    "matchLabels": {"tier": "dev", "team": "ml"},
                    "matchExpressions": [{"key": "gpu", "operator": "Exists"}],
                },
                "optimize": True,
            }
        )
    ).rules[0]
    assert rule.matches("x", {"tier": "dev", "team": "ml", "gpu": ""})
    assert not rule.matches("x", {"tier": "dev", "team": "ml"})
    assert not rule.matches("x", {"tier": "prod", "team": "ml", "gpu": ""})
    # An empty selector selects everything, as in Kubernetes.
    everything = policy(rules_json({"name": "r", "podSelector": {}, "optimize": True})).rules[0]
    assert everything.selector is None and everything.matches("x", {})


labels_st = st.dictionaries(st.sampled_from(["k", "tier", "app"]), st.sampled_from(["a", "b"]))
rule_st = st.fixed_dictionaries(
    {
        "namespaces": st.one_of(st.none(), st.lists(st.sampled_from(["a", "b", "t*"]), min_size=1)),
        "label": st.one_of(
            st.none(), st.tuples(st.sampled_from(["k", "tier"]), st.sampled_from(["a", "b"]))
        ),
        "optimize": st.booleans(),
    }
)


@given(st.lists(rule_st, min_size=1, max_size=6), st.sampled_from(["a", "b", "tx", "c"]), labels_st)
def test_the_first_matching_rule_decides(rules: list[dict], namespace: str, labels: dict) -> None:
    documents = []
    for index, rule in enumerate(rules):
        document: dict = {"name": f"rule-{index}", "optimize": rule["optimize"]}
        if rule["namespaces"] is not None:
            document["namespaces"] = rule["namespaces"]
        if rule["label"] is not None:
            document["podSelector"] = {"matchLabels": dict([rule["label"]])}
        documents.append(document)
    parsed = policy(rules_json(*documents))

    def holds(rule: dict) -> bool:
        in_namespace = rule["namespaces"] is None or any(
            fnmatch.fnmatchcase(namespace, pattern) for pattern in rule["namespaces"]
        )
        labelled = rule["label"] is None or labels.get(rule["label"][0]) == rule["label"][1]
        return in_namespace and labelled

    first = next((index for index, rule in enumerate(rules) if holds(rule)), None)
    found = parsed.first_match(namespace, labels)
    assert (found.name if found else None) == (None if first is None else f"rule-{first}")
    enrolment = decide(parsed, {}, namespace, labels)
    assert enrolment.enrolled is (first is not None and rules[first]["optimize"])


# The decision: annotations win over rules --------------------------------------------------

ENROL_AND_EXCLUDE = policy(
    """
rules:
  - name: never in prod
    namespaces: [prod]
    optimize: false
  - name: research
    namespaces: [research]
    optimize: true
    workloadType: inference
"""
)


@pytest.mark.parametrize(
    ("optimize", "namespace", "enrolled", "rule", "reason"),
    [
        (None, "research", True, "research", None),
        (None, "prod", False, "never in prod", "excluded by policy"),
        (None, "elsewhere", False, None, "not opted in"),
        ("false", "research", False, None, "opted out"),
        ("true", "prod", True, None, None),
        ("true", "research", True, "research", None),  # the rule's count still applies
        ("true", "elsewhere", True, None, None),
        ("yes", "research", True, "research", None),  # not "true": the policy decides
        ("yes", "elsewhere", False, None, "not opted in"),
    ],
)
def test_pod_annotations_win_over_rules(
    optimize: str | None, namespace: str, enrolled: bool, rule: str | None, reason: str | None
) -> None:
    annotations = {} if optimize is None else {"castops.io/optimize": optimize}
    decision = decide(ENROL_AND_EXCLUDE, annotations, namespace, {})
    assert decision.enrolled is enrolled
    assert (decision.rule.name if decision.rule else None) == rule
    assert decision.reason == reason


def test_without_a_policy_only_exactly_true_opts_in() -> None:
    assert decide(None, {"castops.io/optimize": "true"}, "x", {}).enrolled
    for value in ("false", "True", "yes", ""):
        assert not decide(None, {"castops.io/optimize": value}, "x", {}).enrolled
    assert not decide(None, {}, "x", {}).enrolled


# Through the deployed entry point --------------------------------------------------------


@pytest.fixture
def research_client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client(CASTSLICE_POLICY=ENROL_AND_EXCLUDE.document)


def pod_in(namespace: str, annotations: dict | None = None, **kwargs: object) -> dict:
    pod = make_pod(annotations, **kwargs)  # type: ignore[arg-type]
    pod["metadata"]["namespace"] = namespace
    return pod


def review_in(namespace: str, pod: dict) -> dict:
    review = make_review(pod)
    review["request"]["namespace"] = namespace
    return review


def test_an_enrolled_unannotated_gpu_pod_is_sliced_and_says_which_rule(
    research_client: TestClient, capsys: pytest.CaptureFixture
) -> None:
    pod = pod_in("research")
    response = review_response(research_client, review_in("research", pod))
    expected = pod_in(
        "research",
        containers=[container(requests={"cpu": "1", SHARED: "2"}, limits={SHARED: "2"})],
    )
    assert apply_response(pod, response) == applied(expected, 2, "policy:research", {"main": "1"})
    assert response["auditAnnotations"] == {
        "slices": "2",
        "slice-source": "policy:research",
        "backend": "resource",
    }
    (line,) = log_lines(capsys)
    assert (line["decision"], line["source"], line["slices"]) == ("mutated", "policy:research", 2)


@pytest.mark.parametrize(
    ("annotations", "slices", "source"),
    [
        ({"castops.io/slice-ratio": "3"}, 3, "slice-ratio"),
        ({"castops.io/workload-type": "training"}, 4, "workload-type"),
        ({"castops.io/optimize": "true", "castops.io/slice-ratio": "5"}, 5, "slice-ratio"),
        ({"castops.io/optimize": "true"}, 2, "policy:research"),
    ],
)
def test_the_pods_own_slice_annotations_override_the_rule(
    research_client: TestClient, annotations: dict, slices: int, source: str
) -> None:
    pod = pod_in("research", annotations)
    response = review_response(research_client, review_in("research", pod))
    expected = pod_in(
        "research",
        annotations,
        containers=[
            container(requests={"cpu": "1", SHARED: str(slices)}, limits={SHARED: str(slices)})
        ],
    )
    assert apply_response(pod, response) == applied(expected, slices, source, {"main": "1"})


def test_an_invalid_pod_value_falls_back_to_the_rule_and_says_so(
    research_client: TestClient,
) -> None:
    pod = pod_in("research", {"castops.io/slice-ratio": "x"})
    response = review_response(research_client, review_in("research", pod))
    assert response["warnings"] == [
        'castops.io/slice-ratio="x" ignored (want a whole number 1-1000); '
        'using 2 slices from rule "research"'
    ]
    assert response["auditAnnotations"]["slice-source"] == "policy:research"


@pytest.mark.parametrize(
    ("namespace", "annotations", "reason", "source"),
    [
        ("research", {"castops.io/optimize": "false"}, "opted out", None),
        ("prod", None, "excluded by policy", "policy:never in prod"),
        ("elsewhere", None, "not opted in", None),
        ("research", {"kubernetes.io/config.mirror": "x"}, "mirror pod", None),
    ],
)
def test_pods_the_policy_does_not_enrol_pass_untouched(
    research_client: TestClient,
    capsys: pytest.CaptureFixture,
    namespace: str,
    annotations: dict | None,
    reason: str,
    source: str | None,
) -> None:
    pod = pod_in(namespace, annotations)
    response = review_response(research_client, review_in(namespace, pod))
    assert response == {"uid": make_review(pod)["request"]["uid"], "allowed": True}
    (line,) = log_lines(capsys)
    assert (line["decision"], line["reason"], line.get("source")) == ("skipped", reason, source)


def test_an_enrolled_pod_without_a_gpu_is_unchanged(research_client: TestClient) -> None:
    pod = pod_in("research", containers=[container(limits={"cpu": "1"})])
    response = review_response(research_client, review_in("research", pod))
    assert apply_response(pod, response) == pod


def test_labels_select_pods_through_the_entry_point(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(
        CASTSLICE_POLICY=rules_json(
            {"name": "dev tier", "podSelector": {"matchLabels": {"tier": "dev"}}, "optimize": True}
        )
    )
    labelled = pod_in("any", containers=[gpu_container()])
    labelled["metadata"]["labels"] = {"tier": "dev"}
    other = pod_in("any", containers=[gpu_container()])
    assert "patch" in review_response(client, review_in("any", labelled))
    assert "patch" not in review_response(client, review_in("any", other))


def test_rule_names_of_every_printable_length_keep_warnings_short() -> None:
    from castslice.decision.slices import MAX_WARNING_LENGTH, SliceDecision, resolve_slices

    config = Config(max_slice_ratio=1_000_000)
    for name in ("r", "n" * 63, "é" * 63, string.punctuation):
        fallback = SliceDecision(999_999, f"policy:{name}")
        for chosen in (
            {"castops.io/slice-ratio": "x" * 99},
            {"castops.io/workload-type": "y"},
        ):
            (warning,) = resolve_slices(chosen, config, fallback).warnings
            assert len(warning) <= MAX_WARNING_LENGTH
            assert warning.isascii() and warning.isprintable()
            assert "; using 999999 slices from rule " in warning


def test_a_gpu_request_in_any_container_kind_is_rewritten(research_client: TestClient) -> None:
    pod = pod_in(
        "research",
        containers=[container("app")],
        init_containers=[container("warm", limits={GPU: "1"})],
    )
    response = review_response(research_client, review_in("research", pod))
    assert apply_response(pod, response)["spec"]["initContainers"][0]["resources"] == {
        "limits": {SHARED: "2"}
    }
