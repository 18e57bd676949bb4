"""The policies' CEL against the webhook's Python, in the API server's own CEL environment.

No cluster: tests/e2e/kube/celeval evaluates the rendered policies with the
libraries, version and cost tracking of the pinned kube-apiserver. Far more
shapes than the end-to-end comparison can afford go through both engines here;
test_policy_mode.py then shows the API server itself agrees on a corpus.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from castslice.backends.tools import tools_for
from castslice.decision.admission import Admission
from castslice.decision.slices import shorten
from castslice.environment import load_config
from castslice.render.admission_policies import render
from castslice.render.admission_policies.messages import shorten as cel_shorten
from castslice.render.admission_policies.policies import WARNING_SLOTS
from castslice.render.selection import pod_match_conditions, sends_pod
from castslice.settings.config import Config
from tests.manifests import pod
from tests.policy_comparison import (
    NAMESPACES,
    POD_KIND,
    as_admitted,
    as_sent,
    pod_differences,
    pod_requests,
    workload_differences,
)
from tests.policy_shapes import (
    AWKWARD_VALUES,
    BACKENDS,
    annotated,
    crowd_for,
    crowded,
    generated,
    gpu,
    hand_picked,
    workloads,
)

from . import celeval
from .conftest import missing
from .tools import MissingTool

# MutatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1) from Kubernetes 1.36.
pytestmark = pytest.mark.kubernetes("1.36")

GENERATED = 250
GENERATED_WORKLOADS = 100
# The API server's limit for one CEL expression (k8s.io/apiserver celconfig.PerCallLimit);
# the policies' whole evaluation must stay far below it.
PER_CALL_LIMIT = 1_000_000


@pytest.fixture(autouse=True, scope="module")
def _celeval() -> None:
    """Build the evaluator first, so a missing Go toolchain is reported like any missing tool."""
    try:
        celeval.binary()
    except MissingTool as error:
        missing(error)


@pytest.mark.parametrize("backend", BACKENDS)
def test_both_engines_agree_on_every_generated_pod(backend: str) -> None:
    config = load_config(BACKENDS[backend])
    shapes = [*hand_picked(config), *generated(config, GENERATED), crowded(crowd_for(config))]
    differences, mutated = pod_differences(config, shapes, celeval.run_policy)
    assert not differences, "\n".join(differences[:5])
    assert mutated > len(shapes) // 3


def backend_notes(config: Config) -> tuple[str, ...]:
    """The backend's notes on a one-slice Pod's placement (an MPS client's cap)."""
    backend = tools_for(config)
    return backend.notes(backend.place(1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pod_given_what_it_asked_for_never_runs_the_warning_validations(backend: str) -> None:
    """The common opted-in Pod gets no warning: the warning policy's matchConditions leave it
    out (its validations are what policy mode would spend most of its time on), and its
    audit annotations still come, from the policy without validations."""
    config = load_config(BACKENDS[backend])
    mutating, _, audit, _, warning, *_ = render(config)
    quiet = [
        pod("one-gpu", [gpu("main")], annotations=annotated()),
        pod("preset", [gpu("main"), gpu("side")], annotations=annotated(type="inference")),
        pod("init", [gpu("main")], init_containers=[gpu("fetch")], annotations=annotated()),
    ]
    loud = [
        pod("ratio", [gpu("main")], annotations=annotated(ratio="x")),
        pod("unknown-type", [gpu("main")], annotations=annotated(type="huge")),
        pod("two-gpus", [gpu("main", "2")], annotations=annotated(type="dev")),
    ]
    shapes = as_sent(quiet + loud)
    requests = pod_requests(NAMESPACES[:1] * len(shapes))
    mutations = celeval.run_policy(mutating, shapes, requests)
    admitted = [as_admitted(shape, run.patch) for shape, run in zip(shapes, mutations, strict=True)]
    warned = celeval.run_policy(warning, admitted, requests)
    audited = celeval.run_policy(audit, admitted, requests)
    for shape, run, audit_run in zip(shapes, warned, audited, strict=True):
        expected = Admission(config).review(
            {"uid": "u", "operation": "CREATE", "kind": POD_KIND, "object": shape}
        )
        assert audit_run.audit == expected.response["auditAnnotations"]
        # An MPS Pod is always told its cap: then every Pod is loud.
        warned_by_webhook = bool(expected.response.get("warnings"))
        assert warned_by_webhook == (shape in loud or bool(backend_notes(config)))
        assert run.matched == warned_by_webhook, shape["metadata"]["name"]
        assert (run.messages or []) == expected.response.get("warnings", [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_crowded_pod_stays_far_below_the_cel_cost_limit(backend: str) -> None:
    config = load_config(BACKENDS[backend])
    mutating, _, _, _, warning, *_ = render(config)
    pod = crowded(crowd_for(config))
    [mutation] = celeval.run_policy(mutating, [pod], pod_requests(NAMESPACES[:1]))
    admitted = as_admitted(pod, mutation.patch)
    [validation] = celeval.run_policy(warning, [admitted], pod_requests(NAMESPACES[:1]))
    assert len(validation.messages) == WARNING_SLOTS
    # Summed over every expression of the policy, each being limited on its own.
    assert mutation.cost < PER_CALL_LIMIT / 10
    assert validation.cost < PER_CALL_LIMIT / 10


def _shortened(values: list[str]) -> list[str]:
    expression = cel_shorten("value")
    return [r.value for r in celeval.evaluate_many([(expression, {"value": v}) for v in values])]


def test_values_are_shown_exactly_as_the_webhook_shows_them() -> None:
    values = list(AWKWARD_VALUES)
    assert _shortened(values) == [shorten(value) for value in values]


def test_any_text_is_shown_exactly_as_the_webhook_shows_it() -> None:
    found: list[str] = []

    @settings(
        max_examples=500,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(st.text(max_size=40))
    def collect(value: str) -> None:
        found.append(value)

    collect()
    assert _shortened(found) == [shorten(value) for value in found]


@pytest.mark.parametrize("backend", BACKENDS)
def test_both_engines_warn_alike_about_workloads(backend: str) -> None:
    config = load_config(BACKENDS[backend])
    objects = workloads([*hand_picked(config), *generated(config, GENERATED_WORKLOADS)])
    differences, warned = workload_differences(config, objects, celeval.run_policy)
    assert not differences, "\n".join(differences[:5])
    assert warned > len(objects) // 2


# Quantities as the webhook and a manifest write them, zero and odd spellings among them.
ODD_QUANTITIES = ("0", "00", "0.0", 0, 0.0, "1e0", "1", "100m")


def test_the_predicate_sends_the_pods_the_api_servers_cel_sends() -> None:
    config = load_config({"CASTSLICE_POLICY": "rules: [{name: all, optimize: true}]"})
    conditions = [item["expression"] for item in pod_match_conditions(config)]
    pods = [
        pod(
            "p",
            [{"name": "c", "image": "i", "resources": {field: {"nvidia.com/gpu": quantity}}}],
            annotations=annotations,
        )
        for quantity in ODD_QUANTITIES
        for field in ("limits", "requests")
        for annotations in ({}, {"castops.io/optimize": "false"}, {"team.example.com/x": "1"})
    ]
    cases = [
        (expression, {"object": sent, "request": {"namespace": "team-a"}})
        for sent in as_sent(pods)
        for expression in conditions
    ]
    values = [result.value for result in celeval.evaluate_many(cases)]
    per_pod = len(conditions)
    cel_sends = [all(values[index : index + per_pod]) for index in range(0, len(values), per_pod)]
    assert [sends_pod(config, item, "team-a").sent for item in pods] == cel_sends
    # `nvidia.com/gpu: "0"` under an enrolling policy: sent by the GPU's name.
    assert cel_sends[0] and pods[0]["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "0"}
    }
