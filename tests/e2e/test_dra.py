"""The `dra` backend with the real scheduler and resource-claim controller (Kubernetes 1.36+).

CastSlice runs with CASTSLICE_BACKEND=dra; fake nodes publish GPUs as the
NVIDIA DRA driver does with `--consumable-shares=4` (dra.py); the templates
are `castslice claim-templates`' own output, applied with kubectl. Users'
ordinary manifests go in through `kubectl apply`; what is checked is what
they see: which Pods run, which device each claim was allocated (and how much
of it), which Pod waits and why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest
import yaml

from castslice.contract import Manifest

from ..procs import wait_until
from .castslice_server import StartServer
from .dra import DRIVER, delete_taint_rule, dra_nodes, ensure_taint_rule
from .kubectl import Kubectl
from .pods import GPU, IMAGE, create_namespace, gpu_pod, list_pods, settle, unschedulable
from .registration import APPLIED, register_and_wait
from .tools import REPO_ROOT, run_castslice

pytestmark = pytest.mark.kubernetes("1.36")


SETTINGS = {"CASTSLICE_BACKEND": "dra"}
_SETTLE_TIMEOUT = 60.0
# The DynamicResources plugin's reason when no node has devices left for a claim.
_NO_DEVICES = "cannot allocate all claims"


@pytest.fixture(scope="module", autouse=True)
def dra_castslice(module_castslice: StartServer, api: kubernetes.client.ApiClient) -> None:
    # The documented setup: the driver's devices tainted, CastSlice's templates tolerating it.
    ensure_taint_rule(api)
    register_and_wait(api, module_castslice(SETTINGS))


def castslice(*args: str) -> str:
    """`python -m castslice ARGS` with the dra settings, as a user runs it; its stdout."""
    return run_castslice(SETTINGS, *args).stdout


def apply_templates(kubectl: Kubectl, namespace: str, slices: str = "1,2,3,4,8") -> None:
    kubectl.run(
        "apply", "-f", "-", stdin=castslice("claim-templates", "-n", namespace, "--slices", slices)
    )


def opted(workload_type: str | None = None, ratio: str | None = None) -> dict[str, str]:
    annotations = {"castops.io/optimize": "true"}
    if workload_type:
        annotations["castops.io/workload-type"] = workload_type
    if ratio:
        annotations["castops.io/slice-ratio"] = ratio
    return annotations


def apply(kubectl: Kubectl, namespace: str, manifests: list[Manifest]) -> str:
    return kubectl.apply(namespace, yaml.safe_dump_all(manifests))


def allocation(api: kubernetes.client.ApiClient, namespace: str, pod: Manifest) -> list[Manifest]:
    """The allocation results of the Pod's one claim: device, shareID, consumedCapacity."""
    [status] = pod["status"]["resourceClaimStatuses"]
    response = kubernetes.client.ResourceV1Api(api).read_namespaced_resource_claim(
        status["resourceClaimName"], namespace, _preload_content=False
    )
    claim = json.loads(response.data)
    return claim["status"]["allocation"]["devices"]["results"]


def claims_by_pod(api: kubernetes.client.ApiClient, namespace: str) -> dict[str, list[Manifest]]:
    """Every ResourceClaim of the namespace, read back, by the Pod that holds it: those the
    resource-claim controller made from templates and those the scheduler made for Pods
    asking an extended resource (KEP-5004)."""
    response = kubernetes.client.ResourceV1Api(api).list_namespaced_resource_claim(
        namespace, _preload_content=False
    )
    held: dict[str, list[Manifest]] = {}
    for claim in json.loads(response.data)["items"]:
        [owner] = claim["metadata"]["ownerReferences"]
        held.setdefault(owner["name"], []).append(claim)
    return held


def results_of(claims: list[Manifest]) -> list[Manifest]:
    return [
        result
        for claim in claims
        for result in ((claim.get("status") or {}).get("allocation") or {})["devices"]["results"]
    ]


def doctor(control_plane: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "castslice",
            "doctor",
            "--kubeconfig",
            str(control_plane.kubeconfig),
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("CASTSLICE_")},
            **SETTINGS,
            "PYTHONIOENCODING": "utf-8",
        },
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr
    return done


def shares(result: Manifest) -> str:
    return result["consumedCapacity"]["shares"]


def devices_of(results: list[Manifest]) -> set[tuple[str, str]]:
    return {(result["pool"], result["device"]) for result in results}


def assert_claims(pod: Manifest, template: str) -> None:
    """The Pod as stored: no GPU resource left, one claim from `template`."""
    [app] = pod["spec"]["containers"]
    assert GPU not in app["resources"].get("limits", {})
    assert GPU not in app["resources"].get("requests", {})
    assert app["resources"]["claims"] == [{"name": "castslice-gpu-0"}]
    assert pod["spec"]["resourceClaims"] == [
        {"name": "castslice-gpu-0", "resourceClaimTemplateName": template}
    ]
    assert json.loads(pod["metadata"]["annotations"][APPLIED])["backend"] == "dra"


@pytest.fixture
def templated(kubectl_user: Kubectl, namespace: str) -> str:
    apply_templates(kubectl_user, namespace)
    return namespace


@pytest.fixture
def one_gpu(api: kubernetes.client.ApiClient, templated: str) -> Iterator[list[str]]:
    with dra_nodes(api, [1], templated) as names:
        yield names


@pytest.fixture
def four_gpus(api: kubernetes.client.ApiClient, templated: str) -> Iterator[list[str]]:
    with dra_nodes(api, [4], templated) as names:
        yield names


def test_four_dev_pods_are_allocated_one_device_and_a_fifth_waits(
    api: kubernetes.client.ApiClient, kubectl_user: Kubectl, templated: str, one_gpu: list[str]
) -> None:
    namespace = templated
    warnings = apply(kubectl_user, namespace, [gpu_pod(f"dev-{i}", opted("dev")) for i in range(5)])

    up, [waiting] = settle(
        api, namespace, runs=4, waits=1, no_room=_NO_DEVICES, timeout=_SETTLE_TIMEOUT
    )

    assert "the 1/4 GPU share is scheduler bookkeeping" in warnings
    for pod in [*up, waiting]:
        assert_claims(pod, "castslice-1-of-4")
    results = [result for pod in up for result in allocation(api, namespace, pod)]
    assert devices_of(results) == {(one_gpu[0], "gpu-0")}
    assert {result["driver"] for result in results} == {DRIVER}
    # The driver's memory policy defaults to 0: a claim that asks for none holds none.
    assert [result["consumedCapacity"] for result in results] == [
        {"shares": "1", "memory": "0"}
    ] * 4
    assert len({result["shareID"] for result in results}) == 4
    assert {pod["spec"]["nodeName"] for pod in up} == {one_gpu[0]}
    assert _NO_DEVICES in str(unschedulable(waiting))


def test_shares_whole_devices_and_two_devices_fill_a_node_of_four(
    api: kubernetes.client.ApiClient, kubectl_user: Kubectl, templated: str, four_gpus: list[str]
) -> None:
    namespace = templated
    pods = [
        gpu_pod("vllm-0", opted("inference")),
        gpu_pod("vllm-1", opted("inference")),
        gpu_pod("trainer", opted("training")),
        gpu_pod("big", opted(ratio="8"), gpus=2),
    ]
    # One at a time, each running before the next: this test is about where each claim
    # lands. Created together, one CI run among many left `big` Pending
    # ("cannot allocate all claims") with the other three on the node; how kube-scheduler
    # counts a shared device's capacity while earlier claims are still being written is its
    # own behaviour, not CastSlice's.
    for placed, pod in enumerate(pods, start=1):
        apply(kubectl_user, namespace, [pod])
        up, _ = settle(
            api, namespace, runs=placed, waits=0, no_room=_NO_DEVICES, timeout=_SETTLE_TIMEOUT
        )

    by_name = {pod["metadata"]["name"]: pod for pod in up}
    held = {name: allocation(api, namespace, pod) for name, pod in by_name.items()}
    assert_claims(by_name["vllm-0"], "castslice-2-of-4")
    assert_claims(by_name["trainer"], "castslice-4-of-4")
    assert_claims(by_name["big"], "castslice-8-of-4")
    # The two halves share one device.
    assert devices_of(held["vllm-0"]) == devices_of(held["vllm-1"])
    assert [shares(r) for r in held["vllm-0"] + held["vllm-1"]] == ["2"] * 2
    # A whole device takes all its shares: nothing else is on it.
    assert [shares(r) for r in held["trainer"]] == ["4"]
    assert [shares(r) for r in held["big"]] == ["4"] * 2
    assert len(devices_of(held["big"])) == 2
    groups = [devices_of(held["vllm-0"]), devices_of(held["trainer"]), devices_of(held["big"])]
    assert sum(len(group) for group in groups) == len(set().union(*groups)) == 4


def test_controller_pods_run_and_a_namespace_without_templates_is_named_by_doctor(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    templated: str,
    one_gpu: list[str],
    control_plane: Any,
) -> None:
    namespace = templated
    template: Manifest = {
        "metadata": {"labels": {"app": "notebook"}, "annotations": opted("dev")},
        "spec": {
            "containers": [{"name": "app", "image": IMAGE, "resources": {"limits": {GPU: 1}}}]
        },
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "notebook"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "notebook"}},
            "template": template,
        },
    }
    job_template = json.loads(json.dumps(template))
    job_template["metadata"]["labels"] = {"app": "batch"}
    job_template["spec"]["restartPolicy"] = "Never"
    # KWOK's default stages complete Job Pods at once; a Pod that sleeps would run for good.
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "batch"},
        "spec": {"template": job_template, "backoffLimit": 0},
    }
    apply(kubectl_user, namespace, [deployment, job])
    bare = create_namespace(api, f"{namespace}-bare")
    try:
        apply(kubectl_user, bare, [gpu_pod("orphan", opted("dev"))])

        def started() -> list[Manifest] | None:
            pods = list_pods(api, namespace, "")
            ran = [
                p
                for p in pods
                if p["spec"].get("nodeName")
                and p["status"].get("phase") in ("Running", "Succeeded")
            ]
            return pods if len(ran) == 3 else None

        pods = wait_until(
            started,
            timeout=_SETTLE_TIMEOUT,
            what="the Deployment's and the Job's Pods to run",
            interval=0.2,
        )
        for pod in pods:
            assert_claims(pod, "castslice-1-of-4")
        assert {pod["spec"]["nodeName"] for pod in pods} == {one_gpu[0]}

        [orphan] = list_pods(api, bare, "")
        assert_claims(orphan, "castslice-1-of-4")
        assert orphan["status"].get("phase") == "Pending"
        assert not orphan["spec"].get("nodeName")

        done = doctor(control_plane)
        assert done.returncode == 1, done.stdout
        [templates_line] = [line for line in done.stdout.splitlines() if "Pending: orphan" in line]
        assert f"{bare}/castslice-1-of-4 (Pending: orphan)" in templates_line
        assert f"castslice claim-templates -n {bare} | kubectl apply -f -" in templates_line
        assert "1 shareable device with shares on 1 node" in done.stdout
    finally:
        kubernetes.client.CoreV1Api(api).delete_namespace(bare)


def test_a_pod_without_opt_in_or_with_its_own_claims_is_left_as_it_is(
    api: kubernetes.client.ApiClient, kubectl_user: Kubectl, templated: str
) -> None:
    namespace = templated
    plain = gpu_pod("plain", None)
    own = gpu_pod("own", opted("dev"))
    own["spec"]["resourceClaims"] = [
        {"name": "mine", "resourceClaimTemplateName": "castslice-4-of-4"}
    ]
    # It also asks for nvidia.com/gpu, which CastSlice would otherwise rewrite.
    own["spec"]["containers"][0]["resources"]["claims"] = [{"name": "mine"}]
    warnings = apply(kubectl_user, namespace, [plain, own])

    stored = {pod["metadata"]["name"]: pod for pod in list_pods(api, namespace, "")}
    assert stored["plain"]["spec"]["containers"][0]["resources"] == {
        "limits": {GPU: "1"},
        "requests": {GPU: "1"},
    }
    assert "resourceClaims" not in stored["plain"]["spec"]
    assert APPLIED not in stored["plain"]["metadata"].get("annotations", {})
    assert stored["own"]["spec"]["resourceClaims"] == own["spec"]["resourceClaims"]
    assert stored["own"]["spec"]["containers"][0]["resources"] == {
        "limits": {GPU: "1"},
        "requests": {GPU: "1"},
        "claims": [{"name": "mine"}],
    }
    assert APPLIED not in stored["own"]["metadata"]["annotations"]
    assert "the Pod has its own resource claims; castslice left the Pod unchanged" in warnings


_GUARD = "castslice.castops.io/shared"


def test_without_the_taint_rule_a_pod_that_did_not_opt_in_shares_a_gpu_and_doctor_fails(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    templated: str,
    one_gpu: list[str],
    control_plane: Any,
) -> None:
    """Why the rule is shipped: the chart's DeviceClass maps nvidia.com/gpu to its devices."""
    namespace = templated
    delete_taint_rule(api)
    try:
        apply(kubectl_user, namespace, [gpu_pod("dev", opted("dev")), gpu_pod("plain", None)])
        settle(api, namespace, runs=2, waits=0, no_room=_NO_DEVICES, timeout=_SETTLE_TIMEOUT)

        held = {pod: results_of(claims) for pod, claims in claims_by_pod(api, namespace).items()}
        assert devices_of(held["plain"]) == devices_of(held["dev"]) == {(one_gpu[0], "gpu-0")}
        assert [shares(result) for result in held["plain"]] == ["1"]
        done = doctor(control_plane)
        assert done.returncode == 1, done.stdout
        [line] = [line for line in done.stdout.splitlines() if f"without the {_GUARD}" in line]
        assert f"1 shareable device ({one_gpu[0]}/gpu-0)" in line
        assert "DeviceClass gpu.nvidia.com (nvidia.com/gpu)" in line
        assert "kubectl apply -f infra/gpu-sharing/dra/device-taint-rule.yaml" in line
    finally:
        ensure_taint_rule(api)


def test_pods_that_did_not_opt_in_never_share_a_device_with_any_claim(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    templated: str,
    four_gpus: list[str],
    control_plane: Any,
) -> None:
    namespace = templated
    pods = [
        gpu_pod("dev-0", opted("dev")),
        gpu_pod("dev-1", opted("dev")),
        gpu_pod("plain-1", None),
        gpu_pod("plain-2", None, gpus=2),
    ]
    apply(kubectl_user, namespace, pods)

    up, waiting = settle(
        api, namespace, runs=2, waits=2, no_room=_NO_DEVICES, timeout=_SETTLE_TIMEOUT
    )

    assert {pod["metadata"]["name"] for pod in up} == {"dev-0", "dev-1"}
    assert {pod["metadata"]["name"] for pod in waiting} == {"plain-1", "plain-2"}
    held = claims_by_pod(api, namespace)
    # The plain Pods hold no claim: no device, shared or whole, was allocated to them.
    assert sorted(held) == ["dev-0", "dev-1"]
    results = [result for claims in held.values() for result in results_of(claims)]
    assert [result["consumedCapacity"] for result in results] == [
        {"shares": "1", "memory": "0"}
    ] * 2
    assert len({result["shareID"] for result in results}) == 2
    for pod in waiting:
        assert "extendedResourceClaimStatus" not in pod["status"]
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {
            GPU: pod["metadata"]["name"][-1]
        }
    done = doctor(control_plane)
    [line] = [line for line in done.stdout.splitlines() if f"tainted {_GUARD}" in line]
    assert line.startswith(f"\N{CHECK MARK} 4 shareable devices tainted {_GUARD}")


def test_a_training_pod_with_a_gpu_init_container_runs_on_one_gpu(
    api: kubernetes.client.ApiClient, kubectl_user: Kubectl, templated: str, one_gpu: list[str]
) -> None:
    """As with a device plugin, the Pod needs max(init, app) GPUs: one, not two."""
    namespace = templated
    pod = gpu_pod("trainer", opted("training"))
    pod["spec"]["initContainers"] = [
        {"name": "download", "image": IMAGE, "resources": {"limits": {GPU: 1}}}
    ]
    apply(kubectl_user, namespace, [pod])

    [up], _ = settle(api, namespace, runs=1, waits=0, no_room=_NO_DEVICES, timeout=_SETTLE_TIMEOUT)

    [init] = up["spec"]["initContainers"]
    [app] = up["spec"]["containers"]
    assert (
        init["resources"]["claims"] == app["resources"]["claims"] == [{"name": "castslice-gpu-0"}]
    )
    assert up["spec"]["resourceClaims"] == [
        {"name": "castslice-gpu-0", "resourceClaimTemplateName": "castslice-4-of-4"}
    ]
    [claims] = claims_by_pod(api, namespace).values()
    results = results_of(claims)
    assert devices_of(results) == {(one_gpu[0], "gpu-0")}
    assert [result["consumedCapacity"]["shares"] for result in results] == ["4"]
