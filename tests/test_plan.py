"""`castslice plan`: its arithmetic against hand counts, its sources and its bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from castslice import cli
from castslice.environment import load_config
from castslice.inspect.plan import (
    Task,
    WorkloadError,
    estimate,
    no_sharing,
    plan,
    tasks_from_pod,
    tasks_from_trace,
)
from tests.helpers import HEADER, SLICE_RATIO, TRACE, applied_as_printed, plan_in_process, run_plan

ROOT = Path(__file__).resolve().parent.parent


def shares(*gpus: str) -> list[Task]:
    return [Task(Fraction(value), True) for value in gpus]


def whole(count: int, gpus: int = 1) -> list[Task]:
    return [Task(Fraction(gpus), False)] * count


def test_a_trace_s_fractional_tasks_opt_in_and_whole_and_cpu_tasks_do_not() -> None:
    text = HEADER + "a,1000,1024,1,460,\nb,1000,1024,1,1000,\nc,1000,1024,0,0,\nd,8000,1,8,1000,\n"
    tasks = tasks_from_trace(text)
    assert [(task.gpus, task.opted_in) for task in tasks] == [
        (Fraction(46, 100), True),
        (Fraction(1), False),
        (Fraction(0), False),
        (Fraction(8), False),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name,cpu_milli\na,1\n", "no num_gpu or gpu_milli column"),
        (HEADER + "a,1,1,1,half,\n", "line 2: num_gpu and gpu_milli must be whole numbers"),
        (HEADER + "a,1,1,1,1500,\n", "line 2: num_gpu 1, gpu_milli 1500"),
    ],
)
def test_a_bad_trace_names_its_line(text: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        tasks_from_trace(text, "mix.csv")


def test_resource_rounds_each_share_up_to_slices_and_packs_them_together() -> None:
    config = load_config({"CASTSLICE_BACKEND": "resource"})
    # 0.47 -> 2 of 4 slices; four of them fill two GPUs. 0.8 -> 4 slices, a whole GPU.
    result = estimate(config, shares("0.47", "0.47", "0.47", "0.47", "0.8") + whole(3), "r")
    assert result.gpus == 2 + 1 + 3
    assert result.rounded_up == 5
    assert result.rounded_by == 4 * Fraction(3, 100) + Fraction(2, 10)
    assert {pool.label: pool.gpus for pool in result.pools} == {
        "shares of 4": 2,
        "whole GPUs": 4,
    }


def test_a_pool_backend_gives_a_whole_gpu_to_a_share_no_pool_fits() -> None:
    default = load_config({"CASTSLICE_BACKEND": "nvidia"})
    both = load_config({"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_SHARING_DEGREES": "2,4"})
    mix = shares("0.47", "0.47", "0.2", "0.2", "0.2", "0.2")
    # Degree 4 only: 0.47 fits no 4-way share and gets a GPU each; the four 0.2 share one.
    assert estimate(default, mix, "d").gpus == 2 + 1
    pools = estimate(both, mix, "b").pools
    assert [(pool.degree, pool.gpus, pool.tasks) for pool in pools] == [(2, 1, 2), (4, 1, 4)]


def test_shares_finer_than_the_pools_offer_and_multi_gpu_opt_ins_are_warned_about() -> None:
    config = load_config({"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_SHARING_DEGREES": "2"})
    mix = [Task(Fraction(1, 10), True, "pod/small"), Task(Fraction(3), True, "pod/big")]
    warnings = estimate(config, mix, "w").warnings
    assert warnings == (
        "pod/big: a slice count of more than one GPU: whole GPUs, and a share of several "
        "GPUs is not what sharing offers",
        "pod/small: need less than 1/2 of a GPU, the finest share the sharing nodes offer: "
        "they get more than they need",
    )
    assert estimate(config, shares("0.5"), "fine").warnings == ()


def test_without_sharing_every_gpu_task_takes_whole_gpus() -> None:
    result = no_sharing(shares("0.2", "0.5") + whole(2, gpus=2) + [Task(Fraction(0), False)])
    assert result.gpus == 1 + 1 + 4
    assert result.rounded_up == 2
    assert result.rounded_by == Fraction(8, 10) + Fraction(5, 10)


def test_the_recommendation_is_the_coarsest_setting_that_needs_the_fewest_gpus() -> None:
    # Halves and quarters: S = 4 packs them perfectly, so no finer S is worth it.
    mix = shares(*["0.5"] * 6, *["0.25"] * 8) + whole(4)
    result = plan(load_config({}), mix)
    assert result.ideal == 3 + 2 + 4
    assert result.best.gpus == result.ideal
    assert result.best.settings["slicesPerGpu"] == 4
    assert result.per_backend["dra"].name == "dra S=4"
    # Pools: 2 and 4 clients per GPU place every share exactly; one of them alone cannot.
    assert result.per_backend["nvidia"].settings["sharingDegrees"] == [2, 4]
    assert result.per_backend["nvidia"].gpus == result.ideal


def test_a_finer_share_is_recommended_when_it_saves_gpus() -> None:
    # 0.13 rounds to a quarter at S=4 and S=8 (10 GPUs), to 0.2 at S=10 (8), and stays
    # 0.13 at S=100 (40 x 0.13 = 5.2: 6 GPUs).
    result = plan(load_config({}), shares(*["0.13"] * 40))
    assert result.per_backend["dra"].name == "dra S=100"
    assert result.per_backend["dra"].gpus == 6
    assert result.today.gpus == 10


def test_the_plan_says_when_the_scheduler_extender_is_worth_deploying() -> None:
    trace = plan(load_config({}), tasks_from_trace(TRACE.read_text()))
    assert trace.recommended_claims_devices
    worth, why = trace.extender_advice
    # 3078 shares of a GPU: 1731.8 GPUs of the trace's 6086.8.
    assert worth and why.startswith("28% of the GPU demand comes in shares of a GPU")
    assert trace.as_dict()["extender"] == {"worthDeploying": True, "why": why}
    # Shares a small part of the demand: few fragments to avoid.
    planned = plan(load_config({}), shares("0.5") + whole(20))
    # Here the plan recommends a backend whose GPUs are not devices the scheduler allocates.
    assert planned.best.settings["backend"] != "dra"
    assert not planned.recommended_claims_devices
    mostly_whole = replace(planned, recommended_claims_devices=True)
    assert mostly_whole.extender_advice[0] is False
    assert "only 2% of the GPU demand" in mostly_whole.extender_advice[1]
    # Node pools: no pieces of a GPU, but CPU, memory and whole GPUs the extender keeps
    # from stranding (measured on the whole trace: docs/performance.md).
    for backend in ("nvidia", "gke"):
        pools = replace(trace, recommended_claims_devices=False, backend=backend)
        assert pools.extender_advice == (
            True,
            "28% of the GPU demand comes in shares of a GPU, the nodes' CPU, memory and whole "
            "GPUs strand later Pods: the fragmentation-aware scheduler extender (castslice "
            "extender, infra/scheduler/fgd-extender.yaml) places more of it "
            "(docs/performance.md#the-scheduler-extender)",
        )
        assert replace(mostly_whole, backend=backend).extender_advice[0] is False
    # GPUs the extender cannot see at all.
    unseen = replace(trace, recommended_claims_devices=False, backend="resource")
    assert unseen.extender_advice == (
        False,
        "the scheduler extender scores GPUs shared as DRA devices or by node pools; the "
        "recommended backend's GPUs are neither",
    )


def test_a_pod_castslice_rewrote_counts_its_share_and_one_left_alone_its_gpus() -> None:
    config = load_config({"CASTSLICE_SLICES_PER_GPU": "8"})
    record = '{"slices":3,"source":"slice-ratio","backend":"resource","original":{"a":"1","b":"1"}}'
    rewritten = {"metadata": {"annotations": {"castslice.castops.io/applied": record}}}
    alone = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}, {}]}}
    assert [task.gpus for task in tasks_from_pod(rewritten, config)] == [Fraction(3, 8)] * 2
    assert [(task.gpus, task.opted_in) for task in tasks_from_pod(alone, config)] == [
        (Fraction(2), False)
    ]


def test_the_trace_s_recommendation_beats_today_s_default() -> None:
    tasks = tasks_from_trace(TRACE.read_text())
    # Today's backend named (resource): the plan keeps to it.
    result = plan(load_config({}), tasks, named_backend=True)
    assert result.no_sharing.gpus == 7433
    # 3078 fractional tasks: 2101 GPUs at S=4 as the issue counted, 4355 for whole-GPU tasks.
    assert result.today.gpus == 2101 + 4355
    assert result.best.gpus == result.ideal == 6087
    # Today's backend, resource, at S=100: the presets scaled to keep their shares.
    assert result.best.name == "resource S=100"
    assert result.best.environment == {
        "CASTSLICE_SLICES_PER_GPU": "100",
        "CASTSLICE_PRESETS": "training=100,inference=50,batch=50,dev=25",
        "CASTSLICE_DEFAULT_SLICES": "25",
    }
    # dra needs as many GPUs without splitting the nodes into shared and plain ones: it is
    # listed for nodes that offer it.
    assert len(result.best.pools) == 2
    assert [item.name for item in result.elsewhere] == []
    assert result.per_backend["dra"].name == "dra S=100"
    assert [pool.label for pool in result.per_backend["dra"].pools] == [
        "shares of 100 and whole GPUs"
    ]
    # No backend named: the backend whose best needs fewest, and fewest groups of nodes.
    anywhere = plan(load_config({}), tasks, named_backend=False)
    assert anywhere.best.name == "dra S=100"
    assert anywhere.best.environment["CASTSLICE_BACKEND"] == "dra"
    assert any("castslice claim-templates" in note for note in anywhere.best.notes)


DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: notebooks}
spec:
  replicas: 6
  selector: {matchLabels: {app: nb}}
  template:
    metadata:
      labels: {app: nb}
      annotations: {castops.io/optimize: "true", castops.io/workload-type: inference}
    spec:
      containers:
        - name: app
          image: registry.invalid/app:1
          resources: {limits: {nvidia.com/gpu: 1}}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer}
spec:
  containers:
    - name: app
      image: registry.invalid/app:1
      resources: {limits: {nvidia.com/gpu: 2}}
"""


def test_manifests_are_planned_as_castslice_leaves_them_replicas_counted() -> None:
    done = run_plan("-f", "-", "-o", "json", stdin=DEPLOYMENT)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # Six inference Pods (2 of 4 slices: half a GPU each) and a Pod left with 2 GPUs.
    assert (result["tasks"], result["optedIn"]) == (7, 6)
    assert result["today"]["gpus"] == 3 + 2
    assert result["noSharing"]["gpus"] == 6 + 2


def test_yaml_table_and_plot_say_the_same(tmp_path: Path) -> None:
    chart = tmp_path / "plan.svg"
    as_yaml = yaml.safe_load(run_plan("-f", "-", "-o", "yaml", stdin=DEPLOYMENT).stdout)
    table = run_plan("-f", "-", "--plot", str(chart), stdin=DEPLOYMENT)
    assert table.returncode == 0, table.stderr
    assert as_yaml["keep"] and as_yaml["recommended"] == "today"
    assert "Recommended: keep the current settings (CASTSLICE_BACKEND=resource " in table.stdout
    assert as_yaml["keep"] in table.stdout
    svg = chart.read_text()
    assert svg.startswith("<svg") and f"perfect packing {as_yaml['perfectPacking']}" in svg
    assert svg.count("<rect") == len(as_yaml["candidates"]) + 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--trace", "missing.csv"], "castslice plan: cannot read --trace missing.csv"),
        (["-f", "-"], "castslice plan: the workload asks for no GPUs: nothing to plan"),
        (["--kubeconfig", "missing.kubeconfig"], "there is no such file"),
    ],
)
def test_bad_input_exits_2_with_what_was_wrong(argv: list[str], message: str) -> None:
    done = run_plan(*argv, stdin="apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {}\n")
    assert done.returncode == cli.EXIT_USAGE
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_every_backend_is_a_candidate_mig_with_each_way_of_cutting_its_gpus() -> None:
    result = plan(load_config({}), shares("0.13", "0.5") + whole(2))
    backends = {"resource", "nvidia", "gke", "dra", "mig"}
    assert {item.settings["backend"] for item in result.candidates} == backends
    assert set(result.per_backend) == backends
    # MIG: the mix plan packs, mig-parted's all-balanced and each all-<profile> (A100-80GB).
    cut = {item.settings["layout"] for item in result.candidates if "layout" in item.settings}
    profiles = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
    assert cut == {"mix", "all-balanced", *(f"all-{name}" for name in profiles)}


def test_today_is_the_configuration_the_flags_set() -> None:
    config = load_config({"CASTSLICE_BACKEND": "dra", "CASTSLICE_SLICES_PER_GPU": "10"})
    mix = shares("0.13", "0.13")
    assert plan(config, mix).today.gpus == estimate(replace(config), mix, "x").gpus == 1


# --- Each configuration plan prints, applied as printed, gives plan's figure. --------------

EXAMPLE = (ROOT / "examples" / "pytorchjob.yaml").read_text()
ISSUE_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: infer}
spec:
  replicas: 3
  selector: {matchLabels: {app: infer}}
  template:
    metadata:
      labels: {app: infer}
      annotations: {castops.io/optimize: "true", castops.io/slice-ratio: "8"}
    spec:
      containers:
        - name: app
          image: registry.invalid/app:1
          resources: {limits: {nvidia.com/gpu: 1}}
"""


@pytest.mark.parametrize(
    ("manifests", "today"),
    [
        ((ROOT / "examples" / "pytorchjob.yaml").read_text(), {}),
        ((ROOT / "examples" / "pytorchjob.yaml").read_text(), {"CASTSLICE_BACKEND": "nvidia"}),
        (ISSUE_DEPLOYMENT, {}),
        (ISSUE_DEPLOYMENT, {"CASTSLICE_BACKEND": "gke", "CASTSLICE_SHARING_DEGREES": "2"}),
        (DEPLOYMENT, {"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_SLICES_PER_GPU": "8"}),
    ],
    ids=["pytorchjob", "pytorchjob-nvidia", "issue", "issue-gke", "notebooks-nvidia-8"],
)
def test_every_configuration_plan_prints_applied_as_printed_gives_its_figure(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    manifests: str,
    today: dict[str, str],
) -> None:
    result = json.loads(
        plan_in_process(
            monkeypatch, capsys, today, "plan", "-f", "-", "-o", "json", stdin=manifests
        )
    )
    shown = [result["recommendation"], *result["candidates"]]
    for promised in shown:
        applied_as_printed(monkeypatch, capsys, today, promised, manifests)
    # Every backend's best, printed as "if your nodes offered" when it needs fewer.
    for promised in result["recommendedPerBackend"].values():
        applied_as_printed(monkeypatch, capsys, today, promised, manifests)


def trace_manifests(per_gpu: int) -> str:
    """The trace as Deployments, one per kind of task with its count as replicas: a share
    opts in with castops.io/slice-ratio its share times `per_gpu`, rounded up (as plan's
    note says); whole GPUs ask for them."""
    kinds = Counter((task.opted_in, task.gpus) for task in tasks_from_trace(TRACE.read_text()))
    documents = []
    for index, ((opted_in, gpus), count) in enumerate(sorted(kinds.items())):
        if not gpus:
            continue
        annotations = (
            {"castops.io/optimize": "true", SLICE_RATIO: str(math.ceil(gpus * per_gpu))}
            if opted_in
            else {}
        )
        limits = {"nvidia.com/gpu": 1 if opted_in else math.ceil(gpus)}
        documents.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": f"kind-{index}"},
                "spec": {
                    "replicas": count,
                    "selector": {"matchLabels": {"kind": str(index)}},
                    "template": {
                        "metadata": {"labels": {"kind": str(index)}, "annotations": annotations},
                        "spec": {
                            "containers": [
                                {"name": "task", "image": "registry.invalid/task:1",
                                 "resources": {"limits": limits}}
                            ]
                        },
                    },
                },
            }
        )  # fmt: skip
    return yaml.safe_dump_all(documents)


def test_what_plan_recommends_for_the_trace_applied_as_printed_gives_its_figure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    # The recommendation and each backend's best (the table's other rows are held by the
    # test above, on manifests: the trace through preview takes seconds a configuration).
    today: dict[str, str] = {}
    result = json.loads(
        plan_in_process(monkeypatch, capsys, today, "plan", "--trace", str(TRACE), "-o", "json")
    )
    assert result["recommendation"]["environment"]["CASTSLICE_SLICES_PER_GPU"] == "100"
    for promised in [result["recommendation"], *result["recommendedPerBackend"].values()]:
        if promised["settings"]["slicesPerGpu"] != load_config(today).slices_per_gpu:
            assert any("slice-ratio its share of a GPU times" in note for note in promised["notes"])
        manifests = trace_manifests(promised["settings"]["slicesPerGpu"])
        applied_as_printed(monkeypatch, capsys, today, promised, manifests)


def test_plan_keeps_to_a_named_backend_and_lists_the_others_as_if_the_nodes_offered_them() -> None:
    done = run_plan("--trace", str(TRACE), "--backend", "gke")
    assert done.returncode == 0, done.stderr
    recommended = done.stdout.split("Recommended: ", 1)[1]
    assert recommended.startswith("gke pools 2,4: 6556 GPUs, 646 fewer than today")
    assert "  CASTSLICE_SHARING_DEGREES=2,4\n" in recommended
    assert "CASTSLICE_BACKEND" not in recommended.split("If your nodes offered")[0]
    offered = [line for line in done.stdout.splitlines() if line.startswith("If your nodes")]
    assert [line.split(":")[0] for line in offered] == [
        "If your nodes offered resource",
        "If your nodes offered dra",
        "If your nodes offered mig",
    ]
    assert "(CASTSLICE_BACKEND=dra CASTSLICE_SLICES_PER_GPU=100 " in offered[1]


@pytest.mark.parametrize(
    ("manifests", "argv", "why"),
    [
        # slice-ratio 8 of 4: two whole GPUs a Pod, whatever the setting; more than asked.
        (ISSUE_DEPLOYMENT, [], "sharing saves no GPU for this workload"),
        (ISSUE_DEPLOYMENT, ["--backend", "nvidia"], "no nvidia setting needs fewer GPUs"),
        (EXAMPLE, [], "no backend's setting needs fewer GPUs than today's 1"),
    ],
)
def test_plan_says_to_keep_the_settings_when_no_change_gains_a_gpu(
    manifests: str, argv: list[str], why: str
) -> None:
    done = run_plan("-f", "-", *argv, stdin=manifests)
    (recommended,) = [line for line in done.stdout.splitlines() if "Recommended" in line]
    assert recommended.startswith("Recommended: keep the current settings (CASTSLICE_BACKEND=")
    assert why in recommended
    assert "+0" not in recommended and "0 fewer" not in recommended


def test_no_sharing_is_what_the_containers_ask_for_and_warnings_name_pods_as_preview_does() -> None:
    done = run_plan("-f", "-", "-o", "json", stdin=EXAMPLE)
    result = json.loads(done.stdout)
    # Master asks for 1 GPU, Worker for 4: five GPUs without CastSlice.
    assert result["noSharing"]["gpus"] == 1 + 4
    table = run_plan("-f", "-", stdin=EXAMPLE).stdout
    preview = subprocess.run(
        [sys.executable, "-m", "castslice", "preview", "-f", "-"], input=EXAMPLE,
        capture_output=True, text=True, cwd=ROOT, env={"PATH": "/usr/bin:/bin"}, check=True,
    )  # fmt: skip
    (warning,) = [line for line in preview.stderr.splitlines() if line.startswith("Warning: ")]
    named = warning.removeprefix("Warning: ")
    assert named == (
        'PyTorchJob research/mnist: Worker: container "pytorch" asked for 4 nvidia.com/gpu; '
        "castslice gives it 1/2 of a GPU"
    )
    assert f"Warning: today: {named}\n" in table


BURSTING = DEPLOYMENT.split("---")[0].replace(
    "castops.io/workload-type: inference}",
    'castops.io/workload-type: inference, castops.io/gpu-memory-burst: "3"}',
)


def test_with_gpu_memory_limits_plan_counts_each_gpu_s_requests_and_says_the_bursts() -> None:
    argv = ("-f", "-", "--backend", "nvidia", "--gpu-memory", "143771Mi")
    done = run_plan(*argv, "-o", "json", stdin=BURSTING)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    table = run_plan(*argv, stdin=BURSTING).stdout

    # Six halves of an H200 on pools of 2: 71885 MiB requested each, two to a GPU (143770 of
    # its 143771 MiB); each may burst to 3/4 of the GPU, 107828 MiB.
    best = result["recommendation"]
    assert (best["name"], best["gpus"]) == ("nvidia pools 2", 3)
    assert best["gpuMemory"] == {
        "gpuMiB": 143771,
        "requestedMiB": 6 * 71885,
        "burstingPods": 6,
        "burstMiB": 6 * (107828 - 71885),
    }
    assert (
        "GPU memory: 431310 MiB requested in all, counted so that no GPU's requests pass its "
        "143771 MiB; 6 Pods may burst 215658 MiB beyond their requests in all, which no GPU "
        "reserves." in table
    )
    # Today's pools of 4 hold no half: whole GPUs, nothing requested of the driver.
    assert result["today"]["gpuMemory"]["requestedMiB"] == 0
