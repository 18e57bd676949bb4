"""From admitted to Running: the real kube-scheduler places rewritten Pods on fake GPU nodes.

For each backend, CastSlice runs with that backend's settings, fake nodes
look as that backend's real nodes do (nodes.py), and a user's ordinary
manifests go in through `kubectl apply`. What is checked is what the user
sees: where each Pod runs, which one waits and the scheduler's reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import kubernetes.client
import pytest
import yaml

from ..procs import wait_until
from .castslice_server import StartServer
from .kubectl import Kubectl
from .nodes import (
    BACKENDS,
    GKE_CLIENTS,
    GKE_STRATEGY,
    GPU,
    NVIDIA_REPLICAS,
    NVIDIA_SHARED,
    NVIDIA_STRATEGY,
    SEED_SHARED,
    FakeNode,
    Pool,
    gpu_nodes,
    standard_pools,
)
from .pods import Manifest, list_pods, running, settle, unschedulable
from .registration import APPLIED, register_and_wait

SLICES_PER_GPU = 4
DEGREES = (2, 4)
SLICES = {"training": 4, "inference": 2, "dev": 1}
_SETTLE_TIMEOUT = 30.0
# The cronjob controller starts Jobs on the minute: at most one minute away.
_CRON_TIMEOUT = 75.0

_SETTINGS = {
    "resource": {"CASTSLICE_BACKEND": "resource", "CASTSLICE_SHARED_RESOURCE": SEED_SHARED},
    "nvidia": {"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_SHARING_DEGREES": "2,4"},
    "gke": {"CASTSLICE_BACKEND": "gke", "CASTSLICE_SHARING_DEGREES": "2,4"},
}


@dataclass(frozen=True)
class Backend:
    name: str

    def rewrite(self, slices: int) -> tuple[str, int, dict[str, str]]:
        """(resource, quantity, nodeSelector) a Pod of `slices` must get, per the backend table."""
        if self.name == "resource":
            return SEED_SHARED, slices, {}
        fitting = [d for d in DEGREES if slices < SLICES_PER_GPU and d <= SLICES_PER_GPU // slices]
        if not fitting:
            gpus = -(-slices // SLICES_PER_GPU)
            return GPU, gpus, {NVIDIA_STRATEGY: "none"} if self.name == "nvidia" else {}
        degree = str(max(fitting))
        if self.name == "nvidia":
            return NVIDIA_SHARED, 1, {NVIDIA_REPLICAS: degree, NVIDIA_STRATEGY: "time-slicing"}
        return GPU, 1, {GKE_STRATEGY: "time-sharing", GKE_CLIENTS: degree}


@pytest.fixture(scope="module", params=BACKENDS)
def backend(
    request: pytest.FixtureRequest,
    module_castslice: StartServer,
    api: kubernetes.client.ApiClient,
) -> Backend:
    """CastSlice started with one backend's settings and registered; tests are grouped by it."""
    name: str = request.param
    register_and_wait(api, module_castslice(_SETTINGS[name]))
    return Backend(name)


@pytest.fixture
def nodes(
    api: kubernetes.client.ApiClient, backend: Backend, namespace: str
) -> Iterator[dict[str, FakeNode]]:
    """This test's own fake GPU nodes (the standard pools), by name."""
    with gpu_nodes(api, backend.name, standard_pools(backend.name), namespace) as created:
        yield {node.name: node for node in created}


def gpu_pod(
    name: str, workload_type: str | None, node_selector: dict[str, str] | None = None
) -> str:
    """A Pod manifest as a user writes it: one GPU, opted in when `workload_type` is set."""
    metadata: Manifest = {"name": name}
    if workload_type is not None:
        metadata["annotations"] = {
            "castops.io/optimize": "true",
            "castops.io/workload-type": workload_type,
        }
    spec: Manifest = {
        "containers": [
            {
                "name": "app",
                "image": "registry.invalid/castslice-e2e/app:1",
                "resources": {"limits": {GPU: 1}},
            }
        ]
    }
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})


def apply_pods(kubectl: Kubectl, namespace: str, manifests: list[str]) -> str:
    return kubectl.apply(namespace, "---\n".join(manifests))


def assert_rewritten(
    pod: Manifest, backend: Backend, workload_type: str, own_selector: dict[str, str] | None = None
) -> None:
    """The Pod asks for what the backend gives `workload_type`, beside its `own_selector`."""
    slices = SLICES[workload_type]
    resource, quantity, selector = backend.rewrite(slices)
    [app] = pod["spec"]["containers"]
    asked = {resource: str(quantity)}
    assert app["resources"] == {"limits": asked, "requests": asked}
    assert pod["spec"].get("nodeSelector", {}) == {**(own_selector or {}), **selector}
    record = json.loads(pod["metadata"]["annotations"][APPLIED])
    assert (record["backend"], record["slices"]) == (backend.name, slices)


def share_of_gpu(pod: Manifest, node: FakeNode, backend: Backend) -> float:
    """How much of one physical GPU the Pod holds on `node`."""
    [app] = pod["spec"]["containers"]
    [(resource, quantity)] = app["resources"]["limits"].items()
    units_per_gpu = 1 if resource == GPU and node.pool.sharing is None else node.pool.sharing
    assert units_per_gpu, f"{node.name} offers no {resource}"
    return int(quantity) / units_per_gpu


def test_four_dev_pods_share_one_gpu_and_a_fifth_waits(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    namespace: str,
    backend: Backend,
    nodes: dict[str, FakeNode],
) -> None:
    apply_pods(kubectl_user, namespace, [gpu_pod(f"dev-{i}", "dev") for i in range(5)])

    up, [waiting] = settle(api, namespace, runs=4, waits=1)

    for pod in [*up, waiting]:
        assert_rewritten(pod, backend, "dev")
    [node] = {pod["spec"]["nodeName"] for pod in up}
    assert nodes[node].pool.sharing == 4
    assert [share_of_gpu(pod, nodes[node], backend) for pod in up] == [0.25] * 4
    resource, _, _ = backend.rewrite(SLICES["dev"])
    assert f"Insufficient {resource}" in str(unschedulable(waiting))


def test_inference_pods_land_only_where_they_get_half_a_gpu(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    namespace: str,
    backend: Backend,
    nodes: dict[str, FakeNode],
) -> None:
    apply_pods(kubectl_user, namespace, [gpu_pod(f"vllm-{i}", "inference") for i in range(3)])

    # Two halves fill one GPU; the third waits although a quarter-GPU pool has room.
    up, [waiting] = settle(api, namespace, runs=2, waits=1)

    for pod in [*up, waiting]:
        assert_rewritten(pod, backend, "inference")
    assert [share_of_gpu(pod, nodes[pod["spec"]["nodeName"]], backend) for pod in up] == [0.5] * 2
    resource, _, _ = backend.rewrite(SLICES["inference"])
    assert f"Insufficient {resource}" in str(unschedulable(waiting))


def test_training_pods_get_a_whole_gpu_of_a_node_that_does_not_share(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    namespace: str,
    backend: Backend,
    nodes: dict[str, FakeNode],
) -> None:
    apply_pods(kubectl_user, namespace, [gpu_pod(f"trainer-{i}", "training") for i in range(3)])

    # One GPU is not shared by anyone: one trainer runs, the others wait for a whole GPU.
    [trainer], waiting = settle(api, namespace, runs=1, waits=2)

    for pod in [trainer, *waiting]:
        assert_rewritten(pod, backend, "training")
    node = nodes[trainer["spec"]["nodeName"]]
    assert share_of_gpu(trainer, node, backend) == 1
    if backend.name != "resource":
        # There a whole GPU is all slices of one; elsewhere sharing nodes are for shares.
        assert node.pool.sharing is None


def test_pod_without_opt_in_is_untouched_and_schedules_as_before(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    namespace: str,
    backend: Backend,
    nodes: dict[str, FakeNode],
) -> None:
    apply_pods(kubectl_user, namespace, [gpu_pod("plain", None)])

    [pod], _ = settle(api, namespace, runs=1, waits=0)

    [app] = pod["spec"]["containers"]
    assert app["resources"] == {"limits": {GPU: "1"}, "requests": {GPU: "1"}}
    assert "nodeSelector" not in pod["spec"]
    assert APPLIED not in pod["metadata"].get("annotations", {})
    node = kubernetes.client.CoreV1Api(api).read_node(pod["spec"]["nodeName"])
    assert GPU in node.status.allocatable


def hand_placement(backend: Backend, nodes: dict[str, FakeNode]) -> tuple[dict[str, str], str]:
    """The nodeSelector of a dev Pod its user placed by hand, and the node it must run on."""
    if backend.name == "nvidia":
        # A whole GPU of a node that does not share, where CastSlice would give a quarter.
        selector = {NVIDIA_STRATEGY: "none"}
        pool = "plain"
    elif backend.name == "gke":
        # Half a GPU, where CastSlice would give a quarter.
        selector = {GKE_STRATEGY: "time-sharing", GKE_CLIENTS: "2"}
        pool = "shared-2"
    else:
        # `resource` has no placement keys: the user's own selector stays beside the rewrite.
        [shared] = [name for name, node in nodes.items() if node.pool.name == "shared-4"]
        return {"kubernetes.io/hostname": shared}, shared
    [node] = [name for name, node in nodes.items() if node.pool.name == pool]
    return selector, node


def test_hand_placed_pod_keeps_its_placement(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    namespace: str,
    backend: Backend,
    nodes: dict[str, FakeNode],
) -> None:
    selector, expected_node = hand_placement(backend, nodes)

    warnings = apply_pods(kubectl_user, namespace, [gpu_pod("placed", "dev", selector)])

    [pod], _ = settle(api, namespace, runs=1, waits=0)
    assert pod["spec"]["nodeSelector"] == selector
    assert pod["spec"]["nodeName"] == expected_node
    if backend.name == "resource":
        assert_rewritten(pod, backend, "dev", own_selector=selector)
        assert "by hand" not in warnings
    else:
        [app] = pod["spec"]["containers"]
        assert app["resources"] == {"limits": {GPU: "1"}, "requests": {GPU: "1"}}
        assert APPLIED not in pod["metadata"].get("annotations", {})
        assert "set by hand; castslice left the Pod unchanged" in warnings


def workloads() -> str:
    """A Deployment, StatefulSet, DaemonSet, Job and CronJob of dev Pods: the annotations
    sit on each Pod template, as users write them."""
    template: Manifest = {
        "metadata": {
            "annotations": {"castops.io/optimize": "true", "castops.io/workload-type": "dev"}
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.invalid/castslice-e2e/app:1",
                    "resources": {"limits": {GPU: 1}},
                }
            ]
        },
    }

    def labelled(app: str) -> Manifest:
        return {**template, "metadata": {**template["metadata"], "labels": {"app": app}}}

    def run_once() -> Manifest:
        return {**template, "spec": {**template["spec"], "restartPolicy": "Never"}}

    def selecting(app: str) -> Manifest:
        return {"selector": {"matchLabels": {"app": app}}, "template": labelled(app)}

    documents = [
        ("apps/v1", "Deployment", "notebook", {"replicas": 2, **selecting("notebook")}),
        (
            "apps/v1",
            "StatefulSet",
            "tensorboard",
            {"serviceName": "tensorboard", "replicas": 2, **selecting("tensorboard")},
        ),
        ("apps/v1", "DaemonSet", "exporter", selecting("exporter")),
        ("batch/v1", "Job", "evaluate", {"template": run_once()}),
        (
            "batch/v1",
            "CronJob",
            "nightly",
            # Suspended: here only `kubectl create job --from` starts it, never the clock.
            {
                "schedule": "0 3 * * *",
                "suspend": True,
                "jobTemplate": {"spec": {"template": run_once()}},
            },
        ),
    ]
    return yaml.safe_dump_all(
        {"apiVersion": api, "kind": kind, "metadata": {"name": name}, "spec": spec}
        for api, kind, name, spec in documents
    )


def owner_kind(pod: Manifest) -> str:
    [owner] = pod["metadata"]["ownerReferences"]
    return str(owner["kind"])


def test_every_workload_kind_makes_rewritten_pods_that_run(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    namespace: str,
    backend: Backend,
) -> None:
    # Two nodes of two GPUs: room for every Pod below, and a DaemonSet Pod on each node.
    pools = (Pool("shared-4", 4, nodes=2, gpus_per_node=2),)
    with gpu_nodes(api, backend.name, pools, namespace) as created:
        kubectl_user.apply(namespace, workloads())
        # What `kubectl create job --from=cronjob/...` makes: a Job from the CronJob's template.
        kubectl_user.run("create", "job", "-n", namespace, "nightly-now", "--from=cronjob/nightly")

        def done(pod: Manifest) -> bool:
            # Job Pods run, then complete (KWOK ends them at once).
            return running(pod) or pod["status"].get("phase") == "Succeeded"

        pods = wait_until(
            lambda: (
                (found := list_pods(api, namespace, ""))
                and len(found) == 8
                and all(done(pod) for pod in found)
                and found
            ),
            timeout=_SETTLE_TIMEOUT,
            what="every workload's Pods to run",
            interval=0.2,
        )

    for pod in pods:
        assert_rewritten(pod, backend, "dev")
    kinds = sorted(owner_kind(pod) for pod in pods)
    assert kinds == ["DaemonSet"] * 2 + ["Job"] * 2 + ["ReplicaSet"] * 2 + ["StatefulSet"] * 2
    daemons = {pod["spec"]["nodeName"] for pod in pods if owner_kind(pod) == "DaemonSet"}
    assert daemons == {node.name for node in created}
    batch = kubernetes.client.BatchV1Api(api)
    wait_until(
        lambda: all(
            batch.read_namespaced_job(job, namespace).status.succeeded == 1
            for job in ("evaluate", "nightly-now")
        ),
        timeout=_SETTLE_TIMEOUT,
        what="the job controller to count both Jobs succeeded",
        interval=0.2,
    )


CRONJOB = """\
apiVersion: batch/v1
kind: CronJob
metadata:
  name: every-minute
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      template:
        metadata:
          annotations:
            castops.io/optimize: "true"
            castops.io/workload-type: dev
        spec:
          restartPolicy: Never
          containers:
            - name: app
              image: registry.invalid/castslice-e2e/app:1
              resources:
                limits:
                  nvidia.com/gpu: 1
"""


@pytest.mark.parametrize("backend", ["resource"], indirect=True)
def test_cronjob_controller_starts_jobs_whose_pods_are_rewritten(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    namespace: str,
    backend: Backend,
    nodes: dict[str, FakeNode],
) -> None:
    kubectl_user.apply(namespace, CRONJOB)

    # Not `kubectl create job --from`: the cronjob controller's own Job, on its schedule.
    [pod] = wait_until(
        lambda: [
            pod
            for pod in list_pods(api, namespace, "")
            if pod["status"].get("phase") == "Succeeded"
        ],
        timeout=_CRON_TIMEOUT,
        what="the cronjob controller's first Job to run its Pod",
        interval=1,
    )

    assert_rewritten(pod, backend, "dev")
    job = kubernetes.client.BatchV1Api(api).read_namespaced_job(
        pod["metadata"]["ownerReferences"][0]["name"], namespace
    )
    [owner] = job.metadata.owner_references
    assert (owner.kind, owner.name) == ("CronJob", "every-minute")
