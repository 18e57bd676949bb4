"""The packing benchmark's upper bound and its account of the GPUs left free."""

from __future__ import annotations

import pytest

from bench.packing import report
from bench.packing.gap import bound, left_free, most_placed
from bench.packing.offline import Placed
from bench.packing.trace import LISTS, TraceNode, TraceTask
from castslice.extender.fragmentation import NodeFree


def _task(name: str, cpu: int, gpus: int, milli: int, models: tuple[str, ...] = ()) -> TraceTask:
    return TraceTask(name, cpu, 1024, gpus, milli, models)


def test_the_bound_is_the_gpus_the_node_s_cpu_lets_tasks_take() -> None:
    # Two GPUs, 4 CPUs: tasks of one GPU and 3 CPUs each; only 4/3 of them fit the CPU.
    nodes = [TraceNode("a", 4000, 65536, 2, "T4")]
    tasks = [_task(f"t{i}", 3000, 1, 1000) for i in range(3)]
    assert most_placed(nodes, tasks) == pytest.approx(2 / 3)
    # With CPU to spare, both GPUs.
    assert most_placed([TraceNode("a", 9000, 65536, 2, "T4")], tasks) == pytest.approx(1.0)


def test_the_bound_keeps_pinned_tasks_on_their_model_and_tasks_on_nodes_they_fit() -> None:
    nodes = [TraceNode("a", 8000, 65536, 1, "T4"), TraceNode("b", 8000, 65536, 1, "V100M32")]
    pinned = [_task(f"p{i}", 1000, 1, 1000, ("V100M32",)) for i in range(3)]
    assert most_placed(nodes, pinned) == pytest.approx(0.5)
    # Two GPUs asked at once fit no node of one GPU, however many there are.
    assert most_placed(nodes * 4, [_task("two", 1000, 2, 1000)]) == 0.0
    # Shares pack without gaps: three thirds of a GPU fill one, CPU-only tasks count nothing.
    thirds = [_task(f"s{i}", 1000, 1, 333) for i in range(3)] + [_task("cpu", 1000, 0, 0)]
    assert most_placed(nodes[:1], thirds) == pytest.approx(0.999)


def test_the_bound_at_100_percent_counts_the_tasks_until_the_demand_reaches_the_gpus() -> None:
    nodes = [TraceNode("a", 3000, 65536, 2, "T4")]
    # Two GPUs arrive with the first two tasks, whose CPU lets 1.5 of them run; the third
    # arrives past 100 % and, asking less CPU, lets both GPUs be taken.
    tasks = [_task("a", 2000, 1, 1000), _task("b", 2000, 1, 1000), _task("c", 1000, 1, 1000)]
    found = bound(nodes, tasks, seed=1)
    assert (found.at_100, found.at_130) == (pytest.approx(0.75), pytest.approx(1.0))
    # Demand that never reaches the GPUs: every task counts at 100 % as at the end.
    assert bound(nodes, tasks[2:], seed=1).at_100 == pytest.approx(0.5)


def test_gpus_left_free_are_put_down_to_the_first_reason_no_pending_task_takes_them() -> None:
    left = (
        # 0.5 GPU free on a P100 node: the pending tasks want V100M32 or 2 whole GPUs.
        ("p100", NodeFree(8000, (500, 0), "P100", 64 << 30)),
        # A whole GPU free, but 1 CPU: every pending task wants 2.
        ("cpu", NodeFree(1000, (1000, 0), "V100M32", 64 << 30)),
        # A whole GPU and CPU free, 512 MiB of memory: every pending task wants 1024 MiB.
        ("memory", NodeFree(8000, (0, 1000), "V100M32", 512 << 20)),
        # CPU and memory free, 0.3 + 0.3 GPU: the 0.6 share and the two GPUs fit no GPU.
        ("gpus", NodeFree(8000, (300, 300), "V100M32", 64 << 30)),
        ("full", NodeFree(0, (0, 0), "V100M32", 0)),
    )
    tasks = [
        _task("placed", 1000, 1, 1000),
        _task("share", 2000, 1, 600, ("V100M32",)),
        _task("two", 2000, 2, 1000, ("V100M32",)),
    ]
    placed = Placed(1, "extender", 0.0, 0.0, ("full", "", ""), left)
    free = left_free(tasks, placed)
    assert free == pytest.approx({"model": 0.05, "cpu": 0.1, "memory": 0.1, "gpus": 0.06})


def test_the_docs_show_the_recorded_bounds_and_every_free_gpu_is_accounted_for() -> None:
    records = report.read(report.GAP_RESULTS)
    assert {record["list"] for record in records} == set(LISTS)
    for record in records:
        assert record["extender_100"] <= record["bound_100"] <= 100
        assert record["extender_130"] <= record["bound_130"] <= 100
        free = sum(record["left_free"].values())
        assert free + record["extender_130"] == pytest.approx(100, abs=0.01)
    assert "\n".join(report.gap_table(records)) in report.DOC.read_text()


def test_the_bound_s_table_sets_beside_it_what_the_fourteen_list_table_gives() -> None:
    """Its nodes named as the fourteen-list table's (the simulator's names), the extender in
    the bound's table placed what that table records on the same list and seed."""
    runs = report.list_runs(report.read(report.LISTS_RESULTS), reading="crossing")
    latest = {(r["list"], r["seed"]): r for r in report.read(report.GAP_RESULTS)}
    for (name, seed), record in latest.items():
        assert record.get("names") == "artefact", name
        placed = (record["extender_100"] / 100, record["extender_130"] / 100)
        assert placed == pytest.approx(runs[name][seed], abs=1e-6), name
