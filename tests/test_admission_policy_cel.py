"""Policy mode's CEL against the webhook's Python decision, evaluated in process.

The rendered admission policies run in tests/kubernetes_cel (cel-python with the
parts of Kubernetes' CEL environment it lacks) on the corpus the end-to-end suite
sends to the API server (tests/policy_shapes.py) and on Pods Hypothesis draws: each
policy must store the Pod the webhook's patch stores, give its warnings word for
word and its audit annotations. A changed warning in decision/ or a broken CEL
branch fails here in seconds; tests/e2e/test_policy_cel.py and test_policy_mode.py
run the same comparison in the API server's own evaluator.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from castslice.decision.slices import shorten
from castslice.environment import load_config
from castslice.render.admission_policies.messages import shorten as cel_shorten
from castslice.settings.config import Config
from tests import kubernetes_cel
from tests.policy_comparison import pod_differences, workload_differences
from tests.policy_shapes import (
    AWKWARD_VALUES,
    BACKENDS,
    CROWDED_CONTAINERS,
    crowded,
    generated_pod,
    hand_picked,
    workloads,
)

CONFIGS: dict[str, Config] = {name: load_config(env) for name, env in BACKENDS.items()}
# The escaping of awkward values is the same CEL under every backend: the first one
# meets all of them and the crowded Pod (as many warnings as the policy has slots), the
# others the rest of the hand-picked shapes and a smaller crowded Pod.
FIRST = next(iter(BACKENDS))
SMALL_CROWD = 12


def _assert_agree(differences: list[str]) -> None:
    assert not differences, f"{len(differences)} differ; the first:\n" + "\n".join(differences[:3])


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_policies_store_warn_and_audit_as_the_webhook_on_the_hand_picked_pods(
    backend: str,
) -> None:
    config = CONFIGS[backend]
    first = backend == FIRST
    crowd = crowded(CROWDED_CONTAINERS if first else SMALL_CROWD)
    shapes = [*hand_picked(config, awkward_values=first), crowd]
    differences, mutated = pod_differences(config, shapes, kubernetes_cel.run_policy)
    _assert_agree(differences)
    # Most of the corpus is opted in: a comparison of untouched Pods would prove little.
    assert mutated > len(shapes) // 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_policies_store_warn_and_audit_as_the_webhook_on_any_pod(backend: str) -> None:
    config = CONFIGS[backend]

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(generated_pod(config), min_size=2, max_size=2))
    def agree(shapes: list[dict]) -> None:
        for index, shape in enumerate(shapes):
            shape["metadata"]["name"] = f"drawn-{index}"
        differences, _ = pod_differences(config, shapes, kubernetes_cel.run_policy)
        _assert_agree(differences)

    agree()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_workload_policy_warns_as_the_webhook(backend: str) -> None:
    config = CONFIGS[backend]
    objects = workloads(hand_picked(config, awkward_values=backend == FIRST))
    differences, warned = workload_differences(config, objects, kubernetes_cel.run_policy)
    _assert_agree(differences)
    assert warned > len(objects) // 2


def _shortened(value: str) -> str:
    return kubernetes_cel.evaluate(cel_shorten("value"), value=value)


@pytest.mark.parametrize("value", AWKWARD_VALUES)
def test_values_are_shown_exactly_as_the_webhook_shows_them(value: str) -> None:
    assert _shortened(value) == shorten(value)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=30))
def test_any_text_is_shown_exactly_as_the_webhook_shows_it(value: str) -> None:
    assert _shortened(value) == shorten(value)
