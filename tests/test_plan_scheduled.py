"""`castslice plan`'s second count: the GPUs its recommendation needs once kube-scheduler with
the extender places the workload, against the extender's own view and hand counts."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from bench.packing.extender_cost import CAPACITY, bind_pool
from bench.packing.offline import place_all
from bench.packing.replay import Configuration, node_manifest, pod_manifest
from bench.packing.trace import NODES_CSV, TraceNode, TraceTask, read_tasks
from castslice.decision.admission import Admission
from castslice.environment import load_config
from castslice.extender.cluster_view import ClusterView
from castslice.extender.fragmentation import (
    MILLI,
    WHOLE,
    NodeFree,
    PodShape,
    Scorer,
    extender_score,
    typical_pods,
)
from castslice.extender.placing import (
    Arrival,
    NodeKind,
    PoolCount,
    StockScores,
    cluster,
    fewest,
    placements,
    pooled_cluster,
    scorer_for,
)
from castslice.extender.watching import Pools
from castslice.inspect.plan import (
    Nodes,
    WorkloadError,
    arrivals_of,
    nodes_from_list,
    plan,
    tasks_from_trace,
)
from tests.helpers import HEADER, TRACE, plan_in_process, run_plan

NODE_LIST = nodes_from_list(NODES_CSV.read_text())
TIMED = HEADER.rstrip("\n") + ",creation_time,deletion_time\n"


def plan_trace(tmp_path: Path, trace: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """plan on `trace`, its backend `dra` (shares the extender scores) unless `argv` names one."""
    path = tmp_path / "tasks.csv"
    path.write_text(trace)
    backend = () if "--backend" in argv else ("--backend", "dra")
    return run_plan("--trace", str(path), *backend, *argv)


def trace_head(tasks: int) -> str:
    """The trace's first tasks, without their times (the FGD paper's order, none leaving)."""
    lines = TRACE.read_text().splitlines()
    return "\n".join(",".join(line.split(",")[:6]) for line in lines[: tasks + 1]) + "\n"


def trace_nodes(count: int) -> list[TraceNode]:
    return [trace_node(node) for node in cluster(NODE_LIST, count)]


def trace_node(node: NodeKind) -> TraceNode:
    return TraceNode(node.name, node.cpu_milli, node.memory_mib, node.gpus, node.model)


def plan_head(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path, *argv: str
) -> tuple[Path, dict[str, Any]]:
    """The trace's first 300 tasks, and plan's JSON for them on the trace's node list."""
    workload = tmp_path / "head.csv"
    workload.write_text(trace_head(300))
    output = plan_in_process(monkeypatch, capsys, {}, "plan", "--trace", str(workload),
                             "--nodes", str(NODES_CSV), *argv, "-o", "json")  # fmt: skip
    return workload, json.loads(output)


def test_plan_s_settings_replayed_through_the_extender_place_all_on_its_count_not_one_fewer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    workload, result = plan_head(monkeypatch, capsys, tmp_path)
    scheduled = result["scheduled"]
    assert scheduled["configuration"] == result["recommended"]
    assert scheduled["departures"] is False
    # The recommendation applied: DRA shares of S per GPU, which the extender scores.
    config = load_config(result["recommendation"]["environment"])
    assert config.backend == "dra"
    count = scheduled["nodes"]
    assert sum(node.gpus for node in trace_nodes(count)) == scheduled["gpus"]
    # Beyond perfect packing: the trace's nodes strand GPUs behind CPU, memory and shares.
    assert scheduled["gpus"] > result["recommendation"]["gpus"]
    tasks = read_tasks(workload)
    # The extender's own view (ClusterView, as in the packing benchmark), shown the
    # workload up front as plan counts it, binds each task in turn.
    placed = place_all(trace_nodes(count), tasks, "extender", 42, config.slices_per_gpu,
                       up_front=True)  # fmt: skip
    assert "" not in placed.nodes
    fewer = place_all(trace_nodes(count - 1), tasks, "extender", 42, config.slices_per_gpu,
                      up_front=True)  # fmt: skip
    assert "" in fewer.nodes
    assert tasks[fewer.nodes.index("")].name == scheduled["pendingWithOneNodeFewer"]


def test_each_task_goes_where_the_extender_s_own_view_sends_it() -> None:
    text = trace_head(300)
    config = load_config({"CASTSLICE_BACKEND": "dra", "CASTSLICE_SLICES_PER_GPU": "10"})
    arrivals = arrivals_of(config, tasks_from_trace(text))
    nodes = cluster(NODE_LIST, 40)
    mine = placements(nodes, arrivals, scorer_for(nodes, arrivals))
    theirs = place_all(trace_nodes(40), [*map(_task, text.splitlines()[1:])], "extender", 42,
                       10, up_front=True)  # fmt: skip
    assert tuple(mine) == theirs.nodes
    assert "" in mine


def _task(line: str) -> TraceTask:
    name, cpu, memory, count, milli, spec = line.split(",")[:6]
    return TraceTask(name, int(cpu), int(memory), int(count), int(milli),
                     tuple(s for s in spec.split("|") if s))  # fmt: skip


def test_departures_free_what_a_task_held_and_both_counts_are_printed(tmp_path: Path) -> None:
    # Three whole GPUs, two at a time at most: `second` leaves when `third` comes.
    trace = TIMED + (
        "first,1000,1024,1,1000,,0,100\n"
        "second,1000,1024,1,1000,,10,50\n"
        "third,1000,1024,1,1000,,50,90\n"
    )
    done = plan_trace(tmp_path, trace, "--gpus-per-node", "1")
    assert done.returncode == 0, done.stderr
    assert (
        "Placed by kube-scheduler with the extender (today, in process, in the input's order, "
        "with its departures): 2 GPUs on 2 nodes of 1 GPUs with room for any task's CPU and "
        "memory; one node fewer leaves second Pending; 2 GPUs if every share packed "
        "perfectly at the busiest moment." in done.stdout
    )
    stayed = plan_trace(tmp_path, trace, "--gpus-per-node", "1", "--no-departures", "-o", "json")
    assert json.loads(stayed.stdout)["scheduled"] | {"nodeList": ""} == {
        "gpus": 3, "nodes": 3, "departures": False, "pendingWithOneNodeFewer": "third",
        "perfectPackingAtPeak": 3, "scoredBy": "extender", "configuration": "today", "nodeList": "",
    }  # fmt: skip


def test_a_node_s_cpu_keeps_shares_apart_that_its_gpus_would_hold(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nnode-a,4000,65536,2,T4\n")
    # Two halves of a GPU: one GPU if packed, but each takes 3 of the node's 4 CPUs.
    trace = HEADER + "a,3000,1024,1,500,\nb,3000,1024,1,500,\n"
    done = plan_trace(tmp_path, trace, "--nodes", str(nodes), "-o", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["recommendation"]["gpus"] == 1
    assert (result["scheduled"]["nodes"], result["scheduled"]["gpus"]) == (2, 4)


def test_the_cluster_of_n_nodes_keeps_the_list_s_mix_and_holds_the_cluster_of_fewer() -> None:
    small = [NodeKind(f"small-{index}", 8000, 32768, 2, "T4") for index in range(4)]
    large = [NodeKind(f"large-{index}", 96000, 393216, 8, "G2") for index in range(2)]
    names = [node.name for node in cluster([*small, *large], 8)]
    assert names == ["small-0", "large-0", "small-1", "small-2", "large-1", "small-3",
                     "small-0-1", "large-0-1"]  # fmt: skip
    assert all(
        cluster([*small, *large], count) == cluster([*small, *large], 8)[:count]
        for count in range(9)
    )


def test_a_model_pinned_task_goes_only_to_its_model_and_others_where_none_is_pinned() -> None:
    nodes = [
        NodeKind("a-v100", 64000, 262144, 1, "V100M16"),
        NodeKind("b-t4", 64000, 262144, 1, "T4"),
    ]
    trace = HEADER + "pinned,1000,1024,1,500,T4\nfree,1000,1024,1,500,\n"
    arrivals = arrivals_of(load_config({}), tasks_from_trace(trace))
    # The pinned share passes over the lowest name; the free one goes where no typical Pod
    # is pinned (the extender's model place), not beside it.
    assert placements(nodes, arrivals, scorer_for(nodes, arrivals)) == ["b-t4", "a-v100"]


def test_a_trace_s_node_asks_and_times_are_read() -> None:
    (task,) = tasks_from_trace(TIMED + "t,3000,2048,1,500,T4|P100,7,\n")
    assert (task.cpu_milli, task.memory_mib, task.models) == (3000, 2048, ("T4", "P100"))
    assert (task.arrives, task.leaves) == (7, None)


@pytest.mark.parametrize(
    ("argv", "stdin", "message"),
    [
        (["--gpus-per-node", "0"], HEADER + "a,1,1,1,500,\n", "'0': want a whole number of 1"),
        (["--nodes", "/nonexistent.csv"], HEADER + "a,1,1,1,500,\n", "cannot read --nodes"),
        (["--nodes", "NODES"], HEADER + "big,1,1,1,500,A100\n",
         "big: fits no empty node from the node list"),
        ([], TIMED + "a,1,1,1,500,,soon,9\n", "line 2: creation_time 'soon': want a whole"),
        ([], TIMED + "a,1,1,1,500,,,9\n", "line 2: no creation_time"),
    ],
)  # fmt: skip
def test_bad_nodes_or_times_exit_2_naming_what_was_wrong(
    argv: list[str], stdin: str, message: str, tmp_path: Path
) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn,64000,262144,2,T4\n")
    argv = [str(nodes) if arg == "NODES" else arg for arg in argv]
    done = plan_trace(tmp_path, stdin, *argv)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_a_node_list_without_its_columns_is_named() -> None:
    with pytest.raises(WorkloadError, match=r"nodes\.csv: no model column"):
        nodes_from_list("sn,cpu_milli,memory_mib,gpu\nn,1,1,1\n", "nodes.csv")


def test_plan_without_nodes_counts_no_scheduling() -> None:
    config = load_config({"CASTSLICE_BACKEND": "dra"})
    result = plan(config, tasks_from_trace(HEADER + "a,1,1,1,500,\n"))
    assert result.scheduled is None
    assert result.as_dict()["scheduled"] is None
    with_nodes = plan(
        config,
        tasks_from_trace(HEADER + "a,1,1,1,500,\n"),
        nodes=Nodes(cluster(NODE_LIST, 1), "x"),
    )
    assert with_nodes.scheduled is not None


def test_the_count_refuses_a_task_no_empty_node_fits_instead_of_searching_on() -> None:
    trace = HEADER + "small,1000,1024,1,500,\nbig,1000,1024,8,1000,\n"
    arrivals = arrivals_of(load_config({}), tasks_from_trace(trace))
    with pytest.raises(ValueError, match=r"^big fits no empty node"):
        fewest([NodeKind("n", 64000, 262144, 2, "T4")], arrivals)


def test_tasks_arrive_by_their_creation_time_not_their_row(tmp_path: Path) -> None:
    # Listed out of time order: `last` comes after the others have left; `overlapping`
    # arrives while `first` holds the one GPU of a node.
    trace = TIMED + (
        "last,1000,1024,1,1000,,300,400\n"
        "first,1000,1024,1,1000,,0,150\n"
        "overlapping,1000,1024,1,1000,,100,200\n"
    )
    done = plan_trace(tmp_path, trace, "--gpus-per-node", "1", "-o", "json")
    scheduled = json.loads(done.stdout)["scheduled"]
    assert (scheduled["gpus"], scheduled["pendingWithOneNodeFewer"]) == (2, "overlapping")


def test_the_count_weighs_the_tasks_cpu_against_the_nodes_cpu_per_gpu() -> None:
    """Tasks asking 14 CPUs per GPU on nodes of 8: shares tie by name, not to the fuller
    node, as the extender's view scores them once its nodes' CPU is the scarcer."""
    nodes = [NodeKind("a", 16000, 65536, 2), NodeKind("b", 16000, 65536, 2)]
    share = PodShape(1000, 500, 1)
    arrivals = [Arrival(PodShape(12000), "cpu"), Arrival(share, "one"), Arrival(share, "two")]
    scorer = scorer_for(nodes, arrivals)
    fuller, emptier = NodeFree(15000, (500, 1000)), NodeFree(16000, (1000, 1000))
    typical = typical_pods(arrival.shape for arrival in arrivals)
    for node in (fuller, emptier):
        assert scorer.scorer.score(node, share) == extender_score(
            node, share, typical, {}, None, 8.0
        )
    assert scorer.scorer.score(fuller, share) == scorer.scorer.score(emptier, share)
    assert Scorer(typical, {}).score(fuller, share) > Scorer(typical, {}).score(emptier, share)


def test_plan_s_pools_replayed_through_the_extender_s_pool_view_place_all_not_one_fewer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    workload, result = plan_head(monkeypatch, capsys, tmp_path, "--backend", "nvidia")
    scheduled = result["scheduled"]
    # Today's backend, named on the command line, with the settings plan recommends over it.
    environment = {"CASTSLICE_BACKEND": "nvidia"} | result["recommendation"]["environment"]
    configuration = Configuration("plan", environment)
    assert configuration.config.backend == "nvidia"
    counts = {part["pool"]: part["nodes"] for part in scheduled["pools"]}
    # Shares of two degrees and whole GPUs, each on nodes of their own.
    assert len(counts) == 3 and WHOLE in counts
    assert sum(counts.values()) == scheduled["nodes"]
    tasks = read_tasks(workload)
    assert _pool_replay(configuration, tasks, counts) is None
    for part in scheduled["pools"]:
        fewer = counts | {part["pool"]: counts[part["pool"]] - 1}
        pending = _pool_replay(configuration, tasks, fewer)
        assert pending is not None
        assert tasks[pending].name == part["pendingWithOneNodeFewer"]


def _pool_replay(
    configuration: Configuration, tasks: list[TraceTask], counts: dict[str, int]
) -> int | None:
    """The first task left Pending when the extender's own view of node pools (the
    device plugin's nodes, each in its pool, and the Pods as the webhook rewrites them,
    all shown up front as plan counts them) places each on its best-scored node in turn."""
    config = configuration.config
    nodes = pooled_cluster(NODE_LIST, counts)
    view = ClusterView(CAPACITY, config.slices_per_gpu, config.gpu_resource,
                       Pools(configuration.backend))  # fmt: skip
    view.replace("nodes", [
        node_manifest(configuration, trace_node(node),
                      None if node.pool == WHOLE else int(node.pool))
        for node in nodes
    ])  # fmt: skip
    admission = Admission(config)
    pods = []
    for index, task in enumerate(tasks):
        pod = pod_manifest(configuration, index, task)
        pod["metadata"] |= {"namespace": "trace", "uid": pod["metadata"]["name"]}
        review = {
            "uid": str(index),
            "operation": "CREATE",
            "namespace": "trace",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "object": pod,
        }
        answer = admission.review(review).response  # fmt: skip
        if "patch" in answer:
            pod = jsonpatch.apply_patch(pod, json.loads(answer["patch"]))
        pods.append(pod | {"status": {"phase": "Pending"}})
    view.replace("pods", pods)
    names = sorted(node.name for node in nodes)
    for index, pod in enumerate(pods):
        if bind_pool(view, pod, view.scores(pod, names)) is None:
            return index
    return None


def test_each_pool_s_tasks_go_only_to_its_own_nodes_and_each_pool_is_counted_apart() -> None:
    trace = HEADER + "quarter,1000,1024,1,250,\nhalf,1000,1024,1,500,\nwhole,1000,1024,1,1000,\n"
    config = load_config({"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_SHARING_DEGREES": "2,4"})
    arrivals = arrivals_of(config, tasks_from_trace(trace))
    assert [arrival.shape.pool for arrival in arrivals] == ["4", "2", WHOLE]
    node = [NodeKind("n", 64000, 262144, 1)]
    # Shares of a GPU would pack the quarter and the half on one node; pools keep them apart.
    placed = fewest(node, arrivals)
    assert placed.pools == (
        PoolCount("2", 1, 1, "half"), PoolCount("4", 1, 1, "quarter"),
        PoolCount(WHOLE, 1, 1, "whole"),
    )  # fmt: skip
    assert (placed.nodes, placed.gpus) == (3, 3)
    nodes = pooled_cluster(node, {"2": 1, "4": 1, WHOLE: 1})
    assert placements(nodes, arrivals, scorer_for(node, arrivals)) == ["4-n", "2-n", "whole-n"]
    untagged = [replace(arrival, shape=replace(arrival.shape, pool="")) for arrival in arrivals]
    assert (fewest(node, untagged).nodes, fewest(node, untagged).pools) == (2, ())


def test_mig_instances_are_counted_in_a_pool_per_profile_on_kube_scheduler_s_own_scores(
    tmp_path: Path,
) -> None:
    # On A100-80GB GPUs half a GPU is a 3g.40gb instance, two to a GPU; a whole GPU comes
    # from nodes without MIG. Five halves need three GPUs cut into 3g.40gb.
    trace = (
        HEADER
        + "".join(f"half{i},1000,1024,1,500,\n" for i in range(5))
        + ("whole,1000,1024,1,1000,\n")
    )
    argv = ("--backend", "mig", "--mig-gpu-models", "A100-80GB", "--gpus-per-node", "1")
    done = plan_trace(tmp_path, trace, *argv)
    assert done.returncode == 0, done.stderr
    assert (
        "Placed by kube-scheduler on its own scores (the extender scores no such GPUs) (today, "
        "in process, in the input's order, every task staying): 4 GPUs on 4 nodes of 1 GPUs "
        "with room for any task's CPU and memory; each instance pool's nodes with all their "
        "GPUs cut into its instances; pool '3g.40gb instances': 3 GPUs on 3 nodes (one fewer "
        "leaves half4 Pending); pool 'whole GPUs': 1 GPU on 1 node (one fewer leaves whole "
        "Pending)" in done.stdout
    )
    scheduled = json.loads(plan_trace(tmp_path, trace, *argv, "-o", "json").stdout)["scheduled"]
    assert scheduled["scoredBy"] == "kube-scheduler"
    assert [(pool["pool"], pool["nodes"]) for pool in scheduled["pools"]] == [
        ("3g.40gb", 3), ("whole", 1)
    ]  # fmt: skip


def test_a_backend_whose_pods_ask_units_of_a_node_is_not_counted_and_says_why(
    tmp_path: Path,
) -> None:
    trace = HEADER + "a,1000,1024,1,500,\nb,1000,1024,1,1000,\n"
    done = plan_trace(tmp_path, trace, "--backend", "resource", "--gpus-per-node", "1")
    assert done.returncode == 0, done.stderr
    assert (
        "Placed by kube-scheduler: not counted: resource's Pods ask for units of one resource "
        "per node, which the device plugin may spread over several GPUs" in done.stdout
    )
    result = json.loads(
        plan_trace(tmp_path, trace, "--backend", "resource", "--gpus-per-node", "1", "-o",
                   "json").stdout
    )  # fmt: skip
    assert result["scheduled"] is None
    assert result["notScheduled"].startswith("resource's Pods ask for units")


def test_stock_scores_are_least_allocated_plus_the_change_in_balance() -> None:
    """kube-scheduler v1.37.2's formulas worked by hand: a node of 16 CPUs and 64 GiB with
    8 CPUs and 16 GiB taken, a Pod of 4 CPUs and 16 GiB."""
    node = NodeKind("n", 16000, 65536, 0)
    free = NodeFree(8000, (), memory=65536 - 16384)
    pod = PodShape(4000, memory=16384)
    # LeastAllocated: CPU (16-12)/16 -> 25, memory (64-32)/64 -> 50; mean 37.
    # Balance: 0.75 and 0.5 after, 0.5 and 0.25 before: 100 - 12.5 -> 87 both; 50 + 50/2.
    assert StockScores().score(node, free, pod) == 37 + 75
    # A Pod that evens the node out scores more: 0.5 and 0.25 used before, 0.5 and 0.5
    # after: 87 to 100, 50 + (50 + 13) // 2; LeastAllocated 50 and 50.
    assert StockScores().score(node, free, PodShape(0, memory=16384)) == 50 + 81
    # A Pod that asks neither CPU nor memory gets no balance score.
    assert StockScores().score(node, free, PodShape(0)) == (50 + 75) // 2
    # MostAllocated: CPU 12/16 -> 75, memory 32/64 -> 50; mean 62, the same balance.
    assert StockScores(most_allocated=True).score(node, free, pod) == 62 + 75
    # Unlike the extender's, the stock scores send a share to the emptier node.
    empty = NodeFree(16000, (MILLI,), memory=65536)
    fuller = NodeFree(8000, (500,), memory=65536 - 16384)
    share = PodShape(1000, 500, 1, memory=1024)
    one = NodeKind("n", 16000, 65536, 1)
    assert StockScores().score(one, empty, share) > StockScores().score(one, fuller, share)
    nodes = [NodeKind("a", 16000, 65536, 1), NodeKind("b", 16000, 65536, 1)]
    arrivals = [Arrival(share, "first"), Arrival(share, "second")]
    assert placements(nodes, arrivals, StockScores()) == ["a", "b"]
    assert placements(nodes, arrivals, scorer_for(nodes, arrivals)) == ["a", "a"]


def test_plan_counts_kube_scheduler_s_most_allocated_strategy_and_advises_it_when_it_needs_fewer(
    tmp_path: Path,
) -> None:
    """A long-lived one-GPU task first, short ones, then two tasks of 60 CPUs and eight
    GPUs at once, which only the two G2 nodes fit, too seldom to be typical Pods and on
    half the nodes, so not rare either: the extender ties the empty nodes and takes the
    lowest name, a G2, and the second large task finds no G2 free; MostAllocated sends
    the first task to the small node it fills more of."""
    rows = ["long,8000,32768,1,1000,,0,1000"] + [
        f"s{i},8000,32768,1,{500 if i < 30 else 1000},,{10 + i},{11 + i}" for i in range(60)
    ]
    large = ["mid1,60000,131072,8,1000,,100,200", "mid2,60000,131072,8,1000,,100,200"]
    trace = TIMED + "\n".join([*rows, *large]) + "\n"
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\na-mid-0,64000,262144,8,G2\na-mid-1,64000,262144,8,G2\n"
        "b-small-0,16000,262144,8,T4\nb-small-1,16000,262144,8,T4\n"
    )
    done = plan_trace(tmp_path, trace, "--nodes", str(nodes), "-o", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["scheduled"]["scoredBy"], result["scheduled"]["nodes"]) == ("extender", 5)
    packed = result["scheduledMostAllocated"]
    assert (packed["scoredBy"], packed["nodes"], packed["gpus"]) == ("most-allocated", 3, 24)
    assert result["extender"] == {
        "worthDeploying": False,
        "why": "on the nodes given kube-scheduler's MostAllocated strategy "
        "(infra/scheduler/most-allocated.yaml) runs the workload on 24 GPUs, where the "
        "extender needs 40",
    }
    text = plan_trace(tmp_path, trace, "--nodes", str(nodes)).stdout
    assert (
        "Placed by kube-scheduler with NodeResourcesFit's MostAllocated strategy and no "
        "extender (infra/scheduler/most-allocated.yaml) (today, in process, in the input's "
        "order, with its departures): 24 GPUs on 3 nodes" in text
    )


@pytest.mark.parametrize("backend", ["dra", "nvidia"])
def test_plan_s_extender_count_keeps_the_one_large_node_for_the_task_only_it_fits(
    tmp_path: Path, backend: str
) -> None:
    """One G3 node of 128 CPUs among twenty G2 nodes of 96: a long-lived task of 90 CPUs
    and no GPU, a long-lived one-GPU task, short ones, then one of 120 CPUs and eight
    GPUs, which only the G3 fits. The G3 is rare (its whole fits it alone), and with
    Pods leaving the extender keeps it whole first: the first task goes to a G2, though
    FGD prefers the G3, whose CPU keeps room for the one-GPU Pods; the one-GPU task, tied,
    does not take the lowest name, the G3. With `nvidia`'s pools, the same in the
    whole-GPU pool."""
    rows = [
        "cpu-long,90000,32768,0,0,,0,1000",
        "long,8000,32768,1,1000,,1,1000",
        *(f"s{i},8000,32768,1,{500 if i < 8 else 1000},,{10 + i},{11 + i}" for i in range(30)),
        "big,120000,737280,8,1000,,100,200",
    ]
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\na-big,128000,786432,8,G3\n"
        + "".join(f"b-small-{index:02d},96000,393216,8,G2\n" for index in range(20))
    )
    trace = TIMED + "\n".join(rows) + "\n"
    done = plan_trace(tmp_path, trace, "--nodes", str(nodes), "--backend", backend, "-o", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    extender, packed = result["scheduled"], result["scheduledMostAllocated"]
    # The G3 is the eleventh node of the list's mix (`cluster`): 11 nodes. Taken, the
    # count grows until a second copy of the G3 joins, 32 nodes.
    pools = {part["pool"]: part["nodes"] for part in extender.get("pools") or []}
    assert (extender["scoredBy"], pools.get("whole", extender["nodes"])) == ("extender", 11)
    # With `nvidia`, the shares' pool has one node, whose whole is then rare too: the
    # extender keeps it from the long CPU-only task, which MostAllocated packs there,
    # leaving the shares no CPU, so one node more.
    shares = sum(pools.values()) - pools.get("whole", 0)
    assert (extender["nodes"], extender["gpus"]) == (11 + shares, 88 + 8 * shares)
    assert (packed["nodes"], packed["gpus"]) == (11 + 2 * shares, 88 + 16 * shares)
