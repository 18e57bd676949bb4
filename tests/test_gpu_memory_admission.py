"""GPU memory requests and limits written at admission, through the deployed entry point: each
backend's values, bursts, several GPUs, a Pod's own values replaced, and what is left alone.
Each Pod is compared whole after its patch is applied."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from castslice.cli import main
from castslice.contract.gpu_memory import LIMIT_ENV, REQUEST_ENV
from tests.factories import (
    APPLIED,
    apply_response,
    container,
    gpu_container,
    make_pod,
    make_review,
    opted_in,
    review_response,
)

BURST = "castops.io/gpu-memory-burst"
H200 = {"CASTSLICE_GPU_MEMORY": "143771Mi"}
DRIVER = "nvidia.com/cuda.driver-version.major"
MEMORY = "nvidia.com/gpu.memory"
# The required node affinity that keeps a Pod with limits on nodes that enforce them.
ENFORCING = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": DRIVER, "operator": "Gt", "values": ["614"]},
                        {"key": MEMORY, "operator": "Gt", "values": ["143770"]},
                    ]
                }
            ]
        }
    }
}


def env(request: int, limit: int) -> list[dict[str, str]]:
    return [{"name": REQUEST_ENV, "value": str(request)}, {"name": LIMIT_ENV, "value": str(limit)}]


def review(client: httpx2.Client, pod: dict) -> tuple[dict, dict]:
    response = review_response(client, make_review(pod))
    return response, apply_response(pod, response)


def record(pod: dict) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(pod["metadata"]["annotations"][APPLIED])
    return decoded


def containers_of(pod: dict) -> list[dict]:
    return pod["spec"]["containers"]


# backend, extra settings, annotations, what each GPU container then holds of one GPU.
CASES = {
    "nvidia time-slicing, a quarter": ("nvidia", {}, {}, (35942, 35942)),
    "nvidia mps, a quarter": (
        "nvidia",
        {"CASTSLICE_SHARING_STRATEGY": "mps"},
        {},
        (35942, 35942),
    ),
    "nvidia, half on a 2-way pool": (
        "nvidia",
        {"CASTSLICE_SHARING_DEGREES": "2,4"},
        {"castops.io/workload-type": "inference"},
        (71885, 71885),
    ),
    "gke, a quarter": ("gke", {}, {}, (35942, 35942)),
    "dra, three of eight shares": (
        "dra",
        {"CASTSLICE_SLICES_PER_GPU": "8"},
        {"castops.io/slice-ratio": "3"},
        (53914, 53914),
    ),
    "resource, one unit": ("resource", {}, {}, (35942, 35942)),
    "nvidia, a burst to half": ("nvidia", {}, {BURST: "2"}, (35942, 71885)),
    "nvidia, a burst past the whole GPU": ("nvidia", {}, {BURST: "9"}, (35942, 143771)),
    "dra, a burst below the share": (
        "dra",
        {"CASTSLICE_SLICES_PER_GPU": "8"},
        {"castops.io/slice-ratio": "3", BURST: "1"},
        (53914, 53914),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_each_fractional_container_gets_its_share_of_the_gpus_memory(
    make_client: Callable[..., httpx2.Client], case: str
) -> None:
    backend, settings, annotations, (request, limit) = CASES[case]
    client = make_client(CASTSLICE_BACKEND=backend, **H200, **settings)
    pod = make_pod(opted_in(**annotations), [gpu_container("vllm"), container("log")])

    response, after = review(client, pod)

    vllm, log = containers_of(after)
    assert vllm["env"] == env(request, limit)
    assert log == container("log")
    statement = record(after)["memory"]
    enforced = f"memory limited to {limit} MiB by the driver ({request} MiB guaranteed)"
    if backend == "gke":
        assert statement == (
            f"GPU memory limit {limit} MiB ({request} MiB guaranteed) written, not enforced: "
            "GKE runs no nvidia-container-toolkit hook"
        )
        assert "affinity" not in after["spec"]
    else:
        assert statement == enforced
        assert after["spec"]["affinity"] == ENFORCING
    assert response["auditAnnotations"]["gpu-memory"] == statement
    assert f"{backend}: {statement}"[:117] in " ".join(response["warnings"])


def test_a_pods_own_values_are_replaced_so_it_cannot_lift_its_cap(
    make_client: Callable[..., httpx2.Client],
) -> None:
    client = make_client(CASTSLICE_BACKEND="nvidia", **H200)
    own = [
        {"name": "A", "value": "1"},
        {"name": LIMIT_ENV, "value": "999999"},
        {"name": REQUEST_ENV, "valueFrom": {"configMapKeyRef": {"name": "g", "key": "r"}}},
    ]
    sidecar = {**gpu_container("init"), "restartPolicy": "Always", "env": own[1:2]}
    pod = make_pod(
        opted_in(),
        [{**gpu_container("vllm"), "env": own, "envFrom": [{"configMapRef": {"name": "g"}}]}],
        init_containers=[sidecar],
    )

    _, after = review(client, pod)

    ours = {"name": LIMIT_ENV, "value": "35942"}, {"name": REQUEST_ENV, "value": "35942"}
    vllm = containers_of(after)[0]
    assert vllm["env"] == [own[0], *ours]
    assert vllm["envFrom"] == [{"configMapRef": {"name": "g"}}]
    assert after["spec"]["initContainers"][0]["env"] == list(ours)


def test_a_container_whose_units_may_lie_on_several_gpus_is_not_limited_and_told_why(
    make_client: Callable[..., httpx2.Client],
) -> None:
    # On resource, the device plugin spreads a container's 3 units over the node's GPUs in
    # parts CastSlice cannot know: any one number per GPU could be above what it holds there.
    client = make_client(CASTSLICE_BACKEND="resource", **H200)
    own = [{"name": LIMIT_ENV, "value": "999999"}]
    pod = make_pod(
        opted_in(**{"castops.io/slice-ratio": "3"}), [{**gpu_container("train", "3"), "env": own}]
    )

    response, after = review(client, pod)

    assert containers_of(after)[0]["env"] == own
    assert "affinity" not in after["spec"]
    assert "memory" not in record(after)
    assert response["warnings"][-1] == (
        "resource: GPU memory not limited: the Pod's 3 units may lie on several GPUs, in parts "
        "CastSlice cannot know"
    )


@pytest.mark.parametrize(
    ("backend", "annotations"),
    [
        ("nvidia", {"castops.io/workload-type": "training"}),
        ("gke", {"castops.io/workload-type": "inference"}),  # no 2-way pool: whole GPUs
        ("dra", {"castops.io/slice-ratio": "8"}),
        ("mig", {}),
    ],
)
def test_whole_gpus_and_mig_instances_keep_the_containers_own_env(
    make_client: Callable[..., httpx2.Client], backend: str, annotations: dict[str, str]
) -> None:
    client = make_client(CASTSLICE_BACKEND=backend, **H200)
    own = [{"name": LIMIT_ENV, "value": "999999"}]
    pod = make_pod(opted_in(**annotations), [{**gpu_container("vllm"), "env": own}])

    response, after = review(client, pod)

    assert containers_of(after)[0]["env"] == own
    assert "memory" not in record(after)
    assert "gpu-memory" not in response.get("auditAnnotations", {})


def test_a_pod_that_did_not_opt_in_is_unchanged(
    make_client: Callable[..., httpx2.Client],
) -> None:
    client = make_client(CASTSLICE_BACKEND="nvidia", **H200)
    pod = make_pod(None, [{**gpu_container("vllm"), "env": [{"name": LIMIT_ENV, "value": "9"}]}])

    response, after = review(client, pod)

    assert "patch" not in response
    assert after == pod


def test_without_the_setting_nothing_is_written(
    make_client: Callable[..., httpx2.Client],
) -> None:
    client = make_client(CASTSLICE_BACKEND="nvidia")
    pod = make_pod(opted_in(**{BURST: "2"}), [gpu_container("vllm")])

    _, after = review(client, pod)

    assert "env" not in containers_of(after)[0]
    assert "affinity" not in after["spec"]
    assert "memory" not in record(after)


def test_placed_as_before_where_every_node_is_said_to_enforce(
    make_client: Callable[..., httpx2.Client],
) -> None:
    client = make_client(
        CASTSLICE_BACKEND="nvidia", CASTSLICE_GPU_MEMORY_ENFORCED_ONLY="false", **H200
    )
    pod = make_pod(opted_in(), [gpu_container("vllm")])

    _, after = review(client, pod)

    assert "affinity" not in after["spec"]
    assert containers_of(after)[0]["env"] == env(35942, 35942)
    assert record(after)["memory"] == (
        "memory limited to 35942 MiB by the driver (35942 MiB guaranteed) on nodes that "
        "enforce it (driver 615+, cgroup v2)"
    )


def test_the_affinity_joins_the_pods_own_required_terms(
    make_client: Callable[..., httpx2.Client],
) -> None:
    client = make_client(CASTSLICE_BACKEND="nvidia", **H200)
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [zone]}]
            }
        }
    }
    pod = make_pod(opted_in(), [gpu_container("vllm")])
    pod["spec"]["affinity"] = copy.deepcopy(affinity)

    _, after = review(client, pod)

    terms = after["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    expected = ENFORCING["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == [
        {"matchExpressions": [zone, *expected["nodeSelectorTerms"][0]["matchExpressions"]]}
    ]


def test_a_burst_that_is_no_count_is_warned_of_and_ignored(
    make_client: Callable[..., httpx2.Client],
) -> None:
    client = make_client(CASTSLICE_BACKEND="nvidia", **H200)
    pod = make_pod(opted_in(**{BURST: "half"}), [gpu_container("vllm")])

    response, after = review(client, pod)

    assert containers_of(after)[0]["env"] == env(35942, 35942)
    assert (
        'castops.io/gpu-memory-burst="half" ignored (want a whole number of slices 1-1000); '
        "using no burst"
    ) in response["warnings"]


def test_running_again_on_its_own_output_changes_nothing(
    make_client: Callable[..., httpx2.Client],
) -> None:
    client = make_client(CASTSLICE_BACKEND="dra", **H200)
    pod = make_pod(opted_in(), [gpu_container("vllm")])
    _, after = review(client, pod)

    response, again = review(client, after)

    assert "patch" not in response
    assert again == after


def test_policy_mode_refuses_gpu_memory_limits_clearly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The policies' JSON Patch cannot find and replace a container's own values.
    monkeypatch.setenv("CASTSLICE_BACKEND", "nvidia")
    monkeypatch.setenv("CASTSLICE_GPU_MEMORY", "143771Mi")

    assert main(["policy"]) == 2

    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().endswith(
        "CASTSLICE_GPU_MEMORY is set, and policy mode does not write GPU memory limits "
        "(NVIDIA_GPU_MEMORY_REQUEST, NVIDIA_GPU_MEMORY_LIMIT); use the webhook "
        "(castslice webhook)"
    )
