"""`castslice doctor`'s judgement, on objects shaped as the API server returns them.

The live-cluster behaviour (what each check reads and how the command exits)
is proven in tests/e2e/test_doctor.py; here every verdict and message.
"""

from __future__ import annotations

import copy
import datetime
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from castslice.contract import Manifest
from castslice.contract.cluster import connection_problem
from castslice.contract.findings import (
    ASCII_SYMBOLS,
    SYMBOLS,
    Result,
    Status,
    symbols_for,
    text_line,
    to_json,
)
from castslice.environment import load_config
from castslice.inspect.doctor import capacity, dry_run, endpoint, fail_open, pending, quotas
from castslice.inspect.doctor import registered_webhook as reg
from castslice.inspect.doctor import scheduler as scheduler_check
from castslice.settings.config import Config
from tests.factories import run_castslice, unreachable_kubeconfig

ROOT = Path(__file__).resolve().parent.parent
PODS = "pods.castslice.castops.io"


WORKLOADS = "workloads.castslice.castops.io"


def shipped() -> Manifest:
    """What `castslice webhook` generates with the default settings."""
    return reg.expected_configuration(Config())


def live_from(expected: Manifest) -> Manifest:
    """`expected` as a cluster stores it: pointing somewhere, with server-set metadata."""
    live = copy.deepcopy(expected)
    live["metadata"]["resourceVersion"] = "4711"
    for webhook in live["webhooks"]:
        webhook["clientConfig"] = {"url": "https://castslice-abc.a.run.app/"}
        webhook["objectSelector"] = {}
        for rule in webhook["rules"]:
            rule.setdefault("scope", "*")
    return live


# --- registration -------------------------------------------------------------------------


def test_the_generated_configuration_as_stored_passes() -> None:
    expected = shipped()
    result = reg.check_registration("castslice", live_from(expected), expected)
    assert result.status is Status.OK
    assert result.message == (
        f"MutatingWebhookConfiguration castslice has the expected settings ({PODS}, {WORKLOADS})"
    )


def test_a_missing_configuration_fails_and_says_how_to_register() -> None:
    result = reg.check_registration("castslice", None, shipped())
    assert result.status is Status.FAILED
    assert result.message == "MutatingWebhookConfiguration castslice not found: no Pod is rewritten"
    assert result.fix == "register CastSlice: castslice webhook --url URL | kubectl apply -f -"


def test_a_configuration_under_another_name_is_pointed_at() -> None:
    other = live_from(shipped())
    other["metadata"]["name"] = "castslice-prod"
    unrelated = {"metadata": {"name": "istio"}, "webhooks": [{"name": "sidecar.istio.io"}]}
    holders = reg.holders_of([unrelated, other], [PODS])
    assert holders == ["castslice-prod"]
    result = reg.check_registration("castslice", None, shipped(), holders)
    assert result.fix.startswith("run castslice doctor --name castslice-prod")


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            {"failurePolicy": "Fail"},
            "failurePolicy is Fail, expected Ignore "
            "(Pod creation stops whenever CastSlice cannot answer)",
        ),
        ({"timeoutSeconds": 30}, "timeoutSeconds is 30, expected 5"),
        ({"sideEffects": "Unknown"}, "sideEffects is Unknown, expected None"),
        ({"reinvocationPolicy": "IfNeeded"}, "reinvocationPolicy is IfNeeded, expected Never"),
        ({"matchConditions": None}, "matchConditions are missing"),
        (
            {"namespaceSelector": {}},
            "namespaceSelector does not exclude castslice, kube-node-lease, kube-system",
        ),
        (
            {
                "rules": [
                    {
                        "operations": ["CREATE", "UPDATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ]
            },
            "rules are CREATE/UPDATE pods (core/v1), expected CREATE pods (core/v1)",
        ),
    ],
)
def test_each_setting_that_differs_is_named(change: Manifest, problem: str) -> None:
    expected = shipped()
    live = live_from(expected)
    for key, value in change.items():
        if value is None:
            del live["webhooks"][0][key]
        else:
            live["webhooks"][0][key] = value
    result = reg.check_registration("castslice", live, expected)
    assert result.status is Status.FAILED
    assert result.message.startswith(
        f"MutatingWebhookConfiguration castslice differs from the generated one: {PODS}: {problem}"
    )
    assert result.fix == "re-apply it: castslice webhook --url URL | kubectl apply -f -"


def test_settings_left_out_count_as_the_api_defaults() -> None:
    expected = shipped()
    live = live_from(expected)
    del live["webhooks"][0]["timeoutSeconds"]
    del live["webhooks"][0]["failurePolicy"]
    problems = reg.webhook_differences(expected["webhooks"][0], live["webhooks"][0])
    assert problems[0].startswith("failurePolicy is Fail, expected Ignore")
    assert problems[1] == "timeoutSeconds is 10, expected 5"


def test_match_conditions_compare_by_name_and_expression_not_whitespace() -> None:
    expected = shipped()
    live = live_from(expected)
    conditions = live["webhooks"][0]["matchConditions"]
    conditions[0]["expression"] = "  " + conditions[0]["expression"].replace(" && ", "\n  && ")
    assert reg.webhook_differences(expected["webhooks"][0], live["webhooks"][0]) == []
    conditions[0]["expression"] = "true"
    del conditions[1]
    conditions.append({"name": "everything", "expression": "true"})
    assert reg.webhook_differences(expected["webhooks"][0], live["webhooks"][0]) == [
        "matchConditions differ (missing not-a-mirror-pod; changed opted-in; unexpected everything)"
    ]


def test_a_missing_webhook_is_named() -> None:
    expected = shipped()
    live = live_from(expected)
    del live["webhooks"][1]
    result = reg.check_registration("castslice", live, expected)
    assert result.message.endswith(f"webhook {WORKLOADS} is missing")


def test_in_cluster_the_services_namespace_is_the_one_to_exclude() -> None:
    live = live_from(shipped())
    for webhook in live["webhooks"]:
        webhook["clientConfig"] = {
            "service": {"namespace": "gpu-system", "name": "castslice", "port": 443}
        }
        webhook["namespaceSelector"]["matchExpressions"][0]["values"] = [
            "kube-system",
            "kube-node-lease",
            "gpu-system",
        ]
    expected = reg.expected_configuration(Config(), live)
    assert reg.check_registration("castslice", live, expected).status is Status.OK
    live["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"].pop()
    result = reg.check_registration("castslice", live, expected)
    assert result.message == (
        "MutatingWebhookConfiguration castslice differs from the generated one: "
        f"{PODS}: namespaceSelector does not exclude gpu-system (their Pods are sent to CastSlice)"
    )
    assert result.fix == (
        "re-apply it: castslice webhook --service gpu-system/castslice | kubectl apply -f -"
    )


# --- endpoint -----------------------------------------------------------------------------


def test_the_url_is_shown_without_its_path_which_may_hold_the_token() -> None:
    assert endpoint.display_url("https://c.run.app/s3cr3t-token-value") == "https://c.run.app/…"
    assert endpoint.display_url("https://127.0.0.1:8443/") == "https://127.0.0.1:8443/"


def test_only_castslices_health_answer_counts() -> None:
    assert endpoint.health_version(200, b'{"status": "ok", "version": "0.1.0"}') == "0.1.0"
    with pytest.raises(endpoint.Unhealthy, match="HTTP 503"):
        endpoint.health_version(503, b"")
    with pytest.raises(endpoint.Unhealthy, match="not JSON"):
        endpoint.health_version(200, b"<html>hello</html>")
    with pytest.raises(endpoint.Unhealthy, match="status ok"):
        endpoint.health_version(200, b'{"status": "starting"}')


def test_client_configs_of_castslices_webhooks_only_and_once() -> None:
    url = {"url": "https://castslice.example/"}
    live = {
        "webhooks": [
            {"name": PODS, "clientConfig": url},
            {"name": "workloads.castslice.castops.io", "clientConfig": dict(url)},
            {"name": "other.example.com", "clientConfig": {"url": "https://other.example/"}},
        ]
    }
    names = [PODS, "workloads.castslice.castops.io"]
    assert endpoint.castslice_client_configs(live, names) == [url]
    assert endpoint.castslice_client_configs(None, names) == []


def test_connection_failures_read_as_a_reason() -> None:
    assert connection_problem(ConnectionRefusedError(111, "Connection refused")) == (
        "connection refused"
    )
    verify = (
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
        "self-signed certificate (_ssl.c:1006)"
    )
    assert connection_problem(verify) == (
        "its TLS certificate is not trusted (self-signed certificate)"
    )


# --- dry run ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "limits", "selector"),
    [
        ({}, {"nvidia.com/gpu-shared": "1"}, {}),
        (
            {"CASTSLICE_BACKEND": "nvidia"},
            {"nvidia.com/gpu.shared": "1"},
            {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"},
        ),
        (
            {"CASTSLICE_BACKEND": "gke"},
            {"nvidia.com/gpu": "1"},
            {
                "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
                "cloud.google.com/gke-max-shared-clients-per-gpu": "4",
            },
        ),
    ],
)
def test_the_expected_dry_run_answer_is_the_functions_decision(
    environ: dict[str, str], limits: dict[str, str], selector: dict[str, str]
) -> None:
    config = load_config(environ)
    probe = dry_run.probe_pod(config, opted_in=True)
    expected = dry_run.expected_pod(config, probe, "default")
    resources = expected["spec"]["containers"][0]["resources"]
    assert resources == {"requests": limits, "limits": limits}
    assert expected["spec"].get("nodeSelector", {}) == selector
    record = json.loads(expected["metadata"]["annotations"]["castslice.castops.io/applied"])
    assert record == {
        "slices": 1,
        "source": "default",
        "backend": config.backend,
        "original": {"probe": "1"},
    }
    untouched = dry_run.probe_pod(config, opted_in=False)
    assert dry_run.expected_pod(config, untouched, "default") == untouched


def test_an_unchanged_answer_and_another_backend_are_told_apart() -> None:
    config = Config()
    probe = dry_run.probe_pod(config, opted_in=True)
    expected = dry_run.expected_pod(config, probe, "default")
    assert dry_run.differences(expected, expected) == []
    assert dry_run.differences(expected, probe) == [
        "container probe has nvidia.com/gpu: 1, expected nvidia.com/gpu-shared: 1",
        "castslice.castops.io/applied is missing",
    ]
    nvidia = load_config({"CASTSLICE_BACKEND": "nvidia"})
    answered = dry_run.expected_pod(nvidia, probe, "default")
    problems = dry_run.differences(expected, answered)
    assert problems[-1] == "the function's backend is nvidia, this configuration's is resource"
    assert problems[1].startswith("nodeSelector is nvidia.com/gpu.replicas=4")


# --- nodes --------------------------------------------------------------------------------


def node(
    name: str,
    allocatable: dict[str, str],
    labels: dict[str, str] | None = None,
    *,
    ready: bool = True,
    cordoned: bool = False,
) -> Manifest:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "allocatable": {"cpu": "8", "pods": "110", **allocatable},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def bound(node_name: str, resource: str, count: str, **spec: Any) -> Manifest:
    containers = [{"name": "app", "resources": {"limits": {resource: count}}}]
    return {
        "metadata": {"name": "p"},
        "spec": {"nodeName": node_name, "containers": containers, **spec},
    }


NVIDIA_SHARING = {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
NVIDIA_PLAIN = {"nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none"}


def test_room_on_the_resource_backend_is_per_slice_size() -> None:
    nodes = [node("a", {"nvidia.com/gpu-shared": "8"}), node("b", {"nvidia.com/gpu-shared": "4"})]
    pods = [bound("a", "nvidia.com/gpu-shared", "3")]
    result = capacity.assess(Config(), nodes, pods)
    assert result.status is Status.OK
    # a: 5 free, b: 4 free.
    assert result.message == (
        "nodes offer nvidia.com/gpu-shared on 2 nodes; "
        "room now for dev: 9 Pods, batch: 4, inference: 4, training: 2"
    )


def test_nodes_without_the_shared_resource_fail_with_the_fix() -> None:
    nodes = [
        node("a", {"nvidia.com/gpu": "1"}),
        node("b", {"nvidia.com/gpu-shared": "4"}, ready=False),
        node("c", {"nvidia.com/gpu-shared": "4"}, cordoned=True),
    ]
    result = capacity.assess(Config(), nodes, [])
    assert result.status is Status.FAILED
    assert result.message == ("no Ready node offers nvidia.com/gpu-shared (for Pods of 1-4 slices)")
    assert result.fix.startswith("make the device plugin advertise nvidia.com/gpu-shared")


def test_nvidia_needs_each_sharing_degree_and_plain_gpus() -> None:
    config = load_config({"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_SHARING_DEGREES": "2,4"})
    two = {**NVIDIA_SHARING, "nvidia.com/gpu.replicas": "2"}
    nodes = [node("shared-2", {"nvidia.com/gpu.shared": "2"}, two)]
    result = capacity.assess(config, nodes, [])
    assert result.status is Status.FAILED
    assert result.message == (
        "no Ready node offers nvidia.com/gpu.shared with nvidia.com/gpu.replicas=4, "
        "nvidia.com/gpu.sharing-strategy=time-slicing (for Pods of 1 slice); nodes with "
        "nvidia.com/gpu.shared have nvidia.com/gpu.replicas=2, "
        "nvidia.com/gpu.sharing-strategy=time-slicing; "
        "no Ready node offers nvidia.com/gpu with nvidia.com/gpu.sharing-strategy=none "
        "(for Pods of 3-4 slices)"
    )
    assert "replicas 2,4" in result.fix
    nodes += [
        node("shared-4", {"nvidia.com/gpu.shared": "8"}, NVIDIA_SHARING),
        node("plain", {"nvidia.com/gpu": "2"}, NVIDIA_PLAIN),
    ]
    pods = [bound("plain", "nvidia.com/gpu", "1"), bound("shared-4", "nvidia.com/gpu.shared", "1")]
    result = capacity.assess(config, nodes, pods)
    assert result.status is Status.OK
    assert result.message.endswith("room now for dev: 7 Pods, batch: 2, inference: 2, training: 1")


def test_gke_whole_gpus_do_not_count_sharing_nodes() -> None:
    config = load_config({"CASTSLICE_BACKEND": "gke"})
    sharing = {
        "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
        "cloud.google.com/gke-max-shared-clients-per-gpu": "4",
    }
    nodes = [node("shared", {"nvidia.com/gpu": "4"}, sharing)]
    result = capacity.assess(config, nodes, [])
    assert result.status is Status.FAILED
    assert result.message == "no Ready node offers nvidia.com/gpu (for Pods of 2-4 slices)"
    nodes.append(node("plain", {"nvidia.com/gpu": "1"}))
    result = capacity.assess(config, nodes, [bound("plain", "nvidia.com/gpu", "1")])
    assert result.status is Status.WARNING
    assert result.message.endswith("room now for dev: 4 Pods, batch: 0, inference: 0, training: 0")
    assert (
        result.fix
        == "batch, inference, training Pods stay Pending until GPUs free up or nodes are added"
    )


def test_a_pods_request_counts_sidecars_and_the_largest_init_container() -> None:
    resource = "nvidia.com/gpu-shared"

    def c(count: str, **extra: Any) -> Manifest:
        return {"name": "x", "resources": {"requests": {resource: count}}, **extra}

    pod = {"spec": {"containers": [c("2"), c("1")], "initContainers": [c("5")]}}
    assert capacity.pod_request(pod, resource) == 5
    pod = {
        "spec": {"containers": [c("2")], "initContainers": [c("1", restartPolicy="Always"), c("2")]}
    }
    assert capacity.pod_request(pod, resource) == 3
    assert capacity.pod_request({"spec": {"containers": [{"name": "cpu"}]}}, resource) == 0


# --- pending ------------------------------------------------------------------------------

MESSAGE = (
    "0/3 nodes are available: 1 Insufficient nvidia.com/gpu-shared, 2 Insufficient cpu. "
    "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
)


def pending_pod(name: str, message: str, *, rewritten: bool = False) -> Manifest:
    annotations = {"castslice.castops.io/applied": "{}"} if rewritten else {}
    return {
        "metadata": {"namespace": "ml", "name": name, "annotations": annotations},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ],
        },
    }


def test_the_schedulers_message_names_the_lacking_resources() -> None:
    assert pending.insufficient(MESSAGE) == {"nvidia.com/gpu-shared", "cpu"}
    assert pending.insufficient("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.") == {
        "nvidia.com/gpu"
    }


def test_pending_pods_are_listed_up_to_five() -> None:
    pods = [pending_pod(f"p{i}", MESSAGE) for i in range(7)]
    pods.append(pending_pod("cpu-only", "0/3 nodes are available: 3 Insufficient cpu."))
    result = pending.assess(Config(), pods)
    assert result.status is Status.FAILED
    assert result.message == (
        "7 Pods Pending (Insufficient nvidia.com/gpu-shared): "
        "ml/p0, ml/p1, ml/p2, ml/p3, ml/p4 and 2 more"
    )
    assert pending.assess(Config(), pods[-1:]).message == (
        "no Pod is Pending for lack of nvidia.com/gpu-shared"
    )


def test_gpu_and_label_shortages_count_for_pods_castslice_placed() -> None:
    config = load_config({"CASTSLICE_BACKEND": "gke"})
    gpu = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    labels = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    pods = [
        pending_pod("theirs", gpu),
        pending_pod("ours", gpu, rewritten=True),
        pending_pod("placed", labels, rewritten=True),
    ]
    result = pending.assess(config, pods)
    assert result.message == (
        "2 Pods Pending (Insufficient nvidia.com/gpu; no node with the labels it selects): "
        "ml/ours, ml/placed"
    )


# --- quotas -------------------------------------------------------------------------------


def quota(namespace: str, **hard: str) -> Manifest:
    return {"metadata": {"namespace": namespace, "name": "q"}, "spec": {"hard": hard}}


def test_a_gpu_quota_without_one_on_the_shared_resource_is_flagged() -> None:
    quotas_ = [
        quota("team-a", **{"requests.nvidia.com/gpu": "2", "pods": "10"}),
        quota("team-b", **{"requests.nvidia.com/gpu": "1"}),
        quota("team-b", **{"requests.nvidia.com/gpu-shared": "4"}),
        quota("team-c", **{"cpu": "10"}),
    ]
    result = quotas.assess(Config(), quotas_)
    assert result.status is Status.FAILED
    assert result.message == (
        "GPU quotas: 1 namespace limits nvidia.com/gpu but not nvidia.com/gpu-shared, which "
        "opted-in Pods ask for instead, so they escape the quota: team-a (nvidia.com/gpu: 2)"
    )
    assert result.fix == (
        "kubectl -n team-a create quota castslice-shared --hard=requests.nvidia.com/gpu-shared=8"
    )
    assert quotas.assess(Config(), quotas_[1:]).message == (
        "GPU quotas: 1 namespace limits nvidia.com/gpu and nvidia.com/gpu-shared"
    )
    assert quotas.assess(Config(), quotas_[3:]).message == (
        "GPU quotas: no namespace limits nvidia.com/gpu"
    )


def test_on_nvidia_the_quota_is_in_clients_and_on_gke_nothing_is_renamed() -> None:
    nvidia = load_config({"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_SHARING_DEGREES": "2,8"})
    result = quotas.assess(nvidia, [quota("ml", **{"requests.nvidia.com/gpu": "3"})])
    assert result.fix.endswith("--hard=requests.nvidia.com/gpu.shared=24")
    gke = load_config({"CASTSLICE_BACKEND": "gke"})
    result = quotas.assess(gke, [quota("ml", **{"requests.nvidia.com/gpu": "3"})])
    assert result.status is Status.OK


# --- fail-open ----------------------------------------------------------------------------

FAIL_OPEN = "apiserver_admission_webhook_fail_open_count"
LATENCY = "apiserver_admission_webhook_admission_duration_seconds"
# As kube-apiserver writes its /metrics page (other metrics and webhooks around ours).
METRICS = "\n".join(
    [
        f"# HELP {LATENCY} [ALPHA] Admission webhook latency",
        f"# TYPE {LATENCY} histogram",
        f'{LATENCY}_count{{name="{PODS}",operation="CREATE",rejected="false",type="admit"}} 12',
        f"# HELP {FAIL_OPEN} [ALPHA] Admission webhook fail open count, identified by name and "
        "broken out for each admission type (validating or mutating).",
        f"# TYPE {FAIL_OPEN} counter",
        f'{FAIL_OPEN}{{name="{PODS}",type="admit"}} 3',
        f'{FAIL_OPEN}{{name="policy.example.com",type="validating"}} 7',
    ]
)


def test_fail_open_calls_are_counted_for_castslices_webhooks_only() -> None:
    names = [PODS, "workloads.castslice.castops.io"]
    counts = fail_open.fail_open_counts(METRICS, names)
    assert counts == {PODS: 3, "workloads.castslice.castops.io": 0}
    result = fail_open.assess(counts)
    assert result.status is Status.FAILED
    assert result.message == (
        "calls to CastSlice failed open since this API server started "
        f"(apiserver_admission_webhook_fail_open_count): {PODS} 3 times; "
        "those Pods were admitted unchanged, not sliced"
    )
    assert fail_open.assess(fail_open.fail_open_counts("", names)).status is Status.OK


# --- output -------------------------------------------------------------------------------


def test_a_line_per_check_and_json_for_machines() -> None:
    ok = Result("nodes", Status.OK, "nodes offer x")
    bad = Result("pending", Status.FAILED, "2 Pods Pending", "add nodes")
    assert text_line(ok) == "✓ nodes offer x"
    assert text_line(bad) == "✗ 2 Pods Pending - add nodes"
    assert text_line(bad, symbols_for("ascii")) == "x 2 Pods Pending - add nodes"
    assert json.loads(to_json([ok, bad], {"backend": "gke"})) == {
        "backend": "gke",
        "checks": [
            {"check": "nodes", "ok": True, "status": "ok", "message": "nodes offer x", "fix": ""},
            {
                "check": "pending",
                "ok": False,
                "status": "failed",
                "message": "2 Pods Pending",
                "fix": "add nodes",
            },
        ],
    }


# --- the command without a usable cluster ------------------------------------------------


def doctor(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_castslice("doctor", *args, home=tmp_path, **env)


def test_an_unreachable_cluster_exits_2_with_a_message(tmp_path: Path) -> None:
    kubeconfig = unreachable_kubeconfig(tmp_path)
    run = doctor("--kubeconfig", str(kubeconfig), tmp_path=tmp_path)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == (
        "castslice doctor: cannot use the API server at https://127.0.0.1:1: connection refused\n"
    )
    run = doctor("--kubeconfig", str(kubeconfig), "--context", "prod", tmp_path=tmp_path)
    assert run.returncode == 2
    assert run.stderr.startswith(f"castslice doctor: cannot use kubeconfig {kubeconfig}: ")
    assert "prod" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "there is no such file"),
        ("clusters: [", "while parsing"),
        ("just text", "it is not a kubeconfig"),
    ],
)
def test_an_unusable_kubeconfig_exits_2_without_a_traceback(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    if content is not None:
        kubeconfig.write_text(content)
    run = doctor("--kubeconfig", str(kubeconfig), tmp_path=tmp_path)
    assert run.returncode == 2
    assert run.stderr.startswith(f"castslice doctor: cannot use kubeconfig {kubeconfig}: ")
    assert problem in run.stderr
    assert "Traceback" not in run.stderr


def test_a_kubeconfig_that_does_not_exist_is_named_as_missing(tmp_path: Path) -> None:
    """Not "Invalid kube-config file. No configuration found.": the file is not there."""
    missing = tmp_path / "nowhere" / "config"
    run = doctor(tmp_path=tmp_path, KUBECONFIG=str(missing))
    assert (run.returncode, run.stdout) == (2, "")
    assert (
        run.stderr == f"castslice doctor: cannot use kubeconfig {missing}: there is no such file\n"
    )
    # Neither KUBECONFIG nor ~/.kube/config (HOME is tmp_path): where to set one.
    run = doctor(tmp_path=tmp_path)
    assert run.stderr == (
        "castslice doctor: cannot use kubeconfig ~/.kube/config: there is no such file "
        "(set KUBECONFIG or pass --kubeconfig)\n"
    )
    # A list whose first file is missing reads the next, as kubectl does.
    present = unreachable_kubeconfig(tmp_path)
    run = doctor(tmp_path=tmp_path, KUBECONFIG=f"{missing}:{present}")
    assert "cannot use the API server at https://127.0.0.1:1" in run.stderr


def test_a_bad_setting_exits_2_naming_the_variable(tmp_path: Path) -> None:
    run = doctor(tmp_path=tmp_path, CASTSLICE_BACKEND="nvidia-mig")
    assert run.returncode == 2
    assert run.stderr.startswith("castslice: invalid configuration: CASTSLICE_BACKEND=")


def test_docs_operate_explains_every_status_a_line_can_start_with() -> None:
    """docs/operate.md's table of statuses holds each symbol doctor prints (with check marks
    and in ASCII), its JSON status, and whether it fails the command."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "operate.md").read_text()
    table = text.split("<!-- doctor-statuses:", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    rows = {}
    for line in table:
        starts, status, _means, fails = (cell.strip() for cell in line.strip("|").split("|"))
        rows[status.strip("`")] = (set(re.findall(r"`([^`]+)`", starts)), fails)
    assert set(rows) == {status.value for status in Status}
    for status in Status:
        symbols, fails = rows[status.value]
        assert symbols == {SYMBOLS[status], ASCII_SYMBOLS[status]}, status
        failing = not Result("check", status, "message").ok
        assert fails == ("yes" if failing else "no"), status


# --- the second scheduler -----------------------------------------------------------------

SCHEDULER = "castslice-scheduler"
NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)


def waiting_pod(name: str, age_seconds: int, **status: Any) -> Manifest:
    """A Pending Pod for the second scheduler, as the API server returns it."""
    created = NOW - datetime.timedelta(seconds=age_seconds)
    return {
        "metadata": {
            "name": name, "namespace": "team",
            "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "spec": {"schedulerName": SCHEDULER, "containers": [{"name": "c"}]},
        "status": {"phase": "Pending", **status},
    }  # fmt: skip


def test_pods_no_scheduler_ever_tried_name_the_missing_scheduler() -> None:
    pods = [waiting_pod(f"p{i}", 61 + i) for i in range(7)]

    result = scheduler_check.assess(SCHEDULER, pods, NOW)

    assert result.status is Status.FAILED
    assert result.message == (
        "7 Pods for the scheduler castslice-scheduler Pending over 60 s and never tried: "
        "no scheduler of that name is running: team/p0, team/p1, team/p2, team/p3, team/p4 "
        "and 2 more"
    )
    assert "extender.scheduler.enabled" in result.fix
    assert "unset CASTSLICE_SCHEDULER_NAME" in result.fix


def test_pods_the_scheduler_tried_or_bound_or_just_created_are_not_blamed_on_it() -> None:
    unschedulable = {
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    }
    bound = waiting_pod("bound", 600)
    bound["spec"]["nodeName"] = "gpu-1"
    pods = [
        waiting_pod("tried", 600, **unschedulable),
        bound,
        waiting_pod("new", 59),
    ]

    result = scheduler_check.assess(SCHEDULER, pods, NOW)

    assert result.status is Status.OK
    assert result.message == "no Pod waits untried for the scheduler castslice-scheduler"
    assert scheduler_check.assess(SCHEDULER, [waiting_pod("old", 60)], NOW).status is Status.FAILED
