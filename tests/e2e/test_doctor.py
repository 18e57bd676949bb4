"""`castslice doctor` against a real API server, run as users run it.

A healthy installation passes every check; each way of breaking it (no
registration, an unreachable URL, risky settings, nodes without the shared
resource, no GPU node without sharing for whole-GPU Pods, GPU Operator nodes
that time-slice without renaming, a Pod waiting for it, a GPU quota the
rewrite escapes) makes its check fail with what to do. Every test that
breaks the shared registration puts the session's server back before it ends.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import kubernetes.client
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from castslice.contract import Manifest

from ..procs import free_port, wait_until
from .castslice_server import CastSliceServer, StartServer
from .cluster import LocalControlPlane
from .kubectl import Kubectl
from .nodes import Pool, gpu_nodes, standard_pools
from .pods import create_namespace, create_pod, gpu_container, opted_in, pod
from .registration import (
    configuration_for,
    deregister_and_wait,
    probe_is_mutated,
    register,
    register_and_wait,
)
from .tools import REPO_ROOT

CHECKS = (
    "registration",
    "endpoint",
    "dry-run",
    "nodes",
    "gpu-nodes",
    "pending",
    "quotas",
    "fail-open",
)
PODS = "pods.castslice.castops.io"
WEBHOOKS = f"{PODS}, workloads.castslice.castops.io"
FAIL_OPEN = "apiserver_admission_webhook_fail_open_count"
_TIMEOUT = 120


@dataclass(frozen=True)
class Report:
    """What `castslice doctor` printed: a header, one line per check, a summary."""

    code: int
    header: str
    lines: dict[str, str]
    summary: str
    stderr: str


def doctor(
    kubeconfig: Path, env: Mapping[str, str] | None = None, *args: str
) -> subprocess.CompletedProcess[str]:
    """`python -m castslice doctor --kubeconfig ...` with only the given CASTSLICE_* settings."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CASTSLICE_")}
    environ.update(env or {})
    environ["PYTHONIOENCODING"] = "utf-8"
    return subprocess.run(
        [sys.executable, "-m", "castslice", "doctor", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=environ,
        timeout=_TIMEOUT,
        check=False,
    )


def run_doctor(kubeconfig: Path, env: Mapping[str, str] | None = None) -> Report:
    done = doctor(kubeconfig, env)
    lines = done.stdout.splitlines()
    assert len(lines) == len(CHECKS) + 2, f"unexpected output:\n{done.stdout}{done.stderr}"
    assert "Traceback" not in done.stderr
    return Report(
        done.returncode,
        lines[0],
        dict(zip(CHECKS, lines[1:-1], strict=True)),
        lines[-1],
        done.stderr,
    )


def fail_open_calls(api: kubernetes.client.ApiClient) -> int:
    """The API server's own count of calls to CastSlice's Pod webhook that failed open."""
    request = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    response = api.call_api(*request)
    text = response.read().decode()
    lines = [line for line in text.splitlines() if line.startswith(FAIL_OPEN + "{")]
    return sum(
        int(sample.value)
        for family in text_string_to_metric_families("\n".join(lines) + "\n")
        for sample in family.samples
        if sample.labels.get("name") == PODS
    )


def replace_configuration(api: kubernetes.client.ApiClient, document: Manifest) -> None:
    admission = kubernetes.client.AdmissionregistrationV1Api(api)
    name = document["metadata"]["name"]
    current = admission.read_mutating_webhook_configuration(name)
    document["metadata"]["resourceVersion"] = current.metadata.resource_version
    admission.replace_mutating_webhook_configuration(name, document)


@contextmanager
def broken(api: kubernetes.client.ApiClient, session: CastSliceServer) -> Iterator[None]:
    """Whatever the test does to the registration, the session's server is registered after."""
    try:
        yield
    finally:
        register_and_wait(api, session)


def expect_line(report: Report, check: str, line: str) -> None:
    assert report.lines[check] == line, f"{check}:\n{report.lines[check]}\n!=\n{line}"


def endpoint_pattern(server: CastSliceServer) -> str:
    return (
        re.escape(
            f"✓ endpoint https://127.0.0.1:{server.port}/ answers its health check (castslice "
        )
        + r"\d+\.\d+\.\d+, \d+ ms\)"
    )


def expect_fail_open_line(report: Report, calls: int) -> None:
    """The fail-open line for `calls` (read independently, just before doctor ran).

    The API server counts since it started and the suite shares it: a test
    that stopped CastSlice earlier leaves its count behind.
    """
    if calls == 0:
        expect_line(
            report,
            "fail-open",
            f"✓ no call to CastSlice failed open since this API server started ({FAIL_OPEN})",
        )
    else:
        assert report.lines["fail-open"].startswith(
            f"✗ calls to CastSlice failed open since this API server started ({FAIL_OPEN}): "
            f"{PODS} {calls} time"
        )


# --- a healthy installation ---------------------------------------------------------------


def test_a_healthy_installation_passes_every_check(
    api: kubernetes.client.ApiClient,
    control_plane: LocalControlPlane,
    castslice: CastSliceServer,
    namespace: str,
) -> None:
    with gpu_nodes(api, "resource", standard_pools("resource"), namespace):
        calls = fail_open_calls(api)
        report = run_doctor(control_plane.kubeconfig)

    version = kubernetes.client.VersionApi(api).get_code().git_version
    assert report.header == (
        f"castslice doctor: {control_plane.server_url} (Kubernetes {version}), "
        "backend resource, shared resource nvidia.com/gpu-shared"
    )
    expect_line(
        report,
        "registration",
        f"✓ MutatingWebhookConfiguration castslice has the expected settings ({WEBHOOKS})",
    )
    assert re.fullmatch(endpoint_pattern(castslice), report.lines["endpoint"])
    expect_line(
        report,
        "dry-run",
        "✓ dry run in namespace default: an opted-in GPU Pod comes back rewritten "
        "(nvidia.com/gpu-shared: 1), one without the annotation untouched",
    )
    # One node with 4 slices of one GPU, one plain GPU node the resource backend never uses.
    expect_line(
        report,
        "nodes",
        "✓ nodes offer nvidia.com/gpu-shared on 1 node; "
        "room now for dev: 4 Pods, batch: 2, inference: 2, training: 1",
    )
    expect_line(
        report,
        "gpu-nodes",
        "✓ GPU nodes: whole-GPU Pods ask for nvidia.com/gpu-shared like the others",
    )
    expect_line(report, "pending", "✓ no Pod is Pending for lack of nvidia.com/gpu-shared")
    expect_line(report, "quotas", "✓ GPU quotas: no namespace limits nvidia.com/gpu")
    expect_fail_open_line(report, calls)
    if calls == 0:
        assert (report.code, report.summary) == (0, "all 8 checks passed")
    else:
        assert (report.code, report.summary) == (1, "1 of 8 checks failed")


@pytest.mark.parametrize(
    ("backend", "lacking", "found", "added"),
    [
        (
            "nvidia",
            "✗ no Ready node offers nvidia.com/gpu.shared with nvidia.com/gpu.replicas=4, "
            "nvidia.com/gpu.sharing-strategy=time-slicing (for Pods of 1 slice); nodes with "
            "nvidia.com/gpu.shared have nvidia.com/gpu.replicas=2, "
            "nvidia.com/gpu.sharing-strategy=time-slicing - configure the NVIDIA device plugin "
            "for time-slicing with renameByDefault: true and replicas 2,4, keep GPU nodes "
            "without sharing for whole GPUs, or set CASTSLICE_SHARING_DEGREES to the replicas "
            "your nodes have",
            "✓ nodes offer nvidia.com/gpu.shared with nvidia.com/gpu.replicas=4, "
            "nvidia.com/gpu.sharing-strategy=time-slicing on 1 node; nvidia.com/gpu.shared with "
            "nvidia.com/gpu.replicas=2, nvidia.com/gpu.sharing-strategy=time-slicing on 1 node; "
            "nvidia.com/gpu with nvidia.com/gpu.sharing-strategy=none on 1 node; "
            "room now for dev: 4 Pods, batch: 2, inference: 2, training: 1",
            "nvidia.com/gpu.shared: 1 on nvidia.com/gpu.replicas=4, "
            "nvidia.com/gpu.sharing-strategy=time-slicing",
        ),
        (
            "gke",
            "✗ no Ready node offers nvidia.com/gpu with cloud.google.com/gke-gpu-sharing-strategy="
            "time-sharing, cloud.google.com/gke-max-shared-clients-per-gpu=4 (for Pods of 1 "
            "slice); nodes with nvidia.com/gpu have cloud.google.com/gke-gpu-sharing-strategy="
            "time-sharing, cloud.google.com/gke-max-shared-clients-per-gpu=2 - create GPU "
            "node pools "
            "with gpu-sharing-strategy=time-sharing and max-shared-clients-per-gpu=2,4 plus one "
            "without sharing for whole GPUs, or set CASTSLICE_SHARING_DEGREES to what your "
            "pools offer",
            "✓ nodes offer nvidia.com/gpu with cloud.google.com/gke-gpu-sharing-strategy="
            "time-sharing, cloud.google.com/gke-max-shared-clients-per-gpu=4 on 1 node; "
            "nvidia.com/gpu with cloud.google.com/gke-gpu-sharing-strategy=time-sharing, "
            "cloud.google.com/gke-max-shared-clients-per-gpu=2 on 1 node; nvidia.com/gpu on "
            "1 node; room now for dev: 4 Pods, batch: 2, inference: 2, training: 1",
            "cloud.google.com/gke-gpu-sharing-strategy=time-sharing, "
            "cloud.google.com/gke-max-shared-clients-per-gpu=4",
        ),
    ],
)
def test_placement_backends_need_a_node_pool_per_sharing_degree(
    api: kubernetes.client.ApiClient,
    control_plane: LocalControlPlane,
    own_castslice: StartServer,
    namespace: str,
    backend: str,
    lacking: str,
    found: str,
    added: str,
) -> None:
    env = {"CASTSLICE_BACKEND": backend, "CASTSLICE_SHARING_DEGREES": "2,4"}
    server = own_castslice(env)
    register_and_wait(api, server)
    pools = standard_pools(backend)
    without_four = tuple(pool for pool in pools if pool.sharing != 4)
    assert len(without_four) == len(pools) - 1

    with gpu_nodes(api, backend, without_four, namespace):
        report = run_doctor(control_plane.kubeconfig, env)
    expect_line(report, "nodes", lacking)
    assert report.code == 1

    with gpu_nodes(api, backend, pools, namespace):
        calls = fail_open_calls(api)
        report = run_doctor(control_plane.kubeconfig, env)
    expect_line(report, "nodes", found)
    assert report.lines["gpu-nodes"].startswith(
        "✓ GPU nodes: 1 node offers nvidia.com/gpu without GPU sharing ("
    )
    assert report.lines["registration"].startswith("✓ MutatingWebhookConfiguration castslice")
    assert re.fullmatch(endpoint_pattern(server), report.lines["endpoint"])
    assert report.lines["dry-run"].startswith(
        "✓ dry run in namespace default: an opted-in GPU Pod comes back rewritten ("
    )
    assert added in report.lines["dry-run"]
    assert report.lines["pending"].startswith("✓ no Pod is Pending for lack of nvidia.com/gpu")
    assert report.lines["quotas"].startswith("✓ GPU quotas: ")
    expect_fail_open_line(report, calls)
    assert report.code == (0 if calls == 0 else 1)


# --- a broken registration ----------------------------------------------------------------


def test_a_missing_registration_fails_and_pods_come_back_unchanged(
    api: kubernetes.client.ApiClient, control_plane: LocalControlPlane, castslice: CastSliceServer
) -> None:
    with broken(api, castslice):
        deregister_and_wait(api)
        report = run_doctor(control_plane.kubeconfig)
        as_json = doctor(control_plane.kubeconfig, None, "-o", "json")

    expect_line(
        report,
        "registration",
        "✗ MutatingWebhookConfiguration castslice not found: no Pod is rewritten - "
        "register CastSlice: castslice webhook --url URL | kubectl apply -f -",
    )
    expect_line(
        report, "endpoint", "? endpoint not checked: no CastSlice webhook registered to call"
    )
    expect_line(
        report,
        "dry-run",
        "✗ an opted-in GPU Pod came back unchanged from a dry run in namespace default: "
        "CastSlice was not called or failed open - see the registration, endpoint and "
        "fail-open checks; the namespace must not be excluded by namespaceSelector",
    )
    failures = sum(1 for line in report.lines.values() if line.startswith("✗"))
    assert (report.code, report.summary) == (1, f"{failures} of 8 checks failed")
    assert as_json.returncode == 1
    report_json = yaml.safe_load(as_json.stdout)
    assert report_json["backend"] == "resource"
    assert report_json["server"] == control_plane.server_url
    checks = report_json["checks"]
    assert [(c["check"], c["status"], c["ok"]) for c in checks][:3] == [
        ("registration", "failed", False),
        ("endpoint", "unknown", True),
        ("dry-run", "failed", False),
    ]
    assert (
        checks[0]["fix"] == "register CastSlice: castslice webhook --url URL | kubectl apply -f -"
    )


def test_an_unreachable_url_fails_the_endpoint_dry_run_and_fail_open_checks(
    api: kubernetes.client.ApiClient, control_plane: LocalControlPlane, castslice: CastSliceServer
) -> None:
    closed = free_port()
    with broken(api, castslice):
        register(api, f"https://127.0.0.1:{closed}/", castslice.ca_pem)
        # The dry-run probes fail open now: the API server cannot reach the new URL.
        wait_until(
            lambda: not probe_is_mutated(api, f"probe-{uuid.uuid4().hex[:8]}", "default"),
            timeout=30,
            what="the API server to call the unreachable URL",
        )
        report = run_doctor(control_plane.kubeconfig)
        on_gke = run_doctor(control_plane.kubeconfig, {"CASTSLICE_BACKEND": "gke"})

    expect_line(
        report,
        "registration",
        f"✓ MutatingWebhookConfiguration castslice has the expected settings ({WEBHOOKS})",
    )
    unreachable = (
        f"✗ endpoint https://127.0.0.1:{closed}/ fails its health check: cannot connect: "
        "connection refused; the API server admits opted-in Pods unchanged - deploy CastSlice "
        "there, or point clientConfig.url at it and re-apply"
    )
    expect_line(report, "endpoint", unreachable)
    # With the gke backend the cluster is GKE: the fix adds what commonly blocks the call there.
    egress = (
        "on GKE, the control plane's egress must allow the URL (control plane egress "
        "VIA_CONTROL_PLANE, not NONE) (docs/deploy.md#gke-network-prerequisites)"
    )
    expect_line(on_gke, "endpoint", f"{unreachable}; {egress}")
    assert on_gke.lines["dry-run"].startswith("✗ an opted-in GPU Pod came back unchanged")
    assert on_gke.lines["dry-run"].endswith(f"; {egress}")
    assert not report.lines["dry-run"].endswith(egress)
    assert report.lines["dry-run"].startswith("✗ an opted-in GPU Pod came back unchanged")
    assert report.lines["fail-open"].startswith(
        f"✗ calls to CastSlice failed open since this API server started ({FAIL_OPEN}): {PODS} "
    )
    assert report.lines["fail-open"].endswith(
        "those Pods were admitted unchanged, not sliced - the API server's log says why "
        "('failing open'); recreate the Pods created meanwhile"
    )
    assert report.code == 1


@pytest.mark.parametrize(
    ("setting", "value", "problem"),
    [
        (
            "failurePolicy",
            "Fail",
            "failurePolicy is Fail, expected Ignore (Pod creation stops whenever CastSlice "
            "cannot answer)",
        ),
        (
            "matchConditions",
            None,
            "matchConditions are missing (every Pod creation waits for CastSlice)",
        ),
    ],
)
def test_risky_settings_fail_the_registration_check(
    api: kubernetes.client.ApiClient,
    control_plane: LocalControlPlane,
    castslice: CastSliceServer,
    setting: str,
    value: str | None,
    problem: str,
) -> None:
    document = copy.deepcopy(configuration_for(castslice.url(), castslice.ca_pem))
    webhook = document["webhooks"][0]
    assert webhook["name"] == PODS
    if value is None:
        del webhook[setting]
    else:
        webhook[setting] = value
    with broken(api, castslice):
        replace_configuration(api, document)
        report = run_doctor(control_plane.kubeconfig)

    expect_line(
        report,
        "registration",
        "✗ MutatingWebhookConfiguration castslice differs from the generated one: "
        f"{PODS}: {problem} - re-apply it: castslice webhook --url URL | kubectl apply -f -",
    )
    assert report.lines["endpoint"].startswith("✓ endpoint")
    assert report.code == 1


# --- the cluster around it ----------------------------------------------------------------


def test_nodes_without_the_shared_resource_fail_the_nodes_check(
    api: kubernetes.client.ApiClient,
    control_plane: LocalControlPlane,
    castslice: CastSliceServer,
    namespace: str,
) -> None:
    with gpu_nodes(api, "resource", (Pool("plain", None),), namespace):
        report = run_doctor(control_plane.kubeconfig)

    expect_line(
        report,
        "nodes",
        "✗ no Ready node offers nvidia.com/gpu-shared (for Pods of 1-4 slices) - make the "
        "device plugin advertise nvidia.com/gpu-shared in slices, or set "
        "CASTSLICE_SHARED_RESOURCE to the resource your nodes offer",
    )
    assert report.code == 1


@pytest.mark.parametrize(
    ("backend", "whole_gpu_nodes", "fix"),
    [
        (
            "gke",
            "nvidia.com/gpu without GPU sharing (no cloud.google.com/gke-gpu-sharing-strategy "
            "label, no cloud.google.com/gke-gpu-partition-size label)",
            "add a GPU node pool without GPU sharing (gcloud container node-pools create with "
            "--accelerator=type=TYPE,count=N and no gpu-sharing-strategy), or set "
            "CASTSLICE_PRESETS and CASTSLICE_SHARING_DEGREES so that every preset fits a "
            "sharing pool",
        ),
        (
            "nvidia",
            "nvidia.com/gpu without GPU sharing (nvidia.com/gpu.sharing-strategy=none)",
            "keep GPU nodes without sharing (the whole-gpu entry of "
            "infra/gpu-sharing/nvidia/device-plugin-config.yaml; GPU Feature Discovery labels "
            "them nvidia.com/gpu.sharing-strategy=none), or set CASTSLICE_PRESETS and "
            "CASTSLICE_SHARING_DEGREES so that every preset fits a sharing node",
        ),
    ],
)
def test_whole_gpu_pods_need_a_node_without_sharing(
    api: kubernetes.client.ApiClient,
    control_plane: LocalControlPlane,
    castslice: CastSliceServer,
    namespace: str,
    backend: str,
    whole_gpu_nodes: str,
    fix: str,
) -> None:
    env = {"CASTSLICE_BACKEND": backend}
    pools = standard_pools(backend)
    sharing_only = tuple(pool for pool in pools if pool.sharing is not None)
    assert len(sharing_only) == len(pools) - 1

    with gpu_nodes(api, backend, sharing_only, namespace):
        stuck = run_doctor(control_plane.kubeconfig, env)
    with gpu_nodes(api, backend, pools, namespace):
        fixed = run_doctor(control_plane.kubeconfig, env)

    # The default presets and degrees: only dev (1 slice) fits the 4-way sharing pool.
    pods = "Pods of 2 slices or more (presets training, batch, inference)"
    expect_line(
        stuck,
        "gpu-nodes",
        f"✗ GPU nodes: no Ready node offers {whole_gpu_nodes}: {pods} stay Pending - {fix}",
    )
    assert stuck.code == 1
    expect_line(fixed, "gpu-nodes", f"✓ GPU nodes: 1 node offers {whole_gpu_nodes} for {pods}")


def test_a_gpu_operator_that_time_slices_without_renaming_is_named(
    api: kubernetes.client.ApiClient,
    control_plane: LocalControlPlane,
    castslice: CastSliceServer,
    namespace: str,
) -> None:
    env = {"CASTSLICE_BACKEND": "nvidia"}
    pools = (Pool("ts-4", 4, renamed=False), Pool("plain", None))

    with gpu_nodes(api, "nvidia", pools, namespace) as nodes:
        report = run_doctor(control_plane.kubeconfig, env)
    with gpu_nodes(api, "nvidia", standard_pools("nvidia"), namespace):
        renamed = run_doctor(control_plane.kubeconfig, env)

    (unrenamed,) = [node.name for node in nodes if node.pool.sharing]
    expect_line(
        report,
        "gpu-nodes",
        f"✗ GPU nodes: 1 node ({unrenamed}) with nvidia.com/gpu.replicas=4 and no "
        "nvidia.com/gpu.shared: time-slicing with renameByDefault: false, so nvidia.com/gpu "
        "counts replicas; shared Pods the nvidia backend selects them for stay Pending - set "
        "renameByDefault: true in those nodes' device plugin config, keeping their entries "
        "(docs/backends.md#a-gpu-operator-that-already-time-slices)",
    )
    assert report.code == 1
    assert renamed.lines["gpu-nodes"].startswith("✓ GPU nodes: 1 node offers nvidia.com/gpu ")


def test_a_pod_waiting_for_the_shared_resource_is_listed(
    api: kubernetes.client.ApiClient,
    control_plane: LocalControlPlane,
    castslice: CastSliceServer,
    namespace: str,
) -> None:
    core = kubernetes.client.CoreV1Api(api)
    with gpu_nodes(api, "resource", standard_pools("resource"), namespace):
        # Eight slices: two GPUs' worth, where the one sharing node has one.
        big = pod("two-gpus", [gpu_container()], annotations=opted_in(slice_ratio="8"))
        create_pod(api, namespace, big)
        wait_until(
            lambda: any(
                condition.type == "PodScheduled" and condition.reason == "Unschedulable"
                for condition in core.read_namespaced_pod("two-gpus", namespace).status.conditions
                or []
            ),
            timeout=30,
            what="the scheduler to give up on two-gpus",
        )
        report = run_doctor(control_plane.kubeconfig)

    expect_line(
        report,
        "pending",
        f"✗ 1 Pod Pending (Insufficient nvidia.com/gpu-shared): {namespace}/two-gpus - add GPU "
        "nodes or free some (see the nodes check); kubectl describe pod shows the scheduler's "
        "message",
    )
    assert report.lines["nodes"].startswith("✓ nodes offer nvidia.com/gpu-shared on 1 node")
    assert report.code == 1


def test_a_gpu_quota_the_rewrite_escapes_is_flagged_and_the_fix_works(
    api: kubernetes.client.ApiClient,
    control_plane: LocalControlPlane,
    castslice: CastSliceServer,
    kubectl_user: Kubectl,
) -> None:
    core = kubernetes.client.CoreV1Api(api)
    team = create_namespace(api, f"doctor-quota-{uuid.uuid4().hex[:6]}")
    try:
        core.create_namespaced_resource_quota(
            team,
            {
                "metadata": {"name": "gpus"},
                "spec": {"hard": {"requests.nvidia.com/gpu": "2", "pods": "20"}},
            },
        )
        report = run_doctor(control_plane.kubeconfig)
        line = report.lines["quotas"]
        expect_line(
            report,
            "quotas",
            "✗ GPU quotas: 1 namespace limits nvidia.com/gpu but not nvidia.com/gpu-shared, "
            "which opted-in Pods ask for instead, so they escape the quota: "
            f"{team} (nvidia.com/gpu: 2) - kubectl -n {team} create quota castslice-shared "
            "--hard=requests.nvidia.com/gpu-shared=8",
        )
        assert report.code == 1

        # The fix as printed, run with kubectl, clears the finding.
        fix = line.rpartition(" - ")[2]
        kubectl_user.run(*shlex.split(fix)[1:])
        report = run_doctor(control_plane.kubeconfig)
        expect_line(
            report,
            "quotas",
            "✓ GPU quotas: 1 namespace limits nvidia.com/gpu and nvidia.com/gpu-shared",
        )
    finally:
        for quota in core.list_namespaced_resource_quota(team).items:
            core.delete_namespaced_resource_quota(quota.metadata.name, team)
        core.delete_namespace(team)


# --- who may look -------------------------------------------------------------------------

# What doctor reads and dry-runs, and nothing more: not the API server's /metrics.
READER_RULES = [
    {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["mutatingwebhookconfigurations"],
        "verbs": ["get", "list"],
    },
    {"apiGroups": [""], "resources": ["nodes", "pods", "resourcequotas"], "verbs": ["list"]},
    # Dry runs only, but the API server authorizes them as creates.
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
]


def test_without_the_metrics_right_the_fail_open_check_says_which_right_is_missing(
    api: kubernetes.client.ApiClient,
    control_plane: LocalControlPlane,
    castslice: CastSliceServer,
    namespace: str,
    tmp_path: Path,
) -> None:
    user = f"doctor-{uuid.uuid4().hex[:6]}"
    rbac = kubernetes.client.RbacAuthorizationV1Api(api)
    rbac.create_cluster_role({"metadata": {"name": user}, "rules": READER_RULES})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": user},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": user,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
    )
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, control_plane, user)
    # The authorizer learns of new bindings through a watch; ask it, as the API server would.
    wait_until(
        lambda: may(api, user, "admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
        timeout=30,
        what=f"RBAC to let {user} read webhook configurations",
    )
    try:
        with gpu_nodes(api, "resource", standard_pools("resource"), namespace):
            report = run_doctor(kubeconfig)
    finally:
        rbac.delete_cluster_role_binding(user)
        rbac.delete_cluster_role(user)

    expect_line(
        report,
        "fail-open",
        f"? {FAIL_OPEN} not read: these credentials may not read the API server's /metrics - "
        'to see it, grant a ClusterRole with nonResourceURLs: ["/metrics"], verbs: ["get"]',
    )
    for check in CHECKS[:-1]:
        assert report.lines[check].startswith("✓ "), report.lines[check]
    assert (report.code, report.summary) == (0, "all 8 checks passed")


def may(api: kubernetes.client.ApiClient, user: str, group: str, resource: str) -> bool:
    review = kubernetes.client.AuthorizationV1Api(api).create_subject_access_review(
        {
            "spec": {
                "user": user,
                "resourceAttributes": {"group": group, "resource": resource, "verb": "get"},
            }
        }
    )
    return bool(review.status.allowed)


def write_kubeconfig(path: Path, control_plane: LocalControlPlane, user: str) -> None:
    """A kubeconfig for `user`, with a client certificate from the cluster's CA."""
    pair = control_plane.ca.issue(user, client=True)
    cert, key = pair.write(path.parent, user)
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "e2e",
                "cluster": {
                    "server": control_plane.server_url,
                    "certificate-authority": str(control_plane.pki / "ca.crt"),
                },
            }
        ],
        "users": [
            {"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}
        ],
        "contexts": [{"name": user, "context": {"cluster": "e2e", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(document))
