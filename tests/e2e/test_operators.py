"""Real operators create the Pods: KubeRay's RayCluster and Kubeflow's PyTorchJob, end to end.

Each operator is built from its Go module and runs against the local control
plane with its CRDs from the same module version. A user applies the
operator's own sample, its Pod templates opted in: kubectl prints the workload
warnings, the operator creates the Pods, CastSlice rewrites them at admission,
and the real scheduler places them on fake GPU nodes, where they run.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest
import yaml

from ..procs import HarnessError, ManagedProcess, wait_until
from .castslice_server import CastSliceServer
from .cluster import LocalControlPlane
from .kubectl import Kubectl
from .nodes import GPU, SEED_SHARED, FakeNode, gpu_nodes, standard_pools
from .operators import (
    TRAINING_CERT_DIR,
    OperatorBuild,
    build,
    install_crds,
    mount_secret,
    ray_operator_argv,
    running,
    training_operator_argv,
)
from .pods import Manifest, list_pods
from .registration import APPLIED
from .tools import REPO_ROOT

pytestmark = pytest.mark.kubernetes("1.36")

OPTIMIZE = "castops.io/optimize"
TYPE = "castops.io/workload-type"
RATIO = "castops.io/slice-ratio"
# On the default `resource` backend a Pod of N slices asks for N of this.
SLICES = {"dev": 1, "inference": 2}
_RUNNING_TIMEOUT = 90.0
# Where the training operator keeps its webhook certificate (MY_POD_NAMESPACE); its
# validating webhook is never registered with the API server.
_TRAINING_NAMESPACE = "kubeflow"
_TRAINING_WEBHOOKS = "validator.training-operator.kubeflow.org"
_TRAINING_SECRET = "training-operator-webhook-cert"
# The running operators, whose log tails a failure shows.
_operators: dict[Path, ManagedProcess] = {}


def _filled(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> dict | None:
    data = core.read_namespaced_secret(name, namespace).data or {}
    return data if "tls.crt" in data and "tls.key" in data else None


@pytest.fixture(scope="module")
def kuberay(kubectl_user: Kubectl, control_plane: LocalControlPlane) -> Iterator[OperatorBuild]:
    operator = build("kuberay")
    install_crds(kubectl_user, operator)
    argv = ray_operator_argv(operator, control_plane.kubeconfig)
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    with running("ray-operator", argv, control_plane.logs, env) as process:
        _operators[operator.directory] = process
        yield operator


@pytest.fixture(scope="module")
def training_operator(
    kubectl_user: Kubectl, control_plane: LocalControlPlane, api: kubernetes.client.ApiClient
) -> Iterator[OperatorBuild]:
    operator = build("training-operator")
    install_crds(kubectl_user, operator)
    # What its Deployment would come with: the namespace, the Secret its certificate
    # rotator fills and the (here empty) webhook configuration it injects the CA into.
    kubectl_user.apply(
        _TRAINING_NAMESPACE,
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": _TRAINING_NAMESPACE},
                },
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": _TRAINING_SECRET},
                },
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingWebhookConfiguration",
                    "metadata": {"name": _TRAINING_WEBHOOKS},
                },
            ]
        ),
    )
    argv = training_operator_argv(operator, control_plane.kubeconfig)
    env = {
        **os.environ,
        "KUBECONFIG": str(control_plane.kubeconfig),
        "MY_POD_NAMESPACE": _TRAINING_NAMESPACE,
    }
    core = kubernetes.client.CoreV1Api(api)
    with running("training-operator", argv, control_plane.logs, env) as process:
        # It starts its controllers once its certificate rotator has filled the Secret and
        # the kubelet would have mounted it; here the test is that kubelet.
        secret = wait_until(
            lambda: _filled(core, _TRAINING_NAMESPACE, _TRAINING_SECRET),
            timeout=_RUNNING_TIMEOUT,
            what=f"the training operator to write its Secret {_TRAINING_SECRET}",
            interval=0.5,
            alive=process.check_running,
        )
        mount_secret(secret, TRAINING_CERT_DIR)
        _operators[operator.directory] = process
        yield operator


@pytest.fixture
def nodes(api: kubernetes.client.ApiClient, namespace: str) -> Iterator[list[FakeNode]]:
    with gpu_nodes(api, "resource", standard_pools("resource"), namespace) as created:
        yield created


def apply(kubectl: Kubectl, tmp_path: Path, namespace: str, manifest: Manifest) -> list[str]:
    """`kubectl apply -f FILE` as a user runs it; the `Warning:` lines it prints."""
    path = tmp_path / f"{manifest['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    stderr = kubectl.run("apply", "-n", namespace, "-f", str(path)).stderr
    return [line for line in stderr.splitlines() if line.startswith("Warning: ")]


def running_pods(api: kubernetes.client.ApiClient, namespace: str, count: int) -> list[Manifest]:
    """The `count` Pods the operator created, once all of them run."""

    def all_running() -> list[Manifest] | None:
        pods = list_pods(api, namespace, "")
        up = [pod for pod in pods if pod["status"].get("phase") == "Running"]
        return pods if len(pods) == count and len(up) == count else None

    try:
        return wait_until(
            all_running,
            timeout=_RUNNING_TIMEOUT,
            what=f"{count} operator-created Pods in {namespace} to run",
            interval=0.5,
        )
    except HarnessError as error:
        states = {
            pod["metadata"]["name"]: (pod["status"].get("phase"), pod["spec"].get("nodeName"))
            for pod in list_pods(api, namespace, "")
        }
        logs = "\n".join(
            f"--- {process.name}:\n{process.log_tail(30)}" for process in _operators.values()
        )
        raise AssertionError(f"{error}: {states}\n{logs}") from None


def limits_of(pod: Manifest, container: str) -> dict[str, str]:
    [found] = [c for c in pod["spec"]["containers"] if c["name"] == container]
    return found["resources"].get("limits", {})


def record_of(pod: Manifest) -> dict | None:
    applied = pod["metadata"].get("annotations", {}).get(APPLIED)
    return json.loads(applied) if applied else None


def test_a_rayclusters_gpu_worker_group_is_sliced_and_runs(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    kuberay: OperatorBuild,
    namespace: str,
    nodes: list[FakeNode],
    tmp_path: Path,
) -> None:
    cluster = yaml.safe_load(kuberay.sample("ray-cluster.sample.yaml"))
    [group] = cluster["spec"]["workerGroupSpecs"]
    group["template"]["metadata"] = {"annotations": {OPTIMIZE: "true", TYPE: "inference"}}
    [worker] = group["template"]["spec"]["containers"]
    worker["resources"]["limits"][GPU] = 2

    warnings = apply(kubectl_user, tmp_path, namespace, cluster)

    assert warnings == [
        f'Warning: workerGroupSpecs[{group["groupName"]}]: container "{worker["name"]}" '
        f"asked for 2 {GPU}; castslice gives it 1/2 of a GPU"
    ]
    pods = running_pods(api, namespace, 2)
    by_type = {pod["metadata"]["labels"]["ray.io/node-type"]: pod for pod in pods}
    worker_pod, head_pod = by_type["worker"], by_type["head"]
    assert GPU not in limits_of(worker_pod, worker["name"])
    assert limits_of(worker_pod, worker["name"])[SEED_SHARED] == str(SLICES["inference"])
    assert record_of(worker_pod) == {
        "slices": SLICES["inference"],
        "source": "workload-type",
        "backend": "resource",
        "original": {worker["name"]: "2"},
    }
    # The head was not opted in: untouched, and placed all the same.
    assert record_of(head_pod) is None
    assert head_pod["spec"]["nodeName"]
    # The RayCluster itself is never patched.
    stored = json.loads(
        kubectl_user.run(
            "get", "-n", namespace, "raycluster", cluster["metadata"]["name"], "-o", "json"
        ).stdout
    )
    assert "castslice.castops.io" not in json.dumps(stored["spec"])


def test_a_pytorchjobs_replica_types_are_sliced_and_run(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    training_operator: OperatorBuild,
    namespace: str,
    nodes: list[FakeNode],
    tmp_path: Path,
) -> None:
    job = yaml.safe_load(training_operator.sample("pytorch_job_mnist_nccl.yaml"))
    replicas = job["spec"]["pytorchReplicaSpecs"]
    replicas["Master"]["template"]["metadata"] = {"annotations": {OPTIMIZE: "true", TYPE: "dev"}}
    replicas["Worker"]["template"]["metadata"] = {
        "annotations": {OPTIMIZE: "true", TYPE: "inference"}
    }
    # Put where it does nothing: on the PyTorchJob's own metadata.
    job["metadata"]["annotations"] = {RATIO: "2"}

    warnings = apply(kubectl_user, tmp_path, namespace, job)

    assert warnings == [
        f"Warning: {RATIO} on the PyTorchJob is ignored; move it to its Pod templates' annotations"
    ]
    pods = running_pods(api, namespace, 2)
    by_type = {pod["metadata"]["labels"]["training.kubeflow.org/replica-type"]: pod for pod in pods}
    for replica, workload_type in (("master", "dev"), ("worker", "inference")):
        pod = by_type[replica]
        limits = limits_of(pod, "pytorch")
        assert GPU not in limits, replica
        assert limits[SEED_SHARED] == str(SLICES[workload_type]), replica
        assert (record_of(pod) or {}).get("slices") == SLICES[workload_type], replica
        assert pod["spec"]["nodeName"], replica


def test_the_docs_pytorchjob_example_runs_as_they_show(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    training_operator: OperatorBuild,
    castslice: CastSliceServer,
) -> None:
    page = (REPO_ROOT / "docs" / "operators.md").read_text()
    session = re.search(r"With the training operator running.*?```\n(.*?)```", page, re.S).group(1)
    # Each `$ command` and the lines it printed.
    runs = [run.split("\n", 1) for run in session.removeprefix("$ ").split("\n$ ")]
    commands = [command for command, _ in runs]
    assert commands[0] == (
        "kubectl create namespace research && kubectl apply -f examples/pytorchjob.yaml"
    )
    shown_apply, shown_pods = (printed for _, printed in runs)

    created = kubectl_user.run("create", "namespace", "research")
    with gpu_nodes(api, "resource", standard_pools("resource"), "research"):
        applied = kubectl_user.run("apply", "-f", str(REPO_ROOT / "examples" / "pytorchjob.yaml"))
        running_pods(api, "research", 2)
        pods = kubectl_user.run(*commands[1].split()[1:])
        kubectl_user.run("delete", "namespace", "research", "--wait=false")

    assert created.stdout + applied.stderr + applied.stdout == shown_apply.rstrip("\n") + "\n"
    assert pods.stdout == shown_pods
