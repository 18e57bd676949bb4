"""The patch: applied to the Pod, it must give exactly the expected Pod."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from castslice.contract.patch import (
    PatchOperation,
    escape_pointer_token,
    gpu_containers,
    resource_operations,
)
from tests.factories import GPU, SHARED, container, gpu_container, make_pod

SIDECAR = {"restartPolicy": "Always"}
LOOK_ALIKES = {
    "nvidia.com/gpu.shared": "1",
    "nvidia.com/mig-1g.5gb": "1",
    "nvidia.com/gpumem": "8",
    "nvidia.com/GPU": "1",
    "example.com/gpu": "1",
}


def build_patch(spec: dict, slices: int, gpu: str, shared: str) -> list[PatchOperation]:
    """The resource operations admission.py makes: each GPU container's, in order."""
    return [
        operation
        for found in gpu_containers(spec, gpu)
        for operation in resource_operations(found, gpu, shared, slices)
    ]


def rewrite(pod: dict, slices: int = 4) -> dict:
    operations = build_patch(pod["spec"], slices, GPU, SHARED)
    return jsonpatch.JsonPatch(operations).apply(pod)


CASES = {
    "requests and limits": (
        [container(requests={GPU: "1", "cpu": "2"}, limits={GPU: "1", "memory": "1Gi"})],
        [container(requests={"cpu": "2", SHARED: "4"}, limits={"memory": "1Gi", SHARED: "4"})],
    ),
    "limits only": (
        [container(limits={GPU: "2"})],
        [container(limits={SHARED: "4"})],
    ),
    "requests only gets the limit the API server requires": (
        [container(requests={GPU: "1"})],
        [container(requests={SHARED: "4"}, limits={SHARED: "4"})],
    ),
    "requests only, null limits": (
        [container(requests={GPU: "1"}, limits="null")],
        [container(requests={SHARED: "4"}, limits={SHARED: "4"})],
    ),
    "requests only, limits without GPU": (
        [container(requests={GPU: "1"}, limits={"cpu": "1"})],
        [container(requests={SHARED: "4"}, limits={"cpu": "1", SHARED: "4"})],
    ),
    "both keys present: shared value replaced": (
        [container(requests={GPU: "1", SHARED: "9"}, limits={GPU: "1", SHARED: "9"})],
        [container(requests={SHARED: "4"}, limits={SHARED: "4"})],
    ),
    "shared limit follows the new count": (
        [container(requests={GPU: "1"}, limits={SHARED: "2"})],
        [container(requests={SHARED: "4"}, limits={SHARED: "4"})],
    ),
    "multi-container, only GPU containers change": (
        [
            gpu_container("a"),
            container("b", requests={"cpu": "1"}),
            container("c"),
            gpu_container("d", count="2"),
        ],
        [
            container("a", requests={"cpu": "1", SHARED: "4"}, limits={SHARED: "4"}),
            container("b", requests={"cpu": "1"}),
            container("c"),
            container("d", requests={"cpu": "1", SHARED: "4"}, limits={SHARED: "4"}),
        ],
    ),
    "null and empty maps": (
        [
            container("a", requests="null", limits="null"),
            container("b", requests={}, limits={}),
            {"name": "c", "resources": None},
            {"name": "d", "resources": {}},
            gpu_container("e"),
        ],
        [
            container("a", requests="null", limits="null"),
            container("b", requests={}, limits={}),
            {"name": "c", "resources": None},
            {"name": "d", "resources": {}},
            container("e", requests={"cpu": "1", SHARED: "4"}, limits={SHARED: "4"}),
        ],
    ),
    "look-alike resources untouched": (
        [container(limits=LOOK_ALIKES)],
        [container(limits=LOOK_ALIKES)],
    ),
    "already rewritten": (
        [container(requests={SHARED: "4"}, limits={SHARED: "4"})],
        [container(requests={SHARED: "4"}, limits={SHARED: "4"})],
    ),
    "a zero count asks for no GPU": (
        [container("idle", requests={GPU: "0"}, limits={GPU: "0"}), gpu_container("app")],
        [
            container("idle", requests={GPU: "0"}, limits={GPU: "0"}),
            container("app", requests={"cpu": "1", SHARED: "4"}, limits={SHARED: "4"}),
        ],
    ),
    "no GPU at all": (
        [container(requests={"cpu": "1"}, limits={"cpu": "1"})],
        [container(requests={"cpu": "1"}, limits={"cpu": "1"})],
    ),
}


@pytest.mark.parametrize(("before", "after"), CASES.values(), ids=CASES.keys())
def test_containers_are_rewritten_exactly(before: list, after: list) -> None:
    pod = make_pod(containers=before)
    expected = make_pod(containers=after)
    assert rewrite(pod) == expected
    # Running on its own output changes nothing.
    assert build_patch(expected["spec"], 4, GPU, SHARED) == []


def test_unchanged_pods_get_no_operations() -> None:
    for before, after in CASES.values():
        if before == after:
            assert build_patch(make_pod(containers=before)["spec"], 4, GPU, SHARED) == []


def test_all_three_container_lists_including_native_sidecars() -> None:
    pod = make_pod(
        init_containers=[gpu_container("setup"), gpu_container("sidecar", **SIDECAR)],
        containers=[gpu_container("main")],
        ephemeral_containers=[gpu_container("debug")],
    )
    shared = {"requests": {"cpu": "1", SHARED: "2"}, "limits": {SHARED: "2"}}
    expected = copy.deepcopy(pod)
    for list_name in ("initContainers", "containers", "ephemeralContainers"):
        for item in expected["spec"][list_name]:
            item["resources"] = copy.deepcopy(shared)
    assert rewrite(pod, slices=2) == expected


def test_missing_container_lists() -> None:
    assert build_patch({}, 4, GPU, SHARED) == []
    assert build_patch({"containers": None, "initContainers": []}, 4, GPU, SHARED) == []


def test_operations_use_escaped_json_pointers() -> None:
    operations = build_patch({"containers": [container(limits={GPU: "1"})]}, 3, GPU, SHARED)
    assert operations == [
        {"op": "remove", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu"},
        {
            "op": "add",
            "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu-shared",
            "value": "3",
        },
    ]


@pytest.mark.parametrize(
    ("token", "escaped"),
    [
        ("nvidia.com/gpu", "nvidia.com~1gpu"),
        ("a~b", "a~0b"),
        ("~/", "~0~1"),
        ("~1", "~01"),
        ("plain", "plain"),
    ],
)
def test_pointer_escaping_follows_rfc_6901(token: str, escaped: str) -> None:
    assert escape_pointer_token(token) == escaped
    assert jsonpatch.JsonPointer("/" + escaped).parts == [token]


def test_configured_resource_names() -> None:
    pod = make_pod(containers=[container(limits={"amd.com/gpu": "1", GPU: "1"})])
    operations = build_patch(pod["spec"], 2, "amd.com/gpu", "nvidia.com/gpu.shared")
    assert jsonpatch.JsonPatch(operations).apply(pod) == make_pod(
        containers=[container(limits={GPU: "1", "nvidia.com/gpu.shared": "2"})]
    )
