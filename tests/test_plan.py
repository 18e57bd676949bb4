"""`castslice plan`: its arithmetic against hand counts, its sources and its bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from castslice import cli
from castslice.environment import load_config
from castslice.inspect.gpus_needed import (
    Task,
    WorkloadError,
    estimate,
    no_sharing,
    plan,
    tasks_from_pod,
    tasks_from_trace,
)

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "bench" / "packing" / "data" / "openb_pod_list_default.csv"
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


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
    warnings = estimate(config, shares("0.1", "3"), "w").warnings
    assert len(warnings) == 2
    assert "1 opted-in task(s) ask for more than one GPU" in warnings[0]
    assert "1 task(s) need less than 1/2 of a GPU" in warnings[1]
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
    # GPUs the extender cannot see device by device.
    pools = replace(trace, recommended_claims_devices=False)
    assert pools.extender_advice == (
        False,
        "the scheduler extender scores GPUs shared as DRA devices; the recommended "
        "backend's GPUs are not tracked per device",
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
    result = plan(load_config({}), tasks)
    assert result.no_sharing.gpus == 7433
    # 3078 fractional tasks: 2101 GPUs at S=4 as the issue counted, 4355 for whole-GPU tasks.
    assert result.today.gpus == 2101 + 4355
    assert result.best.gpus == result.ideal == 6087
    # resource at S=100 needs as many GPUs, but splits the nodes into shared and plain ones.
    assert result.per_backend["resource"].gpus == 6087
    assert len(result.per_backend["resource"].pools) == 2
    assert result.best.name == "dra S=100"
    assert [pool.label for pool in result.best.pools] == ["shares of 100 and whole GPUs"]


def run(*argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "castslice", "plan", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )


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
    done = run("-f", "-", "-o", "json", stdin=DEPLOYMENT)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # Six inference Pods (2 of 4 slices: half a GPU each) and a Pod left with 2 GPUs.
    assert (result["tasks"], result["optedIn"]) == (7, 6)
    assert result["today"]["gpus"] == 3 + 2
    assert result["noSharing"]["gpus"] == 6 + 2


def test_yaml_table_and_plot_say_the_same(tmp_path: Path) -> None:
    chart = tmp_path / "plan.svg"
    as_yaml = yaml.safe_load(run("-f", "-", "-o", "yaml", stdin=DEPLOYMENT).stdout)
    table = run("-f", "-", "--plot", str(chart), stdin=DEPLOYMENT)
    assert table.returncode == 0, table.stderr
    assert f"Recommended: {as_yaml['recommended']} " in table.stdout
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
    done = run(*argv, stdin="apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {}\n")
    assert done.returncode == cli.EXIT_USAGE
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_today_is_the_configuration_the_flags_set() -> None:
    config = load_config({"CASTSLICE_BACKEND": "dra", "CASTSLICE_SLICES_PER_GPU": "10"})
    mix = shares("0.13", "0.13")
    assert plan(config, mix).today.gpus == estimate(replace(config), mix, "x").gpus == 1
