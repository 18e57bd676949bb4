"""The openb trace on MIG GPUs (bench/packing/mig.py): what each task asks, that every GPU
ends in a layout NVML allows (tests/helpers.nvml_allows, from go-nvml's placements), and
that the figures count what was placed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from bench.packing import mig
from bench.packing.departures import Stay, replay
from bench.packing.trace import TraceNode, TraceTask, read_nodes, read_tasks, sample_nodes, workload
from castslice.backends.mig.layouts import GpuState
from castslice.backends.mig.profiles import MODELS
from castslice.settings.config import Config
from tests.helpers import nvml_allows

A100 = MODELS["A100-80GB"]
H200 = MODELS["H200"]
RESULTS = Path(mig.__file__).parent / "results" / "mig.jsonl"


def _task(name: str, gpu_milli: int, num_gpu: int = 1, cpu_milli: int = 1000) -> TraceTask:
    return TraceTask(name, cpu_milli, 1024, num_gpu if gpu_milli else 0, gpu_milli, ())


def _asks(model_name: str, gpu_milli: int, num_gpu: int = 1) -> tuple[str, int] | None:
    found = mig.request(MODELS[model_name], _task("t", gpu_milli, num_gpu), Config())
    return None if found is None else (found.profile.name, found.gpus)


def test_a_task_asks_the_instance_whose_memory_holds_its_share() -> None:
    assert _asks("A100-80GB", 50) == ("1g.10gb", 1)
    assert _asks("A100-80GB", 230) == ("1g.20gb", 1)
    assert _asks("A100-80GB", 470) == ("3g.40gb", 1)
    assert _asks("A100-80GB", 1000, 8) == ("7g.80gb", 8)
    assert _asks("A100-80GB", 0) is None
    # 54 % of what MIG makes usable fits the H200's 3g.71gb, not the A100-80GB's 3g.40gb.
    assert _asks("A100-80GB", 540) == ("7g.80gb", 1)
    assert _asks("H200", 540) == ("3g.71gb", 1)


@pytest.mark.parametrize("policy", mig.POLICIES)
def test_every_gpu_ends_in_a_layout_nvml_allows_and_the_figures_count_it(policy: str) -> None:
    nodes = sample_nodes([node for node in read_nodes() if node.gpus], 40)
    tasks = read_tasks()
    arrived = workload(tasks, sum(node.gpus for node in nodes), 42, "shuffled")
    run = mig.place(A100, nodes, arrived, tasks, policy, 42)
    assert len(run.gpus) == sum(node.gpus for node in nodes)
    for state in run.gpus:
        assert nvml_allows(A100, Counter(state.instances)), state.instances
    end = run.at_130
    assert end.instances == sum(len(state.instances) for state in run.gpus)
    assert end.gpus_used == sum(1 for state in run.gpus if state.instances)
    assert end.tasks_arrived == sum(1 for task in arrived if task.num_gpu)
    assert 0 < run.at_100.tasks_placed <= end.tasks_placed < end.tasks_arrived


def test_the_least_fragmenting_rule_keeps_a_node_whole_for_the_pod_that_needs_it() -> None:
    # A node of two GPUs, then one of one: first fit gives the one-GPU task the first node
    # and has no two free GPUs left for the next; the rule gives it the one-GPU node.
    nodes = [TraceNode("two", 64000, 262144, 2, "A100"), TraceNode("one", 64000, 262144, 1, "A100")]
    tasks = [_task("one-gpu", 1000), _task("two-gpus", 1000, num_gpu=2)]
    placed = {
        policy: mig.place(A100, nodes, tasks, tasks, policy, 0).at_130.tasks_placed
        for policy in mig.POLICIES
    }
    assert placed == {mig.FIRST_FIT: 1, mig.LEAST_FRAGMENTING: 2}


@pytest.mark.parametrize("policy", mig.POLICIES)
def test_a_task_that_leaves_gives_back_its_instances_cpu_and_memory(policy: str) -> None:
    nodes = [TraceNode("two", 64000, 262144, 2, "A100"), TraceNode("one", 64000, 262144, 1, "A100")]
    stays = [
        Stay(_task("small", 100), 0, 50),
        Stay(_task("half", 470), 5, 50),
        Stay(_task("whole", 1000, cpu_milli=60000), 6, 80),
        Stay(_task("two-gpus", 1000, num_gpu=2), 10, 10),
        Stay(_task("two-gpus-later", 1000, num_gpu=2), 20, 100),
    ]
    placing = mig.Departing(A100, nodes, [stay.task for stay in stays], policy)
    run = replay(stays, placing, gpus=3)
    # Every task ran: those that found no room waited for one to leave and took its room.
    assert run.never_placed == 0 and run.waited
    # Once all have left, each node has its CPU, memory and every MIG slice back.
    for node, kind in zip(placing.cluster.values(), nodes, strict=True):
        assert (node.cpu_milli, node.memory_mib) == (kind.cpu_milli, kind.memory_mib)
        assert node.gpus == (GpuState(),) * kind.gpus


def test_an_unknown_model_or_policy_is_named_with_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert mig.main(["--models", "A100", "--policies", "best-fit"]) == 2
    said = capsys.readouterr().err
    assert "no A100, best-fit" in said
    assert "A100-80GB" in said and "least-fragmenting" in said


def test_the_docs_show_the_recorded_mig_runs() -> None:
    docs = (Path(__file__).parents[1] / "docs" / "performance.md").read_text()
    shown = docs.split("<!-- mig:begin -->\n", 1)[1].split("\n<!-- mig:end -->", 1)[0]
    assert shown == mig.table(mig.read_record(RESULTS))
