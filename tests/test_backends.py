"""Backends: the slice count becomes resources and placement, through the deployed entry point."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import pytest
from starlette.testclient import TestClient

from castslice.backends import sharing_degree, whole_gpus
from castslice.settings.config import Config
from tests.factories import (
    APPLIED,
    GPU,
    applied,
    apply_response,
    container,
    gpu_container,
    make_pod,
    make_review,
    opted_in,
    review_response,
)

SHARED_NVIDIA = "nvidia.com/gpu.shared"
REPLICAS = "nvidia.com/gpu.replicas"
NVIDIA_STRATEGY = "nvidia.com/gpu.sharing-strategy"
GKE_STRATEGY = "cloud.google.com/gke-gpu-sharing-strategy"
GKE_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"
GKE_PARTITION = "cloud.google.com/gke-gpu-partition-size"


@pytest.mark.parametrize(
    ("per_gpu", "degrees", "slices", "degree"),
    [
        (4, (4,), 1, 4),
        (4, (4,), 2, None),  # a pool of 4 would give half a GPU only a quarter
        (4, (2, 4), 2, 2),
        (4, (2, 4), 1, 4),
        (4, (2, 4), 3, None),
        (4, (2, 4), 4, None),
        (4, (8,), 1, None),  # 1/8 of a GPU is less than the quarter asked for
        (8, (2, 4, 8), 1, 8),
        (8, (2, 4, 8), 2, 4),
        (8, (2, 4, 8), 3, 2),
        (8, (2, 4, 8), 5, None),
        (4, (3,), 1, 3),
    ],
)
def test_sharing_degree_never_gives_less_than_the_share(
    per_gpu: int, degrees: tuple[int, ...], slices: int, degree: int | None
) -> None:
    config = Config(slices_per_gpu=per_gpu, sharing_degrees=degrees)
    assert sharing_degree(config, slices) == degree


@pytest.mark.parametrize(("slices", "gpus"), [(1, 1), (4, 1), (5, 2), (8, 2), (9, 3)])
def test_whole_gpus_round_up(slices: int, gpus: int) -> None:
    assert whole_gpus(Config(), slices) == gpus


def gpu_pod(workload_type: str | None = None, count: str = "1", **spec: object) -> dict:
    annotations = opted_in(**({"castops.io/workload-type": workload_type} if workload_type else {}))
    pod = make_pod(annotations, containers=[gpu_container("app", count)])
    pod["spec"].update(spec)
    return pod


NOT_SHARING = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": GKE_STRATEGY, "operator": "DoesNotExist"},
                        {"key": GKE_PARTITION, "operator": "DoesNotExist"},
                    ]
                }
            ]
        }
    }
}


def expected(
    pod: dict, resource: str, quantity: str, selector: dict, record: tuple, affinity=None
) -> dict:
    """`pod` with its GPU container moved to `quantity` of `resource`, placed by `selector`."""
    result = copy.deepcopy(pod)
    if affinity:
        result["spec"]["affinity"] = affinity
    result["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1", resource: quantity},
        "limits": {resource: quantity},
    }
    if selector:
        result["spec"]["nodeSelector"] = {**pod["spec"].get("nodeSelector", {}), **selector}
    return applied(result, *record)


# (backend, environment, workload type, GPUs asked) -> (resource, quantity, nodeSelector)
CASES = {
    "resource dev": ("resource", {}, "dev", ("nvidia.com/gpu-shared", "1", {})),
    "resource training": ("resource", {}, "training", ("nvidia.com/gpu-shared", "4", {})),
    "nvidia dev shares a GPU of 4": (
        "nvidia",
        {},
        "dev",
        (SHARED_NVIDIA, "1", {REPLICAS: "4", NVIDIA_STRATEGY: "time-slicing"}),
    ),
    "nvidia inference without a pool of 2 gets a whole GPU": (
        "nvidia",
        {},
        "inference",
        (GPU, "1", {NVIDIA_STRATEGY: "none"}),
    ),
    "nvidia inference on a pool of 2, time-slicing": (
        "nvidia",
        {"CASTSLICE_SHARING_DEGREES": "2,4"},
        "inference",
        (SHARED_NVIDIA, "1", {REPLICAS: "2", NVIDIA_STRATEGY: "time-slicing"}),
    ),
    "nvidia training is a whole GPU": (
        "nvidia",
        {"CASTSLICE_SHARING_DEGREES": "2,4"},
        "training",
        (GPU, "1", {NVIDIA_STRATEGY: "none"}),
    ),
    "gke dev": (
        "gke",
        {},
        "dev",
        (GPU, "1", {GKE_STRATEGY: "time-sharing", GKE_CLIENTS: "4"}),
    ),
    "gke training avoids sharing nodes": ("gke", {}, "training", (GPU, "1", {}, NOT_SHARING)),
}


@pytest.mark.parametrize(("backend", "env", "workload_type", "want"), CASES.values(), ids=CASES)
def test_each_backend_rewrites_the_whole_pod(
    make_client: Callable[..., TestClient],
    backend: str,
    env: dict,
    workload_type: str,
    want: tuple,
) -> None:
    client = make_client(CASTSLICE_BACKEND=backend, **env)
    pod = gpu_pod(workload_type)
    response = review_response(client, make_review(pod))
    resource, quantity, selector, *affinity = want
    slices = {"dev": 1, "inference": 2, "training": 4}[workload_type]
    record = (slices, "workload-type", {"app": "1"}, backend)
    assert apply_response(pod, response) == expected(
        pod, resource, quantity, selector, record, *affinity
    )
    assert response["auditAnnotations"]["backend"] == backend
    assert "instance" not in response["auditAnnotations"]
    assert "warnings" not in response


# An MPS client's memory is capped at 1/M of the GPU's, M the clients per GPU of the pool
# the Pod is placed on: the record, the audit annotation and a warning say so.
MPS_CASES = {
    "nvidia inference on a pool of 2": (
        "nvidia",
        {"CASTSLICE_SHARING_DEGREES": "2,4"},
        "inference",
        (SHARED_NVIDIA, "1", {REPLICAS: "2", NVIDIA_STRATEGY: "mps"}),
        2,
    ),
    "nvidia dev on a pool of 4": (
        "nvidia",
        {"CASTSLICE_SHARING_DEGREES": "2,4"},
        "dev",
        (SHARED_NVIDIA, "1", {REPLICAS: "4", NVIDIA_STRATEGY: "mps"}),
        4,
    ),
    "gke inference on a pool of 2": (
        "gke",
        {"CASTSLICE_SHARING_DEGREES": "2"},
        "inference",
        (GPU, "1", {GKE_STRATEGY: "mps", GKE_CLIENTS: "2"}),
        2,
    ),
    "gke dev on a pool of 48": (
        "gke",
        {"CASTSLICE_SHARING_DEGREES": "2,48", "CASTSLICE_SLICES_PER_GPU": "48"},
        "dev",
        (GPU, "1", {GKE_STRATEGY: "mps", GKE_CLIENTS: "48"}),
        48,
    ),
}


@pytest.mark.parametrize(
    ("backend", "env", "workload_type", "want", "clients"), MPS_CASES.values(), ids=MPS_CASES
)
def test_an_mps_pod_is_told_the_memory_cap_mps_puts_on_each_of_its_processes(
    make_client: Callable[..., TestClient],
    backend: str,
    env: dict,
    workload_type: str,
    want: tuple,
    clients: int,
) -> None:
    client = make_client(CASTSLICE_BACKEND=backend, CASTSLICE_SHARING_STRATEGY="mps", **env)
    pod = gpu_pod(workload_type)
    response = review_response(client, make_review(pod))
    resource, quantity, selector = want
    slices = {"dev": 1, "inference": 2}[workload_type]
    instance = (
        f"MPS client, at most 1/{clients} of the GPU's memory per process (enforced in "
        "software, not with MIG)"
    )
    record = (slices, "workload-type", {"app": "1"}, backend, instance)
    assert apply_response(pod, response) == expected(pod, resource, quantity, selector, record)
    assert response["auditAnnotations"]["instance"] == instance
    assert response["warnings"] == [f"{backend}: the Pod is an {instance}"]
    assert all(len(warning) <= 120 for warning in response["warnings"])
    assert "isolation" not in json.dumps(response)


def test_whole_gpus_on_mps_settings_are_no_mps_client(make_client: Callable[..., TestClient]):
    client = make_client(CASTSLICE_BACKEND="nvidia", CASTSLICE_SHARING_STRATEGY="mps")
    pod = gpu_pod("training")
    response = review_response(client, make_review(pod))
    record = (4, "workload-type", {"app": "1"}, "nvidia")
    assert apply_response(pod, response) == expected(
        pod, GPU, "1", {NVIDIA_STRATEGY: "none"}, record
    )
    assert "instance" not in response["auditAnnotations"]
    assert "warnings" not in response


def test_whole_gpus_for_more_than_one_gpu_of_slices(make_client: Callable[..., TestClient]):
    client = make_client(CASTSLICE_BACKEND="gke")
    pod = gpu_pod(count="2")
    pod["metadata"]["annotations"]["castops.io/slice-ratio"] = "6"
    response = review_response(client, make_review(pod))
    assert apply_response(pod, response) == expected(
        pod, GPU, "2", {}, (6, "slice-ratio", {"app": "2"}, "gke"), NOT_SHARING
    )


def term(*expressions: dict) -> dict:
    return {"matchExpressions": list(expressions)}


ZONE = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
AVOID = {"key": GKE_STRATEGY, "operator": "DoesNotExist"}
AVOID_PARTITIONS = {"key": GKE_PARTITION, "operator": "DoesNotExist"}


@pytest.mark.parametrize(
    ("affinity", "want"),
    [
        ({}, NOT_SHARING),
        ({"podAffinity": {}}, {"podAffinity": {}, **NOT_SHARING}),
        ({"nodeAffinity": {}}, NOT_SHARING),
        (
            {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
            {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [],
                    **NOT_SHARING["nodeAffinity"],
                }
            },
        ),
        (
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [term(ZONE), {"matchFields": []}]
                    }
                }
            },
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            term(ZONE, AVOID, AVOID_PARTITIONS),
                            {"matchFields": [], "matchExpressions": [AVOID, AVOID_PARTITIONS]},
                        ]
                    }
                }
            },
        ),
    ],
    ids=["none", "pod-affinity", "empty-node-affinity", "preferred-only", "every-term-anded"],
)
def test_whole_gpus_on_gke_keep_off_sharing_nodes_whatever_affinity_there_is(
    make_client: Callable[..., TestClient], affinity: dict, want: dict
) -> None:
    client = make_client(CASTSLICE_BACKEND="gke")
    pod = gpu_pod("training")
    if affinity:
        pod["spec"]["affinity"] = affinity
    patched = apply_response(pod, review_response(client, make_review(pod)))
    assert patched["spec"]["affinity"] == want


def test_node_affinity_on_a_placement_label_is_hand_placed(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(CASTSLICE_BACKEND="gke")
    pod = gpu_pod("dev")
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [term({"key": GKE_CLIENTS, "operator": "In", "values": ["8"]})]
            }
        }
    }
    response = review_response(client, make_review(pod))
    assert "patch" not in response
    assert response["warnings"] == [
        f"node affinity on {GKE_CLIENTS} set by hand; castslice left the Pod unchanged"
    ]


def test_existing_node_selector_keeps_its_keys(make_client: Callable[..., TestClient]) -> None:
    client = make_client(CASTSLICE_BACKEND="nvidia")
    pod = gpu_pod("dev", nodeSelector={"kubernetes.io/arch": "amd64"})
    response = review_response(client, make_review(pod))
    selector = {REPLICAS: "4", NVIDIA_STRATEGY: "time-slicing"}
    record = (1, "workload-type", {"app": "1"}, "nvidia")
    assert apply_response(pod, response) == expected(pod, SHARED_NVIDIA, "1", selector, record)


@pytest.mark.parametrize(
    ("backend", "key"),
    [
        ("nvidia", REPLICAS),
        ("nvidia", NVIDIA_STRATEGY),
        ("gke", GKE_STRATEGY),
        ("gke", GKE_CLIENTS),
    ],
)
def test_hand_placed_pod_is_left_alone_with_a_warning(
    make_client: Callable[..., TestClient], backend: str, key: str
) -> None:
    client = make_client(CASTSLICE_BACKEND=backend)
    pod = gpu_pod("dev", nodeSelector={key: "2"})
    response = review_response(client, make_review(pod))
    assert apply_response(pod, response) == pod
    (warning,) = response["warnings"]
    assert key in warning and "unchanged" in warning and len(warning) <= 120


def test_fewer_gpus_than_asked_is_said(make_client: Callable[..., TestClient]) -> None:
    client = make_client(CASTSLICE_BACKEND="nvidia")
    response = review_response(client, make_review(gpu_pod(count="2")))
    assert response["warnings"] == [
        'container "app" asked for 2 nvidia.com/gpu; castslice gives it 1/4 of a GPU'
    ]
    response = review_response(client, make_review(gpu_pod("training", count="1")))
    assert "warnings" not in response


@pytest.mark.parametrize("backend", ["resource", "nvidia", "gke"])
@pytest.mark.parametrize("workload_type", ["dev", "inference", "training"])
def test_a_pod_with_the_record_is_never_changed_again(
    make_client: Callable[..., TestClient], backend: str, workload_type: str
) -> None:
    client = make_client(CASTSLICE_BACKEND=backend, CASTSLICE_SHARING_DEGREES="2,4")
    pod = gpu_pod(workload_type, count="3")
    once = apply_response(pod, review_response(client, make_review(pod)))
    assert json.loads(once["metadata"]["annotations"][APPLIED])["original"] == {"app": "3"}
    again = review_response(client, make_review(once))
    assert again == {"uid": again["uid"], "allowed": True}


def test_requests_and_limits_stay_equal_when_only_the_count_changes(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(CASTSLICE_BACKEND="gke")
    pod = make_pod(opted_in(), containers=[container("app", requests={GPU: "3"})])
    response = review_response(client, make_review(pod))
    patched = apply_response(pod, response)
    assert patched["spec"]["containers"][0]["resources"] == {
        "requests": {GPU: "1"},
        "limits": {GPU: "1"},
    }


@pytest.mark.parametrize("backend", ["resource", "nvidia", "gke"])
@pytest.mark.parametrize("zero", ["0", "0.0", "0Ki", "0e3"])
def test_a_zero_gpu_request_keeps_what_it_has(
    make_client: Callable[..., TestClient], backend: str, zero: str
) -> None:
    # Volcano and Argo templates write `nvidia.com/gpu: 0` for "no GPU".
    client = make_client(CASTSLICE_BACKEND=backend)
    pod = make_pod(opted_in(), containers=[gpu_container("sidecar", zero)])
    response = review_response(client, make_review(pod))
    assert apply_response(pod, response) == pod
    assert "auditAnnotations" not in response

    # Beside a container that asks for a GPU: placed and recorded for that one only.
    pod = make_pod(
        opted_in(), containers=[gpu_container("app", "1"), gpu_container("sidecar", zero)]
    )
    alone = make_pod(opted_in(), containers=[gpu_container("app", "1")])
    rewritten = apply_response(pod, review_response(client, make_review(pod)))
    rewritten_alone = apply_response(alone, review_response(client, make_review(alone)))
    assert rewritten["spec"]["containers"][1] == pod["spec"]["containers"][1]
    rewritten["spec"]["containers"].pop(1)
    assert rewritten == rewritten_alone
    assert json.loads(rewritten["metadata"]["annotations"][APPLIED])["original"] == {"app": "1"}
