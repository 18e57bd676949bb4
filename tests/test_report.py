"""`castslice report`'s arithmetic on Pods the real decision rewrote, per backend.

Each Pod is made as a user writes it and rewritten by CastSlice's own Admission (the patch
applied as the API server would); the scheduler's part (the node, a claim's allocation) is
written as the scheduler writes it. The end-to-end suite checks the same against a real
scheduler (tests/e2e/test_report.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import jsonpatch
import prometheus_client
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from castslice.backends.tools import tools_for
from castslice.contract import Manifest
from castslice.contract.review import decode_review
from castslice.decision.admission import Admission
from castslice.environment import load_config
from castslice.inspect.report import (
    NOT_SCHEDULED_YET,
    Report,
    asked_gpus,
    build_report,
    decision_record,
    gpu_memory_of,
    to_document,
)
from castslice.inspect.report.exporter import SavingCollector, metric_names
from castslice.inspect.report.table import NOT_VISIBLE, WIDTH, render
from tests.factories import (
    ROOT,
    container,
    gpu_container,
    make_pod,
    make_review,
    run_castslice,
    unreachable_kubeconfig,
)
from tests.procs import free_port, wait_until

GPU = "nvidia.com/gpu"


def rewritten(env: dict[str, str], pod: Manifest) -> Manifest:
    request = decode_review(json.dumps(make_review(pod)).encode())
    outcome = Admission(load_config(env)).review(request)
    # The envelope base64-encodes the patch on the wire; here it is still the JSON text.
    patch = json.loads(outcome.response.get("patch") or b"[]")
    stored = jsonpatch.JsonPatch(patch).apply(pod)
    stored["metadata"]["namespace"] = pod["metadata"]["namespace"]
    return stored


def user_pod(
    namespace: str, name: str, workload_type: str | None, gpus: str = "1", **extra: Any
) -> Manifest:
    annotations = (
        {"castops.io/optimize": "true", "castops.io/workload-type": workload_type}
        if workload_type
        else None
    )
    pod = make_pod(annotations, [gpu_container("app", gpus)], name=name, **extra)
    pod["metadata"]["namespace"] = namespace
    return pod


def on_node(pod: Manifest, node: str | None, **status: Any) -> Manifest:
    if node:
        pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running" if node else "Pending", **status}
    return pod


def node(name: str, labels: dict[str, str], allocatable: dict[str, str]) -> Manifest:
    return {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": allocatable}}


def report_for(env: dict[str, str], pods: list[Manifest], nodes: list[Manifest]) -> Report:
    backend = tools_for(load_config(env))
    bound = [pod for pod in pods if pod["spec"].get("nodeName")]
    view = backend.gpu_view(None, nodes)  # type: ignore[arg-type]
    return build_report(pods, bound, view, lambda pod: None, GPU, gpu_memory_of(nodes))


RESOURCE = {"CASTSLICE_BACKEND": "resource"}
SHARED = "nvidia.com/gpu-shared"
SHARED_NVIDIA = "nvidia.com/gpu.shared"


def test_four_dev_pods_of_two_namespaces_on_one_gpu_save_three_and_the_plain_pod_is_named() -> None:
    pods = [
        on_node(rewritten(RESOURCE, user_pod(ns, f"dev-{i}", "dev")), "shared")
        for i, ns in enumerate(["a", "a", "b", "b"])
    ]
    pods.append(on_node(user_pod("b", "plain", None), "shared-plain"))
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu-shared.",
    }
    pods.append(on_node(rewritten(RESOURCE, user_pod("a", "dev-9", "dev")), None))
    pods[-1]["status"]["conditions"] = [unschedulable]
    nodes = [
        node("shared", {}, {SHARED: "4"}),
        node("shared-plain", {}, {GPU: "1"}),
    ]

    report = report_for(RESOURCE, pods, nodes)

    [gpu] = report.gpus
    assert (gpu.place.node, gpu.place.device, gpu.place.gpus, gpu.free) == ("shared", None, 1, 0)
    assert [(h.namespace, h.pod, str(h.share)) for h in gpu.holders] == [
        ("a", "dev-0", "1/4"),
        ("a", "dev-1", "1/4"),
        ("b", "dev-2", "1/4"),
        ("b", "dev-3", "1/4"),
    ]
    total = report.total
    assert (total.asked, total.occupied, total.saved, total.pending) == (4, 1, 3, 1)
    # One GPU shared by both namespaces is occupied by each: the namespaces do not add up.
    assert {ns: (s.asked, s.occupied, s.saved) for ns, s in report.namespaces.items()} == {
        "a": (2, 1, 1),
        "b": (2, 1, 1),
    }
    [waiting] = report.pending
    assert (waiting.pod, waiting.reason) == ("dev-9", unschedulable["message"])
    assert NOT_VISIBLE in render(report, "header")


def test_a_plain_pod_sharing_a_node_with_rewritten_ones_is_listed_as_not_opted_in() -> None:
    pods = [on_node(rewritten(RESOURCE, user_pod("a", "dev", "dev")), "n")]
    plain = user_pod("b", "plain", None)
    plain["spec"]["containers"][0]["resources"] = {"limits": {SHARED: "2"}}
    pods.append(on_node(plain, "n"))

    report = report_for(RESOURCE, pods, [node("n", {}, {SHARED: "4"})])

    [gpu] = report.gpus
    assert [(h.pod, h.slices, h.counted) for h in gpu.holders] == [
        ("dev", 1, True),
        ("plain", None, False),
    ]
    assert gpu.free == 1
    assert "b/plain (did not opt in)" in render(report, "header")


def test_where_the_gpu_is_not_visible_a_node_of_two_gpus_is_counted_as_both_occupied() -> None:
    pods = [on_node(rewritten(RESOURCE, user_pod("a", f"dev-{i}", "dev")), "n") for i in range(2)]

    report = report_for(RESOURCE, pods, [node("n", {}, {SHARED: "8"})])

    # The device plugin may have put the two quarters on two GPUs: no saving is claimed.
    assert (report.total.asked, report.total.occupied, report.total.saved) == (2, 2, 0)
    [gpu] = report.gpus
    assert (gpu.place.gpus, gpu.free) == (2, 6)


NVIDIA = {"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_SHARING_DEGREES": "2,4"}


def test_nvidia_shares_are_one_replica_of_the_degree_gpu_feature_discovery_labels() -> None:
    pods = [
        on_node(rewritten(NVIDIA, user_pod("a", "vllm", "inference")), "half"),
        on_node(rewritten(NVIDIA, user_pod("a", "trainer", "training")), "whole"),
    ]
    nodes = [
        node("half", {"nvidia.com/gpu.replicas": "2"}, {"nvidia.com/gpu.shared": "2"}),
        node("whole", {"nvidia.com/gpu.replicas": "1"}, {GPU: "1"}),
    ]

    report = report_for(NVIDIA, pods, nodes)

    assert [(g.place.node, [str(h.share) for h in g.holders], g.free) for g in report.gpus] == [
        ("half", ["1/2"], 1),
        ("whole", ["1"], 0),
    ]
    # Each asked one GPU and holds one: sharing saved nothing yet.
    assert (report.total.asked, report.total.occupied, report.total.saved) == (2, 2, 0)


GKE = {"CASTSLICE_BACKEND": "gke", "CASTSLICE_SHARING_DEGREES": "2,4"}


def test_gke_counts_clients_per_gpu_from_the_node_pool_label() -> None:
    pods = [on_node(rewritten(GKE, user_pod("a", f"nb-{i}", "dev")), "n") for i in range(3)]
    labels = {
        "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
        "cloud.google.com/gke-max-shared-clients-per-gpu": "4",
    }

    report = report_for(GKE, pods, [node("n", labels, {GPU: "4"})])

    [gpu] = report.gpus
    assert ([str(h.share) for h in gpu.holders], gpu.free, gpu.place.gpus) == (["1/4"] * 3, 1, 1)
    assert (report.total.asked, report.total.occupied, report.total.saved) == (3, 1, 2)


DRA = {"CASTSLICE_BACKEND": "dra"}


def claim(namespace: str, name: str, results: list[Manifest]) -> Manifest:
    return {
        "metadata": {"namespace": namespace, "name": name},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def result(device: str, shares: str | None, share_id: str) -> Manifest:
    found: Manifest = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n", "device": device}
    if shares is not None:
        found |= {"shareID": share_id, "consumedCapacity": {"shares": shares}}
    return found


class FakeCluster:
    """The two lists the dra view reads, as the API server would page them."""

    def __init__(self, claims: list[Manifest], slices: list[Manifest]) -> None:
        self.lists = {"resourceclaims": claims, "resourceslices": slices}

    def list(self, path: str, query: Any = ()) -> list[Manifest]:
        return self.lists[path.rsplit("/", 1)[-1]]


def test_dra_names_the_device_and_share_of_each_claim_and_counts_each_device_once() -> None:
    pods = []
    claims = []
    for index, (pod_name, workload_type, device, shares) in enumerate(
        [("dev", "dev", "gpu-0", "1"), ("vllm", "inference", "gpu-0", "2"),
         ("trainer", "training", "gpu-1", None)]
    ):  # fmt: skip
        pod = on_node(rewritten(DRA, user_pod("a", pod_name, workload_type)), "n")
        pod["status"]["resourceClaimStatuses"] = [
            {"name": "castslice-gpu-0", "resourceClaimName": f"{pod_name}-claim"}
        ]
        claims.append(claim("a", f"{pod_name}-claim", [result(device, shares, f"id-{index}")]))
        pods.append(pod)
    device = {"capacity": {"shares": {"value": "4"}}, "allowMultipleAllocations": True}
    slices = [
        {
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": "n",
                "pool": {"name": "n"},
                "devices": [{"name": "gpu-0", **device}, {"name": "gpu-1", **device}],
            }
        }
    ]
    backend = tools_for(load_config(DRA))

    report = build_report(
        pods, pods, backend.gpu_view(FakeCluster(claims, slices), []), lambda pod: None, GPU
    )  # type: ignore[arg-type]

    assert [
        (g.place.device, [(h.pod, str(h.share), h.share_id) for h in g.holders], g.free)
        for g in report.gpus
    ] == [
        ("gpu-0", [("dev", "1/4", "id-0"), ("vllm", "1/2", "id-1")], 1),
        ("gpu-1", [("trainer", "1", None)], 0),
    ]
    assert (report.total.asked, report.total.occupied, report.total.saved) == (3, 2, 1)
    document = to_document(report, {})
    assert [gpu["gpuVisible"] for gpu in document["gpus"]] == [True, True]


def test_asked_gpus_count_the_larger_of_the_init_container_and_the_app_containers() -> None:
    def asked(init: str, apps: list[str]) -> int:
        pod = user_pod("a", "p", "dev")
        pod["spec"]["initContainers"] = [gpu_container("fetch", init)]
        pod["spec"]["containers"] = [gpu_container(f"app-{i}", n) for i, n in enumerate(apps)]
        pod["spec"]["containers"].append(container("cpu-only"))
        stored = rewritten(RESOURCE, pod)
        record = decision_record(stored)
        assert record is not None
        return asked_gpus(stored, record, GPU)

    # The scheduler counts max(init, sum(app)): so did the Pod before it was rewritten.
    assert asked("3", ["1", "1"]) == 3
    assert asked("1", ["2", "1"]) == 3


def test_a_pod_not_yet_seen_by_the_scheduler_is_pending_without_a_message() -> None:
    pods = [on_node(rewritten(RESOURCE, user_pod("a", "new", "dev")), None)]

    report = report_for(RESOURCE, pods, [])

    assert [(p.pod, p.reason, p.asked) for p in report.pending] == [("new", NOT_SCHEDULED_YET, 1)]
    assert (report.total.asked, report.total.pending) == (0, 1)


def test_the_table_fits_100_columns_whatever_the_names() -> None:
    long = "x" * 63
    pods = [
        on_node(rewritten(RESOURCE, user_pod(long, f"{long}-{i}", "dev")), "n" * 63)
        for i in range(3)
    ]
    waiting = on_node(rewritten(RESOURCE, user_pod(long, long, "dev")), None)
    waiting["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/9 nodes are available: " + "9 Insufficient nvidia.com/gpu-shared. " * 9,
        }
    ]
    report = report_for(RESOURCE, [*pods, waiting], [node("n" * 63, {}, {SHARED: "4"})])

    text = render(report, "castslice report: https://" + "h" * 120)

    assert max(len(line) for line in text.splitlines()) <= WIDTH
    # Wrapped, not cut: the GPU's free shares and the scheduler's whole message are there.
    words = " ".join(text.split())
    assert "1 GPU, 1/4 nvidia.com/gpu-shared free" in words
    assert waiting["status"]["conditions"][0]["message"].strip() in words


def test_the_exporter_serves_the_report_s_totals_per_namespace_and_for_the_cluster() -> None:
    pods = [
        on_node(rewritten(RESOURCE, user_pod(ns, f"dev-{i}", "dev")), "n")
        for i, ns in enumerate(["a", "a", "b"])
    ]
    report = report_for(RESOURCE, pods, [node("n", {}, {SHARED: "4"})])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SavingCollector(lambda: report))

    text = prometheus_client.generate_latest(registry).decode()

    samples = {
        (sample.name, sample.labels.get("namespace")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert samples == {
        ("castslice_report_up", None): 1,
        ("castslice_gpus_asked", "a"): 2,
        ("castslice_gpus_asked", "b"): 1,
        ("castslice_gpus_occupied", "a"): 1,
        ("castslice_gpus_occupied", "b"): 1,
        ("castslice_gpus_saved", "a"): 1,
        ("castslice_gpus_saved", "b"): 0,
        ("castslice_pods_pending", "a"): 0,
        ("castslice_pods_pending", "b"): 0,
        ("castslice_cluster_gpus_asked", None): 3,
        ("castslice_cluster_gpus_occupied", None): 1,
        ("castslice_cluster_gpus_saved", None): 2,
        ("castslice_cluster_pods_pending", None): 0,
    }
    assert sorted({name for name, _ in samples}) == sorted(metric_names())


# --- the command without a usable cluster ------------------------------------------------


def castslice_report(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return run_castslice("report", *args, home=tmp_path)


def test_an_unreachable_cluster_exits_2_with_a_message(tmp_path: Path) -> None:
    run = castslice_report("--kubeconfig", str(unreachable_kubeconfig(tmp_path)), tmp_path=tmp_path)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == (
        "castslice report: cannot use the API server at https://127.0.0.1:1: connection refused\n"
    )


def test_a_port_out_of_range_exits_2_naming_the_flag(tmp_path: Path) -> None:
    run = castslice_report("--serve", "70000", tmp_path=tmp_path)
    assert run.returncode == 2
    assert run.stderr == "castslice report: --serve must be a port from 1 to 65535, not 70000\n"


def test_the_exporter_says_it_cannot_read_the_cluster_and_serves_up_0(tmp_path: Path) -> None:
    port = free_port()
    kubeconfig = unreachable_kubeconfig(tmp_path)
    exporter = subprocess.Popen(
        [sys.executable, "-m", "castslice", "report", "--kubeconfig", str(kubeconfig),
         "--serve", str(port)],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip

    def scrape() -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
                return answer.read().decode()
        except OSError:
            return None

    try:
        text = wait_until(scrape, timeout=30, what="the exporter to answer", interval=0.2)
    finally:
        exporter.terminate()
        stdout, stderr = exporter.communicate(timeout=30)

    # It says where it serves as soon as it is bound, before any scrape.
    assert stdout.splitlines()[0] == (
        f"castslice report: serving the saving as Prometheus metrics on "
        f"http://127.0.0.1:{port}/metrics, read from the cluster on each scrape"
    )

    samples = [
        (sample.name, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]
    assert samples == [("castslice_report_up", 0)]
    assert "castslice report: cannot read the cluster: https://127.0.0.1:1: connection refused" in (
        stderr
    )
    assert "Traceback" not in stderr


def test_mig_instances_are_named_with_their_real_compute_and_memory() -> None:
    from tests.mig_nodes import gpu_node_side

    env = {
        "CASTSLICE_BACKEND": "mig",
        "CASTSLICE_SLICES_PER_GPU": "8",
        "CASTSLICE_PRESETS": "dev=1,inference=4",
    }
    pods = [
        on_node(rewritten(env, user_pod("ml", "small", "dev")), "a100"),
        on_node(rewritten(env, user_pod("ml", "half", "inference")), "a100"),
    ]
    nodes = [node("a100", *gpu_node_side("mixed", "A100-80GB", "all-balanced"))]

    report = report_for(env, pods, nodes)

    [gpu] = report.gpus
    assert (gpu.place.gpus, gpu.place.units, gpu.free) == (1, 8, 3)
    assert gpu.place.unit == (
        "memory slices of MIG instances (2 × 1g.10gb: 9.62 GiB, 14 of 98 SMs; "
        "1 × 2g.20gb: 19.5 GiB, 28 of 98 SMs; "
        "1 × 3g.40gb: 39.25 GiB, 42 of 98 SMs)"
    )
    assert {h.pod: str(h.share) for h in gpu.holders} == {"small": "1/8", "half": "1/2"}
    # Two Pods that asked a GPU each, on one GPU cut into instances.
    assert (report.total.asked, report.total.occupied, report.total.saved) == (2, 1, 1)


def test_a_time_shared_gke_partition_is_counted_once_per_client() -> None:
    env = {
        "CASTSLICE_BACKEND": "mig",
        "CASTSLICE_MIG_STACK": "gke",
        "CASTSLICE_SLICES_PER_GPU": "16",
        "CASTSLICE_MIG_TIME_SHARED_CLIENTS": "2",
        "CASTSLICE_PRESETS": "dev=1",
    }
    pods = [on_node(rewritten(env, user_pod("ml", f"tiny-{n}", "dev")), "ts") for n in range(3)]
    # One A100-80GB in seven 1g.10gb partitions, each time-shared by 2 clients: GKE
    # advertises 14 nvidia.com/gpu.
    labels = {
        "cloud.google.com/gke-gpu-partition-size": "1g.10gb",
        "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
        "cloud.google.com/gke-max-shared-clients-per-gpu": "2",
        "nvidia.com/gpu.count": "1",
    }
    report = report_for(env, pods, [node("ts", labels, {GPU: "14"})])

    [gpu] = report.gpus
    # 8 memory slices, each counted as 2 client halves; 7 partitions use 7 of them.
    assert (gpu.place.gpus, gpu.place.units) == (1, 16)
    assert gpu.place.unit.startswith("1/2 memory slices of MIG instances (7 × 1g.10gb: ")
    assert {h.pod: str(h.share) for h in gpu.holders} == {f"tiny-{n}": "1/16" for n in range(3)}
    assert gpu.free == 16 - 3
    assert (report.total.asked, report.total.occupied, report.total.saved) == (3, 1, 2)


def test_each_pod_with_gpu_memory_limits_is_told_them_under_its_row() -> None:
    env = {**NVIDIA, "CASTSLICE_GPU_MEMORY": "143771Mi"}
    pods = [
        on_node(rewritten(env, user_pod("a", "vllm", "inference")), "half"),
        on_node(rewritten(env, user_pod("a", "trainer", "training")), "whole"),
    ]
    nodes = [
        node("half", {"nvidia.com/gpu.replicas": "2"}, {"nvidia.com/gpu.shared": "2"}),
        node("whole", {"nvidia.com/gpu.replicas": "1"}, {GPU: "1"}),
    ]

    table = render(report_for(env, pods, nodes), "header").splitlines()

    vllm = next(index for index, line in enumerate(table) if line.startswith("  a/vllm"))
    assert table[vllm + 1] == (
        "    memory limited to 71885 MiB by the driver (71885 MiB guaranteed)"
    )
    # A whole GPU is the Pod's alone: no limit, nothing said.
    trainer = next(index for index, line in enumerate(table) if line.startswith("  a/trainer"))
    assert table[trainer + 1 : trainer + 2] in ([], [""])


def test_each_gpu_sums_the_memory_its_pods_request_flags_a_sum_above_it_and_says_who_bursts() -> (
    None
):
    env = {**NVIDIA, "CASTSLICE_GPU_MEMORY": "143771Mi"}
    bursting = user_pod("a", "burst", "inference")
    bursting["metadata"]["annotations"]["castops.io/gpu-memory-burst"] = "4"
    # Not opted in: its own values, far above the GPU, are what the driver would be asked
    # (the kubelet keeps a name's last entry).
    own = [
        {"name": "NVIDIA_GPU_MEMORY_REQUEST", "value": "1"},
        {"name": "NVIDIA_GPU_MEMORY_REQUEST", "value": "999999"},
        {"name": "NVIDIA_GPU_MEMORY_LIMIT", "value": "999999"},
    ]
    shared = {SHARED_NVIDIA: "1"}
    by_hand = make_pod(None, [container("app", shared, shared, env=own)], name="by-hand")
    by_hand["metadata"]["namespace"] = "b"
    pods = [
        on_node(rewritten(env, user_pod("a", "vllm", "inference")), "h200"),
        on_node(rewritten(env, bursting), "h200"),
        on_node(rewritten(env, user_pod("a", "vllm-2", "inference")), "h200-hand"),
        on_node(by_hand, "h200-hand"),
    ]
    h200 = {"nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.memory": "143771"}
    nodes = [
        node("h200", h200, {SHARED_NVIDIA: "2"}),
        node("h200-hand", h200, {SHARED_NVIDIA: "2"}),
    ]

    report = report_for(env, pods, nodes)
    table = render(report, "header").splitlines()

    shared = table.index(f"node h200: {NOT_VISIBLE}, 1 GPU, 0/2 {SHARED_NVIDIA} free")
    assert table[shared + 1] == (
        "  GPU memory: 143770 of 143771 MiB requested; 1 Pod may burst, limits 215656 MiB in all"
    )
    hand = table.index(f"node h200-hand: {NOT_VISIBLE}, 1 GPU, 0/2 {SHARED_NVIDIA} free")
    assert table[hand + 1 : hand + 3] == [
        "  GPU memory OVER: 1071884 MiB requested, above the 143771 MiB its GPU has (values set by "
        "hand, or",
        "    CASTSLICE_GPU_MEMORY above this node's GPUs)",
    ]
    gpus = to_document(report, {})["gpus"]
    assert [(g["node"], g["memoryRequestedMiB"], g["memoryOverRequested"]) for g in gpus] == [
        ("h200", 143770, False),
        ("h200-hand", 1071884, True),
    ]
