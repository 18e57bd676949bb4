"""charts/castslice installed, upgraded and uninstalled with the real helm on the real API server.

cert-manager's CRDs come from its release module (tests/helm); cert-manager itself does
not run here, so no certificate is issued and the Deployment's Pods run only as KWOK
plays them. What is checked is what the API server decides: every object of the
release accepted and stored as written, an upgrade changing only the objects and
fields its values change, the registration applied only once the Deployment is Ready
(`--wait`), and an uninstall leaving nothing, the registration gone before the
Deployment.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from castslice.inspect.report.exporter import CLUSTER_PREFIX, UP, metric_names
from tests.helm import (
    CHART,
    GoModuleUnavailable,
    castslice_output,
    cert_manager_crds,
    hook_events,
    pod_monitor_crd,
    run_helm,
    values_file,
)

from ..procs import free_port
from .conftest import missing
from .exporter import run_exporter
from .kubectl import Kubectl
from .nodes import Pool, create_nodes, delete_nodes
from .tools import MissingTool

RELEASE = "gpu-share"
FULLNAME = "gpu-share-castslice"
Objects = list[dict[str, Any]]
# Written by the API server or by controllers, never by the chart.
_SERVER_METADATA = (
    "resourceVersion", "uid", "creationTimestamp", "generation", "managedFields",
)  # fmt: skip
_POLICY = "rules: [{name: research, namespaces: [research], optimize: true, workloadType: dev}]\n"


def serve_crds(kubectl_user: Kubectl, load: Callable[[], list[dict[str, Any]]]) -> None:
    """CRDs from their release modules, served and established; missing Go is a missing tool."""
    try:
        crds = load()
    except GoModuleUnavailable as error:
        missing(MissingTool(str(error)))
    for crd in crds:
        kubectl_user.run("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(crd))
    kubectl_user.wait_established(*(f"crd/{crd['metadata']['name']}" for crd in crds))


@pytest.fixture(scope="module")
def cert_manager(kubectl_user: Kubectl) -> None:
    """cert-manager's CRDs, served and established before the chart's Issuers arrive."""
    serve_crds(
        kubectl_user, lambda: [yaml.safe_load(path.read_text()) for path in cert_manager_crds()]
    )


@pytest.fixture(scope="module")
def node(api: kubernetes.client.ApiClient) -> Iterator[str]:
    """A node for the release's Pods (KWOK marks them Ready), deleted after the module."""
    (created,) = create_nodes(api, "resource", [Pool("chart", None)])
    yield created.name
    delete_nodes(api, [created.name])


@pytest.fixture
def release_namespace(
    helm: Path, kubectl_user: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A namespace for the release, and the release gone after the test whatever its end:
    a failed test must not leave its webhook registered for the tests after it."""
    name = f"chart-{uuid.uuid4().hex[:8]}"
    yield name
    helm_user(
        helm, kubectl_user, tmp_path_factory.mktemp("uninstall"),
        "uninstall", RELEASE, "-n", name, "--ignore-not-found", "--wait",
    )  # fmt: skip
    kubectl_user.run("delete", "namespace", name, "--ignore-not-found", "--wait=false")


def helm_user(helm: Path, kubectl_user: Kubectl, tmp: Path, *args: str) -> str:
    """helm as a user runs it against the cluster, its settings under `tmp`."""
    env = {
        "KUBECONFIG": str(kubectl_user.kubeconfig),
        "HELM_CONFIG_HOME": str(tmp / "config"),
        "HELM_CACHE_HOME": str(tmp / "cache"),
        "HELM_DATA_HOME": str(tmp / "data"),
    }
    return run_helm(helm, *args, env=env).stdout


def server_copies(kubectl_user: Kubectl, manifest: Path) -> dict[str, dict[str, Any]]:
    """The server's copy of each object in `manifest`, by kind/namespace/name."""
    listed = json.loads(kubectl_user.run("get", "-f", str(manifest), "-o", "json").stdout)
    return {key(obj): obj for obj in listed["items"]}


def key(obj: dict[str, Any]) -> str:
    metadata = obj["metadata"]
    return f"{obj['kind']}/{metadata.get('namespace', '')}/{metadata['name']}"


def written(obj: dict[str, Any]) -> dict[str, Any]:
    """What a user or the chart sets: no status, no fields the server stamps."""
    metadata = {k: v for k, v in obj["metadata"].items() if k not in _SERVER_METADATA}
    annotations = {
        k: v
        for k, v in metadata.get("annotations", {}).items()
        if k != "deployment.kubernetes.io/revision"
    }
    metadata.pop("annotations", None)
    if annotations:
        metadata["annotations"] = annotations
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": metadata}


def assert_stored_as_written(chart: Any, stored: Any, where: str = "") -> None:
    """Every field the chart wrote is on the server with the same value (the server may add)."""
    if isinstance(chart, dict):
        assert isinstance(stored, dict), where
        for field, value in chart.items():
            assert field in stored, f"{where}.{field} was dropped"
            assert_stored_as_written(value, stored[field], f"{where}.{field}")
    elif isinstance(chart, list):
        assert isinstance(stored, list) and len(stored) == len(chart), where
        for index, (a, b) in enumerate(zip(chart, stored, strict=True)):
            assert_stored_as_written(a, b, f"{where}[{index}]")
    else:
        assert chart == stored, f"{where}: wrote {chart!r}, stored {stored!r}"


def manifest_of(helm: Path, kubectl_user: Kubectl, tmp: Path, namespace: str) -> Path:
    """The release's objects: its manifest and the hooks an install or upgrade applied."""
    path = tmp / f"manifest-{uuid.uuid4().hex[:6]}.yaml"
    manifest = helm_user(helm, kubectl_user, tmp, "get", "manifest", RELEASE, "-n", namespace)
    hooks = helm_user(helm, kubectl_user, tmp, "get", "hooks", RELEASE, "-n", namespace)
    applied = [
        hook for hook in yaml.safe_load_all(hooks)
        if hook and hook_events(hook) & {"post-install", "post-upgrade"}
    ]  # fmt: skip
    path.write_text(manifest + "---\n" + yaml.safe_dump_all(applied))
    return path


def documents(path: Path) -> Objects:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_install_upgrade_and_uninstall(
    helm: Path,
    cert_manager: None,
    node: str,
    kubectl_user: Kubectl,
    release_namespace: str,
    tmp_path: Path,
) -> None:
    namespace = release_namespace
    first = values_file(tmp_path, {"replicas": 2}, "first.yaml")
    before = list_revision(kubectl_user, "mutatingwebhookconfigurations")
    helm_user(
        helm, kubectl_user, tmp_path,
        "install", RELEASE, str(CHART), "-n", namespace, "--create-namespace", "-f", str(first),
        "--wait", "--timeout=3m",
    )  # fmt: skip

    # The Deployment was Ready before the registration existed: no Pod was sent to a
    # release that could not answer.
    ready = first_event(
        kubectl_user, "deployments", FULLNAME, namespace, before,
        lambda event: event["object"].get("status", {}).get("readyReplicas", 0) >= 1,
    )  # fmt: skip
    registered = first_event(
        kubectl_user, "mutatingwebhookconfigurations", FULLNAME, namespace, before,
        lambda event: event["type"] == "ADDED",
    )  # fmt: skip
    assert ready < registered

    # Installed: every object accepted and stored as the chart wrote it.
    installed_manifest = manifest_of(helm, kubectl_user, tmp_path, namespace)
    installed = server_copies(kubectl_user, installed_manifest)
    chart_objects = {key(obj): obj for obj in documents(installed_manifest)}
    assert set(installed) == set(chart_objects)
    assert {k.split("/")[0] for k in installed} >= {
        "Issuer", "Certificate", "Deployment", "MutatingWebhookConfiguration", "Service",
        "ServiceAccount", "ConfigMap", "PodDisruptionBudget",
    }  # fmt: skip
    for name, obj in chart_objects.items():
        assert_stored_as_written(obj, installed[name], name)

    # Upgraded: more slices per GPU, a replica more and an enrolment policy.
    (tmp_path / "policy.yaml").write_text(_POLICY)
    generated = yaml.safe_load(
        castslice_output(["webhook", "--helm-values", "--policy", str(tmp_path / "policy.yaml")])
    )
    second = values_file(tmp_path, {"replicas": 3, "slicesPerGpu": 8, **generated}, "second.yaml")
    helm_user(
        helm, kubectl_user, tmp_path, "upgrade", RELEASE, str(CHART), "-n", namespace,
        "-f", str(second),
    )  # fmt: skip
    upgraded_manifest = manifest_of(helm, kubectl_user, tmp_path, namespace)
    upgraded = server_copies(kubectl_user, upgraded_manifest)
    for name, obj in {key(o): o for o in documents(upgraded_manifest)}.items():
        assert_stored_as_written(obj, upgraded[name], name)
    assert set(upgraded) == set(installed)
    changed = {name for name in installed if written(installed[name]) != written(upgraded[name])}
    assert changed == {
        f"ConfigMap/{namespace}/{FULLNAME}-config",
        f"ConfigMap/{namespace}/{FULLNAME}-policy",
        f"Deployment/{namespace}/{FULLNAME}",
        f"MutatingWebhookConfiguration//{FULLNAME}",
    }
    settings = [installed, upgraded]
    config = [s[f"ConfigMap/{namespace}/{FULLNAME}-config"]["data"] for s in settings]
    assert {k for k in config[0] if config[0][k] != config[1].get(k)} == {
        "CASTSLICE_SLICES_PER_GPU"
    }
    assert config[1]["CASTSLICE_SLICES_PER_GPU"] == "8"
    deployments = [written(s[f"Deployment/{namespace}/{FULLNAME}"]) for s in settings]
    assert [d["spec"]["replicas"] for d in deployments] == [2, 3]
    annotations = [d["spec"]["template"]["metadata"]["annotations"] for d in deployments]
    assert annotations[0].keys() == annotations[1].keys()
    assert all(annotations[0][k] != annotations[1][k] for k in annotations[0])
    for deployment in deployments:
        del deployment["spec"]["replicas"], deployment["spec"]["template"]["metadata"]
    assert deployments[0] == deployments[1]
    hooks = [s[f"MutatingWebhookConfiguration//{FULLNAME}"] for s in settings]
    assert (
        hooks[1]["webhooks"][0]["matchConditions"]
        == (generated["policyRegistration"]["podMatchConditions"])
    )
    assert (
        hooks[1]["metadata"]["annotations"]["castslice.castops.io/policy"]
        == (generated["policyRegistration"]["annotation"])
    )
    assert hooks[0]["webhooks"][1] == hooks[1]["webhooks"][1]

    # Uninstalled: nothing of the release left, the registration deleted before the Deployment.
    # The server's list (kubectl's own lists carry no resourceVersion): where to replay from.
    since = list_revision(kubectl_user, "deployments")
    helm_user(helm, kubectl_user, tmp_path, "uninstall", RELEASE, "-n", namespace, "--wait")
    left = kubectl_user.run("get", "-f", str(upgraded_manifest), "--ignore-not-found", "-o", "name")
    assert left.stdout.strip() == ""
    releases = kubectl_user.run(
        "get", "secrets", "-n", namespace, "-l", "owner=helm", "-o", "name"
    )  # fmt: skip
    assert releases.stdout.strip() == ""
    deleted = {
        kind: first_event(
            kubectl_user, kind, name, namespace, since, lambda e: e["type"] == "DELETED"
        )
        for kind, name in (
            ("mutatingwebhookconfigurations", FULLNAME),
            ("deployments", FULLNAME),
        )
    }
    assert deleted["mutatingwebhookconfigurations"] < deleted["deployments"]


def list_revision(kubectl_user: Kubectl, resource: str) -> str:
    """The server's current resourceVersion for `resource` (kubectl's own lists carry
    none): where a watch replays from."""
    listed = kubectl_user.run("get", "--raw", f"/apis/{_GROUP_VERSION[resource]}/{resource}")
    return json.loads(listed.stdout)["metadata"]["resourceVersion"]


def first_event(
    kubectl_user: Kubectl,
    resource: str,
    name: str,
    namespace: str,
    since: str,
    wanted: Callable[[dict[str, Any]], bool],
) -> int:
    """The resourceVersion of the first watch event on `name`, replayed from `since`, that
    is `wanted`. One etcd stores every object here: revisions order events across kinds."""
    args = [
        "get", "--raw",
        f"/apis/{_GROUP_VERSION[resource]}"
        + ("" if resource == "mutatingwebhookconfigurations" else f"/namespaces/{namespace}")
        + f"/{resource}?watch=1&resourceVersion={since}&fieldSelector=metadata.name%3D{name}"
        "&timeoutSeconds=2",
    ]  # fmt: skip
    events = [json.loads(line) for line in kubectl_user.run(*args).stdout.splitlines() if line]
    revisions = [
        int(event["object"]["metadata"]["resourceVersion"]) for event in events if wanted(event)
    ]
    assert revisions, f"no such event for {resource}/{name} since {since}: {events}"
    return revisions[0]


_GROUP_VERSION = {
    "mutatingwebhookconfigurations": "admissionregistration.k8s.io/v1",
    "deployments": "apps/v1",
}


def test_a_release_whose_pods_never_get_ready_is_never_registered(
    helm: Path, cert_manager: None, kubectl_user: Kubectl, release_namespace: str, tmp_path: Path
) -> None:
    # No node has this label: the Pods stay Pending, as a crash-looping release's stay unready.
    values = values_file(tmp_path, {"nodeSelector": {"example.com/no-such-node": "true"}})
    env = {
        "KUBECONFIG": str(kubectl_user.kubeconfig),
        "HELM_CONFIG_HOME": str(tmp_path / "config"),
        "HELM_CACHE_HOME": str(tmp_path / "cache"),
        "HELM_DATA_HOME": str(tmp_path / "data"),
    }
    result = run_helm(
        helm, "install", RELEASE, str(CHART), "-n", release_namespace, "--create-namespace",
        "-f", str(values), "--wait", "--timeout=20s", env=env, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert f"Deployment/{release_namespace}/{FULLNAME} not ready" in result.stderr
    registrations = kubectl_user.run(
        "get", "mutatingwebhookconfigurations", FULLNAME, "--ignore-not-found", "-o", "name"
    )  # fmt: skip
    assert registrations.stdout.strip() == ""
    run_helm(helm, "uninstall", RELEASE, "-n", release_namespace, "--wait", env=env)


# Enrols one namespace by name with a count of its own (two whole GPUs), and a glob.
_DRA_POLICY = (
    "rules:\n"
    "  - {name: research, namespaces: [NAMESPACE, 'lab-*'], optimize: true, slices: 7}\n"
    "  - {name: notebooks, podSelector: {matchLabels: {tier: dev}}, optimize: true,"
    " workloadType: dev}\n"
)


def claim_templates_in(kubectl_user: Kubectl, namespace: str) -> dict[str, dict[str, Any]]:
    listed = kubectl_user.run("get", "resourceclaimtemplates", "-n", namespace, "-o", "json")
    return {item["metadata"]["name"]: item["spec"] for item in json.loads(listed.stdout)["items"]}


# resource.k8s.io/v1's ResourceClaimTemplate: Kubernetes 1.34+, consumable capacity 1.36+.
@pytest.mark.kubernetes("1.36")
def test_on_dra_every_slice_count_a_pod_can_get_finds_its_template(
    helm: Path,
    cert_manager: None,
    kubectl_user: Kubectl,
    release_namespace: str,
    tmp_path: Path,
) -> None:
    from castslice.backends.tools import tools_for
    from castslice.environment import load_config

    run = uuid.uuid4().hex[:6]
    listed, enrolled, applied = f"ml-{run}", f"research-{run}", f"team-{run}"
    for name in (listed, enrolled, applied):
        kubectl_user.run("create", "namespace", name)
    try:
        policy = tmp_path / "policy.yaml"
        policy.write_text(_DRA_POLICY.replace("NAMESPACE", enrolled))
        env = {"CASTSLICE_BACKEND": "dra", "CASTSLICE_POLICY_FILE": str(policy)}
        generated = yaml.safe_load(
            castslice_output(["webhook", "--helm-values", "--policy", str(policy)], env)
        )
        generated["claimTemplates"]["namespaces"] = [listed]
        values = values_file(tmp_path, {"backend": "dra", **generated}, "dra.yaml")
        helm_user(
            helm, kubectl_user, tmp_path, "install", RELEASE, str(CHART), "-n", release_namespace,
            "--create-namespace", "-f", str(values),
        )  # fmt: skip
        kubectl_user.run(
            "apply", "-n", applied, "-f", "-",
            stdin=castslice_output(["claim-templates"], env),
        )  # fmt: skip

        config = load_config(env)
        backend = tools_for(config)
        # Every count the default, the presets, the policy and a share of one GPU give, as
        # the webhook names its template.
        counts = {config.default_slices, *config.presets.values(), 7, *range(1, 4)}
        wanted = {backend.place(count).claim_template for count in counts}
        assert wanted == {f"castslice-{s}-of-4" for s in (1, 2, 3, 4, 8)}
        by_namespace = {
            ns: claim_templates_in(kubectl_user, ns) for ns in (listed, enrolled, applied)
        }
        for namespace, found in by_namespace.items():
            assert set(found) == wanted, namespace
        # The chart's and the command's templates are the same objects.
        assert by_namespace[listed] == by_namespace[enrolled] == by_namespace[applied]
    finally:
        helm_user(helm, kubectl_user, tmp_path, "uninstall", RELEASE, "-n", release_namespace)
        for name in (listed, enrolled, applied):
            kubectl_user.run("delete", "namespace", name, "--wait=false")


@pytest.fixture(scope="module")
def pod_monitors(kubectl_user: Kubectl) -> None:
    """prometheus-operator's PodMonitor CRD, so that the API server checks the chart's."""
    serve_crds(kubectl_user, lambda: [pod_monitor_crd()])


def token_kubeconfig(kubectl_user: Kubectl, account: str, namespace: str, path: Path) -> Path:
    """The admin's kubeconfig with a token of `account` instead of the admin's credentials."""
    token = kubectl_user.run("create", "token", account, "-n", namespace).stdout.strip()
    config = yaml.safe_load(kubectl_user.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_report_exporter_installs_and_reads_the_cluster_with_its_own_rights_only(
    helm: Path,
    cert_manager: None,
    pod_monitors: None,
    node: str,
    kubectl_user: Kubectl,
    release_namespace: str,
    tmp_path: Path,
) -> None:
    namespace = release_namespace
    exporter = f"{FULLNAME}-report"
    values = values_file(
        tmp_path, {"reportExporter": {"enabled": True, "podMonitor": {"enabled": True}}}
    )
    helm_user(
        helm, kubectl_user, tmp_path,
        "install", RELEASE, str(CHART), "-n", namespace, "--create-namespace", "-f", str(values),
        "--wait", "--timeout=3m",
    )  # fmt: skip

    # helm's --wait can return before the Deployment's status counts its ready Pod.
    kubectl_user.run(
        "rollout", "status", f"deployment/{exporter}", "-n", namespace, "--timeout=2m",
        timeout=150,
    )  # fmt: skip
    # Every object accepted as written: the PodMonitor by prometheus-operator's CRD, the
    # exporter's Deployment Ready beside the webhook's.
    manifest = manifest_of(helm, kubectl_user, tmp_path, namespace)
    stored = server_copies(kubectl_user, manifest)
    ours = {k: obj for k, obj in ((key(o), o) for o in documents(manifest)) if exporter in k}
    assert {k.split("/")[0] for k in ours} == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service",
        "PodMonitor",
    }  # fmt: skip
    for name, obj in ours.items():
        assert_stored_as_written(obj, stored[name], name)
    assert stored[f"Deployment/{namespace}/{exporter}"]["status"]["readyReplicas"] == 1

    # What its Pod runs, with its ServiceAccount's token: every figure readable, nothing else.
    kubeconfig = token_kubeconfig(kubectl_user, exporter, namespace, tmp_path / "exporter")
    settings = stored[f"ConfigMap/{namespace}/{FULLNAME}-config"]["data"]
    (container,) = stored[f"Deployment/{namespace}/{exporter}"]["spec"]["template"]["spec"][
        "containers"
    ]
    port = free_port()
    command = container["command"]
    assert command[:4] == ["python", "-m", "castslice", "report"]
    argv = [sys.executable, *command[1:], "--kubeconfig", str(kubeconfig)]
    argv[argv.index("--serve") + 1] = str(port)
    argv[argv.index("--address") + 1] = "127.0.0.1"
    samples, stdout, stderr = run_exporter(argv, settings, port)
    assert "Traceback" not in stderr and "cannot read" not in stderr, stderr
    assert stdout.startswith("castslice report: serving the saving as Prometheus metrics on ")
    assert samples[("castslice_report_up", None)] == 1, stderr
    # No Pod is rewritten here: the cluster's figures, and no namespace's.
    assert {name for name, _ in samples} == {
        name for name in metric_names() if name == UP or name.startswith(CLUSTER_PREFIX)
    }, samples
    assert samples[("castslice_cluster_gpus_saved", None)] == 0, samples

    account = f"system:serviceaccount:{namespace}:{exporter}"
    for verb, resource, allowed in (
        ("list", "pods", "yes"), ("list", "nodes", "yes"), ("get", "replicasets.apps", "yes"),
        ("get", "jobs.batch", "yes"), ("watch", "pods", "no"), ("get", "secrets", "no"),
        ("list", "configmaps", "no"), ("delete", "pods", "no"),
    ):  # fmt: skip
        answer = subprocess.run(
            [str(kubectl_user.binary), f"--kubeconfig={kubectl_user.kubeconfig}", "auth",
             "can-i", verb, resource, "--as", account, "-A"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert answer.stdout.strip() == allowed, (verb, resource, answer.stdout, answer.stderr)

    helm_user(helm, kubectl_user, tmp_path, "uninstall", RELEASE, "-n", namespace, "--wait")
    left = kubectl_user.run("get", "-f", str(manifest), "--ignore-not-found", "-o", "name")
    assert left.stdout.strip() == ""
