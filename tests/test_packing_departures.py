"""The departures replay (bench/packing/departures.py) on small traces made by hand."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

import pytest

from bench.packing import report
from bench.packing.departures import (
    POLICIES,
    Stay,
    default_score,
    feasible_to_find,
    fewest_nodes,
    main,
    policy_for,
    read_stays,
    replay,
    spread,
    summary,
)
from bench.packing.departures_live import sample
from bench.packing.extender_cost import CAPACITY, node_manifest, slice_manifest
from bench.packing.trace import TraceNode, TraceTask, task_list
from castslice.extender.cluster_view import ClusterView
from castslice.extender.fragmentation import NodeFree

ONE_GPU = TraceNode("node-a", 8000, 16384, 1, "T4")


def _task(name: str, gpus: int = 1, milli: int = 1000, cpu: int = 1000) -> TraceTask:
    return TraceTask(name, cpu, 1024, gpus, milli if gpus else 0, ())


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_task_that_fits_nowhere_waits_until_a_departure_frees_room(policy: str) -> None:
    stays = [Stay(_task("a"), 0, 100), Stay(_task("b"), 10, 50)]
    run = replay(stays, policy_for(policy, [ONE_GPU], stays, 42), gpus=1)
    # b waits for a's GPU, runs its whole lifetime from then, and leaves.
    assert run.waits == [0, 90]
    assert run.curve == [(0, 1.0), (10, 1.0), (100, 1.0), (150, 0.0)]


@pytest.mark.parametrize("policy", list(POLICIES))
def test_waiting_tasks_are_placed_in_arrival_order_and_new_ones_are_not_held_behind_them(
    policy: str,
) -> None:
    stays = [
        Stay(_task("a"), 0, 100),
        Stay(_task("b"), 10, 30),
        Stay(_task("c", milli=500), 20, 10),
        # No GPU: it fits at once, though b and c wait.
        Stay(_task("d", gpus=0), 30, 5),
    ]
    run = replay(stays, policy_for(policy, [ONE_GPU], stays, 42), gpus=1)
    # a leaves at 100: b, first in line, takes the GPU and c waits on for b to leave at 130.
    assert run.waits == [0, 90, 110, 0]
    assert run.curve[-3:] == [(100, 1.0), (130, 0.5), (140, 0.0)]
    figures = summary(run, stays)
    assert (figures["waited"], figures["wait_median_s"]) == (2, 100)
    assert (figures["wait_p95_s"], figures["wait_max_s"]) == (110, 110)
    assert figures["never_placed"] == 0


def test_a_task_no_node_can_hold_is_never_placed() -> None:
    stays = [Stay(_task("a", gpus=2), 0, 10)]
    run = replay(stays, policy_for("fgd", [ONE_GPU], stays, 42), gpus=1)
    assert run.never_placed == 1
    assert run.max_wait == float("inf")


def test_the_default_profile_spreads_a_share_where_fgd_and_the_extender_pack_it() -> None:
    nodes = [
        TraceNode("node-a", 16000, 65536, 2, "G2"),
        TraceNode("node-b", 96000, 393216, 8, "G2"),
    ]
    stays = [
        Stay(_task("share", milli=500), 0, 1000),
        Stay(_task("eight", gpus=8, cpu=8000), 10, 100),
    ]
    waits = {
        policy: replay(stays, policy_for(policy, nodes, stays, 42), gpus=10).waits
        for policy in POLICIES
    }
    # LeastAllocated favours the node with more CPU and memory left: the share takes one of
    # the eight-GPU node's GPUs, and the eight-GPU task waits for it to leave.
    assert waits["default"] == [0, 990]
    # FGD's gradient (and the extender's ties towards the fuller node) keep it whole, and
    # MostAllocated sends the share to the node it fills more of.
    assert waits["fgd"] == [0, 0]
    assert waits["extender"] == [0, 0]
    assert waits["most-allocated"] == [0, 0]


def test_the_default_score_is_least_allocated_plus_balanced_allocation() -> None:
    node = TraceNode("node-a", 10000, 10240, 1, "T4")
    view = ClusterView(CAPACITY, 100)
    view.replace("nodes", [node_manifest(node)])
    view.replace("resourceslices", [slice_manifest(node, 100)])
    free = view.free("node-a")
    assert free is not None
    task = TraceTask("t", 5000, 2560, 0, 0, ())
    # LeastAllocated: CPU (5000 x 100) // 10000 = 50, memory 75, mean 62; balanced, the
    # change the task makes (kube-scheduler 1.37.2): CPU half used, memory a quarter, std
    # 0.125, int(87.5) = 87 with the task against 100 on the empty node: 50 + (50 - 13) // 2.
    assert default_score(node, free, task) == 62 + 68
    # MostAllocated: CPU 50, memory (2560 x 100) // 10240 = 25, mean 37; the same balance.
    assert default_score(node, free, task, most_allocated=True) == 37 + 68
    # A task that evens a node out scores more: half the node's CPU taken, a task of half
    # its memory takes the balance from 75 to 100, 50 + (50 + 25) // 2; LeastAllocated 50.
    taken = NodeFree(5000, free.gpu_milli, free.model, free.memory, free.pool)
    assert default_score(node, taken, TraceTask("t", 0, 5120, 0, 0, ())) == 50 + 87


def test_kube_scheduler_scores_a_share_of_a_large_cluster() -> None:
    assert feasible_to_find(99) == 99
    assert feasible_to_find(150) == 100
    # 50 - 1213 // 125 = 41 %.
    assert feasible_to_find(1213) == 1213 * 41 // 100


def test_every_first_k_of_the_spread_order_keeps_the_mix_of_node_shapes() -> None:
    small = [TraceNode(f"s{i}", 8000, 1024, 1, "T4") for i in range(4)]
    large = [TraceNode(f"l{i}", 96000, 4096, 8, "G2") for i in range(2)]
    ordered = spread([*small, *large])
    assert [node.name for node in ordered] == ["s0", "l0", "s1", "s2", "l1", "s3"]


def test_the_fewest_nodes_are_the_smallest_count_that_keeps_the_bound() -> None:
    nodes = [TraceNode(f"n{i}", 8000, 1024, 1, "T4") for i in range(20)]
    asked: list[int] = []

    def keeps(chosen: object) -> bool:
        assert isinstance(chosen, list)
        asked.append(len(chosen))
        return len(chosen) >= 11

    assert fewest_nodes(nodes, [], keeps) == 11
    assert 10 in asked
    assert fewest_nodes(nodes, [], lambda chosen: False) == 0


def test_the_trace_times_are_read_as_lifetimes_and_a_list_without_them_is_refused() -> None:
    stays = read_stays()
    assert len(stays) == 8152
    # openb-pod-0000: created at 0, deleted at 12537496; openb-pod-0001 at 427061 and 12902960.
    assert (stays[0].arrival, stays[0].lifetime) == (0, 12537496)
    assert (stays[1].arrival, stays[1].lifetime) == (427061, 12902960 - 427061)
    with pytest.raises(ValueError, match=r"openb_pod_list_multigpu20\.csv: no creation_time"):
        read_stays(task_list("multigpu20"))


def test_a_replay_stops_once_a_task_has_waited_past_the_bound() -> None:
    stays = [Stay(_task("a"), 0, 100), Stay(_task("b"), 10, 50)]
    stopped = replay(stays, policy_for("fgd", [ONE_GPU], stays, 42), gpus=1, bound=89)
    assert stopped.stopped == 100
    assert stopped.max_wait == float("inf")
    kept = replay(stays, policy_for("fgd", [ONE_GPU], stays, 42), gpus=1, bound=90)
    assert (kept.stopped, kept.max_wait) == (None, 90)


def test_the_table_gives_each_count_its_waits_and_the_wait_one_node_fewer() -> None:
    record = {
        "kind": "fewest", "policy": "default", "seed": 42, "bound_s": 86400, "nodes": 513,
        "gpus": 2628, "one_fewer_max_wait_s": 136617, "tasks": 8152, "waited": 3,
        "never_placed": 0, "wait_median_s": 1110, "wait_p95_s": 12291, "wait_max_s": 12291,
        "allocation_peak": 0.024958, "allocation_mean": 0.0138,
    }  # fmt: skip
    row = report.departures_table([record])[-1]
    assert row == (
        "| default profile | 42 | 513 | 2628 | 24.0 h | 3 of 8152 | 18 min | 3.4 h | 3.4 h "
        "| 2.50% | 1.38% | 37.9 h |"
    )
    # A bound not kept even on every node: the count is not one that keeps it.
    unkept = {**record, "kept": False, "bound_s": 0, "nodes": 1213, "gpus": 6212}
    row = report.departures_table([unkept])[-1]
    assert row.startswith("| default profile | 42 | more than 1213 | more than 6212 | 0 s |")


def test_the_plot_draws_the_demand_on_every_node_and_the_gpus_each_policy_needs() -> None:
    span = [0, 1000]
    curve = [[0, 0.5], [500, 1.0]]
    whole = {"kind": "whole", "policy": "fgd", "seed": 42, "nodes": 2, "gpus": 10,
             "span_s": span, "curve": curve}  # fmt: skip
    needs = [
        {"kind": "fewest", "policy": policy, "seed": 42, "bound_s": 600, "nodes": 1, "gpus": gpus}
        for policy, gpus in (("fgd", 8), ("default", 300))
    ]
    # A bound not kept even on every node has no count to draw.
    unkept = {**needs[0], "policy": "most-allocated", "kept": False, "gpus": 10}
    svg = ElementTree.fromstring(report.departures_plot([whole, *needs, unkept], 600))
    texts = [element.text for element in svg.iter() if element.tag.endswith("text")]
    assert "FGD needs 8 GPUs" in texts
    assert "default profile needs 300 GPUs" in texts
    assert not any("MostAllocated" in (text or "") for text in texts)
    (line,) = [element for element in svg.iter() if element.tag.endswith("polyline")]
    # Five and ten GPUs allocated: the second point higher up the plot.
    heights = [float(point.split(",")[1]) for point in line.get("points", "").split()]
    assert heights[1] < heights[0]


def test_the_live_sample_is_the_first_tasks_by_creation_time_ties_in_the_list_s_order() -> None:
    stays = [Stay(_task(f"t{i}"), arrival, 10) for i, arrival in enumerate([5, 1, 5, 0])]
    assert [stay.task.name for stay in sample(stays, 3)] == ["t3", "t1", "t0"]
    assert [stay.task.name for stay in sample(stays, 9)] == ["t3", "t1", "t0", "t2"]


def test_the_docs_show_each_recorded_live_sample_beside_the_process() -> None:
    path = report.REPO / "bench" / "packing" / "results" / "departures_live.jsonl"
    records = report.read(path)
    assert records
    text = report.DOC.read_text()
    for record in records:
        assert record["tasks"] == len(record["where"]) == len(record["waits"])
        waited = sum(1 for wait in record["waits"] if wait)
        assert waited == record["live"]["waited"]
        row = (
            f"| {record['commit']} | {waited} | {record['in_process']['waited']} "
            f"| {record['same_wait']} |"
        )
        assert row in text


def test_the_docs_show_the_recorded_departures() -> None:
    """docs/performance.md's departures tables and plot are what `python -m
    bench.packing.departures --report` writes from bench/packing/results/departures.jsonl."""
    records = report.read(report.DEPARTURES_RESULTS)
    doc = report.DOC.read_text()
    shown = doc.split(report.DEPARTURES_BEGIN, 1)[1].split(report.DEPARTURES_END, 1)[0]
    assert shown == f"\n{report.departures_section(records)}\n"
    whole = [record for record in records if "largest_gpus" not in record]
    plot = (report.IMAGES / report.DEPARTURES_PLOT).read_text()
    assert plot == report.departures_plot(whole, 600)


def test_a_replay_of_the_smaller_tasks_is_recorded_and_shown_apart(tmp_path: Path) -> None:
    path = tmp_path / "departures.jsonl"
    argv = ["--policies", "mig-first-fit", "--bounds", "0", "--fewest-only", "--record", str(path)]
    assert main([*argv, "--largest-gpus", "4"]) == 0
    (record,) = report.read(path)
    # The trace's tasks asking at most four GPUs, each at its own time.
    assert record["largest_gpus"] == 4
    assert record["tasks"] == sum(1 for stay in read_stays() if stay.task.num_gpu <= 4)
    assert record["tasks"] < 8152
    section = report.departures_section([record])
    # Its own table, after the whole list's (empty here) and the plot.
    head, tail = section.split("Only the tasks asking 4 GPUs or fewer:")
    assert "MIG first fit" not in head
    assert f"| MIG first fit | 42 | {record['nodes']} | {record['gpus']} | 0 s |" in tail
