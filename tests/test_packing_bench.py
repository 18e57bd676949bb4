"""The packing benchmark's workload and cluster shape, before any cluster runs."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from fractions import Fraction

import pytest

from bench.packing import report
from bench.packing.__main__ import RESULTS, configurations, trace_plan
from bench.packing.offline import jittered, place_all, place_fgd
from bench.packing.replay import (
    CHECKPOINTS,
    batch_ends,
    decided,
    honoured,
    node_manifest,
    node_pools,
    plan_tasks,
    pod_manifest,
)
from bench.packing.trace import (
    ARRIVAL,
    BATCHES,
    ONE_AT_A_TIME,
    TraceNode,
    TraceTask,
    artefact_names,
    named_as_simulated,
    read_nodes,
    read_tasks,
    sample_nodes,
    task_list,
    workload,
)
from castslice.environment import load_config
from castslice.extender import cluster_view, expectations
from castslice.inspect.plan import environment_of, estimate

NODES = read_nodes()
TASKS = read_tasks()
CONFIGURATIONS = {item.name: item for item in configurations()}
# What `castslice plan` chooses: the backend, its slices per GPU and its sharing degrees.
PLANNED_SETTINGS = {"CASTSLICE_BACKEND", "CASTSLICE_SLICES_PER_GPU", "CASTSLICE_SHARING_DEGREES"}


def test_the_trace_is_the_paper_s() -> None:
    assert (len(NODES), sum(node.gpus for node in NODES)) == (1213, 6212)
    assert len(TASKS) == 8152
    assert sum(task.fractional for task in TASKS) == 3078


def test_a_sampled_cluster_gets_tasks_in_arrival_order_up_to_130_percent() -> None:
    gpus = sum(node.gpus for node in sample_nodes(NODES, 5))
    chosen = workload(TASKS, gpus, seed=42)
    demand = sum((task.demand for task in chosen), Fraction(0))
    assert demand <= ARRIVAL * gpus < demand + max(task.demand for task in TASKS)
    # Pruned, never reordered: a subsequence of the trace.
    positions = [TASKS.index(task) for task in chosen[:200]]
    assert positions == sorted(positions)
    assert workload(TASKS, gpus, seed=43) != chosen


def test_the_whole_cluster_gets_the_whole_trace_then_random_copies() -> None:
    chosen = workload(TASKS, 6212, seed=42)
    assert chosen[: len(TASKS)] == TASKS
    assert sum((task.demand for task in chosen), Fraction(0)) <= ARRIVAL * 6212


def test_the_paper_s_order_shuffles_the_tasks_before_tuning_them() -> None:
    """As the artefact runs with --shuffle-pod=true: the tasks sorted by name and shuffled,
    then pruned (or extended) to 130 %, all from one seeded generator."""
    gpus = sum(node.gpus for node in sample_nodes(NODES, 5))
    chosen = workload(TASKS, gpus, seed=42, order="shuffled")
    demand = sum((task.demand for task in chosen), Fraction(0))
    assert demand <= ARRIVAL * gpus < demand + max(task.demand for task in TASKS)
    positions = [TASKS.index(task) for task in chosen[:200]]
    assert positions != sorted(positions)
    assert chosen == workload(TASKS, gpus, seed=42, order="shuffled")
    assert chosen != workload(TASKS, gpus, seed=43, order="shuffled")
    # The whole cluster: every task once, shuffled, then random copies appended.
    whole = workload(TASKS, 6212, seed=42, order="shuffled")
    assert whole[: len(TASKS)] != TASKS
    assert sorted(whole[: len(TASKS)], key=lambda task: task.name) == TASKS
    with pytest.raises(ValueError, match="order 'random'"):
        workload(TASKS, gpus, seed=42, order="random")


def test_the_artefact_order_shuffles_every_task_then_tunes_with_its_own_draws() -> None:
    whole = workload(TASKS, 6212, seed=42, order="artefact")
    # Every task once, shuffled (not the file's order, nor the Python draw of that seed).
    assert whole[: len(TASKS)] != TASKS
    assert sorted(whole[: len(TASKS)], key=lambda task: task.name) == TASKS
    assert whole[:200] != workload(TASKS, 6212, seed=42, order="shuffled")[:200]
    assert whole == workload(TASKS, 6212, seed=42, order="artefact")
    assert whole != workload(TASKS, 6212, seed=43, order="artefact")
    # Copies appended while one GPU's share of each still fits under 130 %, as the
    # simulator compares them: at most one copy passes it, by less than its other GPUs.
    target = ARRIVAL * 6212
    demand = sum((task.demand for task in whole), Fraction(0))
    last = whole[-1]
    assert demand - last.demand + Fraction(last.gpu_milli, 1000) <= target
    assert demand < target + 7
    # A smaller cluster: tasks removed at random until the demand is at most 130 % of it.
    gpus = sum(node.gpus for node in sample_nodes(NODES, 5))
    pruned = workload(TASKS, gpus, seed=42, order="artefact")
    assert sum((task.demand for task in pruned), Fraction(0)) <= ARRIVAL * gpus
    assert len(set(pruned)) == len(pruned) < len(TASKS)
    with pytest.raises(ValueError, match="whole trace file"):
        workload(TASKS[1:], 6212, seed=42, order="artefact")


# The nodes the FGD artefact's simulator (8f3d641, built and run here as its experiments run
# it: cpu250, -tune 1.3 -tuneseed 42 --shuffle-pod=true) gave its first ten Pods, in order,
# from its log: ties go to the lowest name, and it numbers the names.
SIMULATOR_FIRST_TEN = (
    ["0000-openb-node-0867"] * 5 + ["0001-openb-node-0402"] * 4 + ["0081-openb-node-1168"]
)


def test_the_artefact_order_names_the_nodes_as_its_simulator_does() -> None:
    source = task_list("cpu250")
    tasks = read_tasks(source)
    named = artefact_names(NODES, 42, source)
    # Every node once, each name the trace's after a number from 0000 up, all different.
    assert sorted(named) == sorted(node.name for node in NODES)
    assert all(new.split("-", 1)[1] == old for old, new in named.items())
    assert sorted(int(new[:4]) for new in named.values()) == list(range(len(NODES)))
    # The names the simulator gave the nodes its first ten Pods went to, and so FGD's ties:
    # on the trace's names the first Pod would take openb-node-0000.
    assert {named[name.split("-", 1)[1]] for name in SIMULATOR_FIRST_TEN} == set(
        SIMULATOR_FIRST_TEN
    )
    nodes = named_as_simulated(NODES, 42, source)
    assert [node.name for node in nodes] == [named[node.name] for node in NODES]
    arrived = workload(tasks, 6212, 42, "artefact", source)[:10]
    assert list(place_fgd(nodes, arrived, tasks, 42).nodes) == SIMULATOR_FIRST_TEN
    assert place_fgd(NODES, arrived, tasks, 42).nodes[0] == "openb-node-0000"
    # Another seed, other numbers.
    assert artefact_names(NODES, 43, source) != named


def test_the_paper_s_results_are_its_published_per_seed_figures() -> None:
    """bench/packing/data/fgd_artefact_allocation.csv: ten seeds per policy, whose means
    are the figures the paper reports at 130 % (FGD 95.4 %, Best-fit 93.1 %)."""
    results = report.paper_results()
    assert all(len(results[name]) == 10 for name in report.PAPER_POLICIES)
    assert round(report.ANCHORS["FGD"], 3) == 0.954
    assert round(report.ANCHORS["Best-fit"], 3) == 0.931


def test_fractional_tasks_opt_in_with_the_slices_they_round_up_to() -> None:
    fractional = next(task for task in TASKS if task.gpu_milli == 460)
    whole = next(task for task in TASKS if task.num_gpu == 8)
    cpu = next(task for task in TASKS if task.num_gpu == 0)
    annotations = pod_manifest(CONFIGURATIONS["resource-8"], 0, fractional)["metadata"][
        "annotations"
    ]
    assert annotations == {"castops.io/optimize": "true", "castops.io/slice-ratio": "4"}
    for name in ("no sharing", "resource-8", "nvidia-4"):
        assert "annotations" not in pod_manifest(CONFIGURATIONS[name], 0, whole)["metadata"]
    # DRA nodes offer GPUs only as devices: a whole-GPU task claims whole devices.
    dra = pod_manifest(CONFIGURATIONS["dra-100"], 0, whole)["metadata"]["annotations"]
    assert dra["castops.io/slice-ratio"] == "800"
    assert (
        "limits"
        not in pod_manifest(CONFIGURATIONS["dra-4"], 0, cpu)["spec"]["containers"][0]["resources"]
    )


def test_a_whole_gpu_task_counts_what_a_sharing_node_gives_it() -> None:
    """On GKE a sharing pool keeps nvidia.com/gpu, one per client: a whole-GPU task that did
    not opt in may be placed there and gets a client's share, which is all it counts for.
    Where sharing nodes offer another resource (`nvidia`), it can only land whole."""
    whole = next(task for task in TASKS if task.num_gpu == 1 and task.gpu_milli == 1000)
    fractional = next(task for task in TASKS if task.gpu_milli == 460)
    node = NODES[0]
    gke = CONFIGURATIONS["gke-plan"]
    shared = node_manifest(gke, node, 2)["metadata"]["labels"]
    plain = node_manifest(gke, node, None)["metadata"]["labels"]
    assert honoured(gke, whole, shared) == Fraction(1, 2)
    assert honoured(gke, whole, plain) == 1
    assert honoured(gke, fractional, shared) == fractional.demand
    nvidia = CONFIGURATIONS["nvidia-plan"]
    assert honoured(nvidia, whole, node_manifest(nvidia, node, 2)["metadata"]["labels"]) == 1
    assert node_manifest(nvidia, node, 2)["status"]["allocatable"].get("nvidia.com/gpu") is None


@pytest.mark.parametrize("name", ["resource-4", "nvidia-plan"])
def test_sharing_nodes_take_the_share_of_gpus_the_plan_gives_their_pool(name: str) -> None:
    nodes = sample_nodes(NODES, 5)
    tasks = workload(TASKS, sum(node.gpus for node in nodes), seed=42)
    pools = node_pools(CONFIGURATIONS[name], nodes, tasks)
    gpus = Counter()
    for node, pool in zip(nodes, pools, strict=True):
        gpus[pool] += node.gpus
    configuration = CONFIGURATIONS[name]
    planned = estimate(configuration.config, plan_tasks(configuration, tasks), name).pools
    cluster = sum(node.gpus for node in nodes)
    total = sum(pool.gpus for pool in planned)
    widest = max(node.gpus for node in nodes)
    assert len(gpus) == len(planned) >= 2
    for pool in planned:
        key = pool.degree or (None if pool.label == "whole GPUs" else 4)
        # Nodes are whole: each pool is within one node's GPUs of its share.
        assert abs(gpus[key] - pool.gpus / total * cluster) <= widest


def test_the_plan_recommends_what_the_replays_measured_best() -> None:
    """`castslice plan --trace` and the recorded replays agree, at every scale replayed.

    Among the configurations the plan chooses between (backend, slices per GPU, sharing
    degrees: not the memory a claim asks for) whose placement a GPU can honour (`resource`
    counts a node's slices as one pool, so a share may be counted across two GPUs:
    docs/performance.md), the plan's recommendation places the most at 130 % arrival under
    the default profile, within the seeds' spread.
    """
    best = trace_plan().best
    wanted = load_config(environment_of(best.settings))
    recommended = next(
        item.name for item in configurations() if item.sharing and item.config == wanted
    )
    honoured = {
        item.name
        for item in configurations()
        if item.config.backend != "resource" and set(item.settings) <= PLANNED_SETTINGS
    }
    groups = report.groups(report.read(RESULTS))
    scales = {
        every
        for every, profile, name, order in groups
        if (profile, name, order) == ("default", recommended, "arrival")
    }
    assert scales, f"no replay of {recommended} in {RESULTS}"
    for every in scales:
        placed = {
            name: [report.at(record, 1.3)[0] for record in records]
            for (scale, profile, name, order), records in groups.items()
            if (scale, profile, order) == (every, "default", "arrival")
            and name in honoured | {"no sharing"}
        }
        rival = max(placed, key=lambda name: statistics.fmean(placed[name]))
        assert max(placed[recommended]) >= min(placed[rival]), (every, rival, placed)
        assert statistics.fmean(placed[recommended]) > statistics.fmean(placed["no sharing"])


def test_the_docs_show_the_recorded_replays() -> None:
    """docs/performance.md's table and plots are what `python -m bench.packing report`
    writes from the recorded results: a replay recorded without the report is caught."""
    text, images = report.section(report.read(RESULTS))
    doc = report.DOC.read_text()
    assert doc.split(report.BEGIN, 1)[1].split(report.END, 1)[0] == f"\n{text}\n"
    for name, svg in images.items():
        assert (report.IMAGES / name).read_text() == svg, name


def test_the_cost_table_shows_what_each_replay_measured_of_scheduling() -> None:
    curve = [[1.3, 0.9, 0, 0]]
    base = {"profile": "default", "seed": 42, "every": 1, "curve": curve}
    measured = {
        **base, "configuration": "dra-100", "profile": "fgd-extender", "order": "shuffled",
        "scheduler": {"attempts": 8000, "attempt_mean": 0.25, "attempt_p99": 1.024,
                      "cpu_seconds": 1800.4, "peak_rss": 400 * 2**20},
        "extender": {"calls": 7000, "seconds": 14.0, "cpu_seconds": 300.0,
                     "peak_rss": 120 * 2**20},
    }  # fmt: skip
    unmeasured = {**base, "configuration": "no sharing"}

    lines = report.cost_table([measured, unmeasured], 1)

    assert lines[-2] == (
        "| dra-100 | fgd-extender | shuffled | 42 | 8000 | 250 ms | 1024 ms | 1800 s | 400 MiB "
        "| 7000 | 2.0 ms | 300 s | 120 MiB |"
    )
    assert not any("no sharing" in line for line in lines)
    assert report.cost_table([unmeasured], 1) == []


def test_a_seed_replayed_again_is_shown_by_its_latest_replay_only() -> None:
    def replay(ratio: float, attempts: int) -> dict[str, object]:
        return {
            "configuration": "dra-100", "profile": "fgd-extender", "order": "artefact",
            "seed": 42, "every": 1, "gpus": 100, "seconds": 60.0,
            "curve": [[1.0, ratio, 0, 0], [1.3, ratio, 0, 0]],
            "scheduler": {"attempts": attempts, "attempt_mean": 0.5, "attempt_p99": 1.0,
                          "cpu_seconds": 10.0, "peak_rss": 2**20},
        }  # fmt: skip

    records = [replay(0.9, 111), replay(0.95, 222)]

    rows = [line for line in report.table(records, 1) if line.startswith("| dra-100")]
    assert rows == [
        "| dra-100 | fgd-extender | artefact | 1 | 95.0% | 95.0% | 5 of 100 | 0 | 1.0 |"
    ]
    costs = [line for line in report.cost_table(records, 1) if line.startswith("| dra-100")]
    assert len(costs) == 1 and "| 222 |" in costs[0], costs


def test_replays_of_the_artefact_s_draws_sit_beside_the_paper_s_fgd_on_the_same_seeds() -> None:
    """The artefact's draws are the paper's own workloads seed for seed; Python's draws are
    not, so only the former get FGD's figures on just their seeds."""

    def replay(seed: int, order: str) -> dict[str, object]:
        return {
            "configuration": "dra-100", "profile": "fgd-extender", "order": order,
            "seed": seed, "every": 1, "gpus": 6212, "seconds": 60.0,
            "curve": [[1.0, 0.9, 0, 0], [1.3, 0.9, 0, 0]],
        }  # fmt: skip

    fgd = report.paper_seeds()["FGD"]
    records = [replay(43, "artefact"), replay(45, "artefact"), replay(46, "shuffled")]

    lines = report.paper_table(records, 1)

    same = [line for line in lines if "seeds 43, 45" in line]
    at_100 = [fgd[43][0], fgd[45][0]]
    at_130 = [fgd[43][1], fgd[45][1]]
    assert same == [
        "| FGD (the paper's simulator, the whole trace, seeds 43, 45) | 2 "
        f"| {report._spread(at_100)} | {report._spread(at_130)} |"
    ]
    assert not any("seed 46" in line or "seeds 46" in line for line in lines)
    assert len(fgd) == 10 and fgd[43] != fgd[45]


def test_replays_that_made_pods_one_at_a_time_are_shown_apart_from_batched_ones() -> None:
    def replay(ratio: float, creation: str | None) -> dict[str, object]:
        record = {
            "configuration": "dra-100", "profile": "fgd-extender", "order": "artefact",
            "seed": 42, "every": 1, "gpus": 100, "seconds": 60.0,
            "curve": [[1.0, ratio, 0, 0], [1.3, ratio, 0, 0]],
        }  # fmt: skip
        return record if creation is None else {**record, "creation": creation}

    # Recorded before the choice existed, then again in batches, then one at a time.
    records = [replay(0.90, None), replay(0.93, BATCHES), replay(0.96, ONE_AT_A_TIME)]

    rows = [line for line in report.table(records, 1) if line.startswith("| dra-100")]
    assert rows == [
        "| dra-100 | fgd-extender | artefact, one at a time | 1 | 96.0% | 96.0% | 4 of 100 "
        "| 0 | 1.0 |",
        "| dra-100 | fgd-extender | artefact | 1 | 93.0% | 93.0% | 7 of 100 | 0 | 1.0 |",
    ]
    paper = [line for line in report.paper_table(records, 1) if "this replay" in line]
    assert paper == [
        "| dra-100, fgd-extender profile (this replay, the artefact's draws, Pods one at a "
        "time) | 1 | 96.0% | 96.0% |",
        "| dra-100, fgd-extender profile (this replay, the artefact's draws) | 1 | 93.0% | 93.0% |",
    ]


def _scheduled(condition: dict[str, str] | None, node: str = "") -> dict[str, object]:
    return {
        "spec": {"nodeName": node} if node else {},
        "status": {"conditions": [condition] if condition else []},
    }


def _unschedulable(message: str) -> dict[str, str]:
    return {
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
    }  # fmt: skip


def test_a_pod_is_decided_once_bound_or_without_room_but_not_while_its_claim_is_missing() -> None:
    """What the replay waits for before the next Pod, one at a time, and at each checkpoint.
    The messages are kube-scheduler's (v1.37.2): FitError.Error in framework/types.go, the
    DynamicResources plugin's PreFilter and Filter, dynamic-resource-allocation's
    ErrClaimNotFound."""
    room = (
        "0/1213 nodes are available: 1213 cannot allocate all claims. preemption: 0/1213 "
        "nodes are available: 1213 Preemption is not helpful for scheduling."
    )
    claim_missing = (
        '0/1213 nodes are available: pod "trace/task-00007": ResourceClaim not created yet.'
    )
    claim_unseen = (
        "0/1213 nodes are available: "
        'resourceclaim.resource.k8s.io "task-00007-gpu-x2b7c" not found.'
    )

    assert decided(_scheduled(None, node="openb-node-0001"))
    assert decided(_scheduled(_unschedulable(room)))
    assert not decided(_scheduled(_unschedulable(claim_missing)))
    assert not decided(_scheduled(_unschedulable(claim_unseen)))
    # Not tried yet: no condition at all.
    assert not decided(_scheduled(None))


def test_jitter_moves_each_task_by_less_than_its_width_and_keeps_every_task() -> None:
    tasks = [TraceTask(f"t{index}", 1000, 1024, 1, 500, ()) for index in range(200)]
    moved = jittered(tasks, 10, seed=1)
    assert sorted(moved, key=tasks.index) == tasks
    shifts = [abs(tasks.index(task) - place) for place, task in enumerate(moved)]
    assert 0 < max(shifts) < 10
    assert moved == jittered(tasks, 10, seed=1) != jittered(tasks, 10, seed=2)
    assert jittered(tasks, 0, seed=1) == tasks


def test_offline_placement_packs_shares_and_takes_the_lowest_name_of_identical_nodes() -> None:
    # Listed out of name order, so the first node listed is not the lowest name.
    nodes = [TraceNode(f"node-{letter}", 8000, 32768, 1, "T4") for letter in "cab"]
    half, whole = (
        TraceTask("half", 1000, 1024, 1, 500, ()),
        TraceTask("whole", 1000, 1024, 1, 1000, ()),
    )
    late = TraceTask("late", 1000, 1024, 1, 600, ())
    placed = place_all(nodes, [half, half, whole, whole, late], "extender", seed=1)
    # The halves share one GPU (so both whole GPUs fit), on the lowest name; the last fits nowhere.
    assert placed.nodes[:2] == ("node-a", "node-a")
    assert sorted(placed.nodes[2:4]) == ["node-b", "node-c"]
    assert placed.nodes[4] == ""
    assert (placed.at_100, placed.at_130) == (1.0, 1.0)


def test_fgd_itself_puts_a_share_on_the_gpu_it_scores_best_and_takes_the_lowest_name() -> None:
    # The typical Pod asks half a GPU; two identical nodes of two GPUs, listed out of order.
    nodes = [TraceNode(f"node-{letter}", 8000, 32768, 2, "T4") for letter in "ba"]
    typical = TraceTask("typical", 1000, 1024, 1, 500, ())
    small = TraceTask("small", 1000, 1024, 1, 400, ())
    smaller = TraceTask("smaller", 1000, 1024, 1, 200, ())
    whole = TraceTask("whole", 1000, 1024, 1, 1000, ())
    placed = place_fgd(nodes, [small, smaller, whole], [typical], seed=1)
    # 0.4 on node-a's first GPU; 0.2 on its second, which keeps 0.6 free on the first for
    # a typical Pod (the first GPU that fits would leave 0.4 free there, and so prefers
    # node-b); so no GPU of node-a is whole for the last, which goes to node-b.
    assert placed.nodes == ("node-a", "node-a", "node-b")
    assert placed.policy == "fgd"
    assert placed.at_130 == 0.4


def test_the_extender_is_asked_only_about_the_nodes_the_scheduler_s_filters_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As kube-scheduler asks it: not about a Pod that fits no node (which the extender would
    otherwise count on its best-scored node for good), nor one that fits a single node."""
    nodes = [TraceNode(f"node-{letter}", 8000, 32768, 1, "T4") for letter in "abc"]
    whole = TraceTask("whole", 1000, 1024, 1, 1000, ())
    pinned = TraceTask("pinned", 1000, 1024, 1, 1000, ("V100M32",))
    too_big = TraceTask("too-big", 9000, 1024, 1, 500, ())
    asked: list[tuple[str, list[str]]] = []
    prioritize = cluster_view.ClusterView.prioritize

    def recording(view: cluster_view.ClusterView, pod: dict, names: list[str]) -> list:
        asked.append((pod["metadata"]["name"], sorted(names)))
        return prioritize(view, pod, names)

    monkeypatch.setattr(cluster_view.ClusterView, "prioritize", recording)
    placed = place_all(nodes, [whole, pinned, too_big, whole, whole], "extender", seed=1)
    assert placed.nodes == ("node-a", "", "", "node-b", "node-c")
    assert asked == [
        ("task-00000", ["node-a", "node-b", "node-c"]),
        ("task-00003", ["node-b", "node-c"]),
    ]


def test_in_process_placements_are_the_live_replay_s_pod_by_pod() -> None:
    """Each live replay recorded with `run --placements` (kube-scheduler with the extender,
    one Pod at a time): the in-process harness puts every Pod where the live cluster did."""
    recorded = [
        json.loads(line)
        for line in (RESULTS.parent / "live_placements.jsonl").read_text().splitlines()
    ]
    assert {record["list"] for record in recorded} >= {"default", "gpuspec25", "cpu100"}
    for record in recorded:
        assert (record["configuration"], record["profile"]) == ("dra-100", "fgd-extender")
        assert record["creation"] == ONE_AT_A_TIME
        source = task_list(record["list"])
        nodes = sample_nodes(NODES, record["every"])
        tasks = workload(
            read_tasks(source), sum(n.gpus for n in nodes), record["seed"], record["order"], source
        )
        placed = place_all(nodes, tasks, "extender", record["seed"])
        assert list(placed.nodes) == record["nodes"], record["list"]


def test_counting_expected_pods_makes_the_watch_s_lag_cost_nothing() -> None:
    """On the Pods the extender is asked about: here, until the first that fits one node
    only, which kube-scheduler binds there without asking (the watch alone shows it)."""
    nodes = sample_nodes(NODES, 20)
    tasks = workload(TASKS, sum(node.gpus for node in nodes), seed=42, order="shuffled")[:160]
    prompt = place_all(nodes, tasks, "extender", seed=42)
    # The view learning each binding four tasks late changes no placement...
    assert place_all(nodes, tasks, "extender", seed=42, lag=4).nodes == prompt.nodes
    # ...where, not counting the Pods it sent until the watch shows them, it does.
    assert place_all(nodes, tasks, "extender-no-expect", seed=42).nodes == prompt.nodes
    assert place_all(nodes, tasks, "extender-no-expect", seed=42, lag=4).nodes != prompt.nodes


def test_in_process_placements_do_not_depend_on_how_fast_the_machine_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A live expectation lapses after EXPECTED_FOR seconds; in process time stands still, so
    a slow machine (here: expectations that lapse at once) places the same."""
    nodes = sample_nodes(NODES, 20)
    tasks = workload(TASKS, sum(node.gpus for node in nodes), seed=42, order="shuffled")[:300]
    prompt = place_all(nodes, tasks, "extender", seed=42)
    monkeypatch.setattr(expectations, "EXPECTED_FOR", -1.0)
    assert place_all(nodes, tasks, "extender", seed=42).nodes == prompt.nodes


def test_the_replay_creates_the_tasks_arrived_by_each_checkpoint_in_one_batch() -> None:
    nodes = sample_nodes(NODES, 20)
    gpus = sum(node.gpus for node in nodes)
    tasks = workload(TASKS, gpus, seed=42, order="shuffled")
    ends = batch_ends(tasks, gpus)
    assert len(ends) == len(CHECKPOINTS) and ends == sorted(ends) and ends[-1] == len(tasks)
    for checkpoint, end in zip(CHECKPOINTS[:-1], ends, strict=False):
        arrived = sum((task.demand for task in tasks[:end]), Fraction(0))
        assert arrived <= checkpoint * gpus < arrived + tasks[end].demand
    # Tasks past the last checkpoint's share are created with its batch all the same.
    beyond = tasks + tasks[:50]
    assert batch_ends(beyond, gpus) == [*ends[:-1], len(beyond)]


def test_offline_batches_show_the_extender_a_batch_of_pods_before_it_scores_the_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As live, where the replay creates a batch of the workload at once and the watch shows
    every Pod of it to the extender before kube-scheduler asks about the first."""
    nodes = sample_nodes(NODES, 20)
    gpus = sum(node.gpus for node in nodes)
    tasks = workload(TASKS, gpus, seed=42, order="shuffled")[:300]
    known_when_scored: list[int] = []
    prioritize = cluster_view.ClusterView.prioritize

    def counting(view: cluster_view.ClusterView, pod: dict, names: list[str]) -> list:
        known_when_scored.append(len(view.watched.pods))
        return prioritize(view, pod, names)

    monkeypatch.setattr(cluster_view.ClusterView, "prioritize", counting)
    place_all(nodes, tasks, "extender", seed=42)
    assert known_when_scored[:3] == [1, 2, 3]
    known_when_scored.clear()
    place_all(nodes, tasks, "extender", seed=42, batches=True)
    first = batch_ends(tasks, gpus)[0]
    assert 1 < first < len(tasks)
    assert known_when_scored[:first] == [first] * first
    assert known_when_scored[first] == batch_ends(tasks, gpus)[1]


def test_a_replay_of_another_task_list_stays_out_of_the_trace_tables() -> None:
    """A live replay of one of the artefact's other task lists (`run --list gpuspec25`)
    appended to the trace's results must not count as a seed of the trace's own replay."""
    trace = [
        record for record in report.read(RESULTS) if record.get("list", "default") == "default"
    ]
    other = {**trace[0], "list": "gpuspec25", "seed": 999}
    assert report.groups([*trace, other]) == report.groups(trace)
    same_list = {**trace[0], "list": "default", "seed": 999}
    assert report.groups([*trace, same_list]) != report.groups(trace)
