"""`castslice plan` for MIG: the GPUs each way of cutting them needs, against hand counts;
the fit rule the mig backend admits with; the S it recommends; what it prints, applied
through preview; and docs/backends.md's trade-offs table, which is plan's output."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from castslice.backends.mig.profiles import MODELS
from castslice.backends.tools import tools_for
from castslice.environment import load_config
from castslice.inspect.plan import Estimate, Task, estimate, plan, tasks_from_trace
from castslice.settings.config import Config
from tests.helpers import HEADER, TRACE, applied_as_printed, plan_in_process, run_plan

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "backends.md"
BEGIN = "<!-- castslice plan --trace openb -o markdown: begin -->"
END = "<!-- castslice plan --trace openb -o markdown: end -->"


def mig(**settings: str) -> Config:
    return load_config({"CASTSLICE_BACKEND": "mig", "CASTSLICE_SLICES_PER_GPU": "8", **settings})


def pods(count: int, share: str) -> list[Task]:
    return [Task(Fraction(share), True, f"pod-{share}")] * count


def cut(config: Config, tasks: list[Task]) -> dict[str, Estimate]:
    """Each way plan cuts the GPUs of `config`'s first model, counted for `tasks`."""
    layouts = tools_for(config).gpu_layouts() or ()
    return {layout.name: estimate(layout.config, tasks, layout.name, layout) for layout in layouts}


def test_seven_pods_at_an_eighth_fill_one_a100_80gb_cut_into_seven() -> None:
    counted = cut(mig(), pods(7, "1/8"))
    assert counted["mix"].gpus == 1
    assert [(pool.label, pool.gpus) for pool in counted["mix"].pools] == [("1g.10gb x7", 1)]
    assert counted["all-1g.10gb"].gpus == 1
    # all-balanced has two 1g.10gb a GPU; all-1g.20gb four 1g.20gb, each an eighth too many.
    assert counted["all-balanced"].gpus == 4
    assert counted["all-1g.20gb"].gpus == 2
    assert counted["all-7g.80gb"].gpus == 7
    assert counted["mix"].gets == (("1g.10gb: 9.62 GiB, 14 of 98 SMs", 7),)


def test_halves_take_two_3g_40gb_a_gpu_memory_first_and_a_4g_40gb_each_strict() -> None:
    memory = cut(mig(), pods(4, "1/2"))
    assert [(pool.label, pool.gpus) for pool in memory["mix"].pools] == [("3g.40gb x2", 2)]
    assert memory["all-3g.40gb"].gpus == 2
    assert memory["all-balanced"].gpus == 4  # one 3g.40gb a GPU
    # 1g.10gb holds no half: the Pods get whole GPUs.
    assert [(pool.label, pool.gpus) for pool in memory["all-1g.10gb"].pools] == [("whole GPUs", 4)]
    assert memory["mix"].gets == (("3g.40gb: 39.25 GiB, 42 of 98 SMs", 4),)
    strict = cut(mig(CASTSLICE_MIG_FIT="strict"), pods(4, "1/2"))
    assert strict["mix"].gpus == 4
    assert strict["mix"].gets == (("4g.40gb: 39.25 GiB, 56 of 98 SMs", 4),)
    # 3g.40gb's 3/7 of the compute holds no half: strict gives those nodes whole GPUs.
    assert [pool.label for pool in strict["all-3g.40gb"].pools] == ["whole GPUs"]


def test_memory_first_and_strict_differ_where_compute_is_short_and_agree_where_not() -> None:
    quarters = pods(8, "1/4")
    # Memory-first: 1g.20gb (1/4 of the memory), four a GPU; strict: 2g.20gb, three a GPU.
    assert cut(mig(), quarters)["mix"].gpus == 2
    assert cut(mig(CASTSLICE_MIG_FIT="strict"), quarters)["mix"].gpus == 3
    eighths = pods(14, "1/8")
    assert cut(mig(), eighths)["mix"].gpus == cut(mig(CASTSLICE_MIG_FIT="strict"), eighths)[
        "mix"
    ].gpus == 2  # fmt: skip
    # Strict: a half takes 4g.40gb and 3/8 takes 3g.40gb; NVIDIA places both on one GPU.
    mixed = cut(mig(CASTSLICE_MIG_FIT="strict"), pods(1, "1/2") + pods(1, "3/8"))["mix"]
    assert [(pool.label, pool.gpus) for pool in mixed.pools] == [("4g.40gb, 3g.40gb", 1)]


def test_where_a_node_offers_one_profile_each_gpu_is_cut_into_one() -> None:
    # The device plugin's single strategy and GKE's partitions: one profile a node.
    mix = pods(1, "1/2") + pods(2, "1/8")
    assert cut(mig(), mix)["mix"].gpus == 1  # 3g.40gb at 0, 1g.10gb at 4 and 5
    for stack in ("single", "gke"):
        counted = cut(mig(CASTSLICE_MIG_STACK=stack), mix)
        assert "all-balanced" not in counted
        assert [(pool.label, pool.gpus) for pool in counted["mix"].pools] == [
            ("all-1g.10gb", 1),
            ("all-3g.40gb", 1),
        ]
    (gke,) = cut(mig(CASTSLICE_MIG_STACK="gke"), mix)["mix"].notes
    assert gke == (
        "create GKE node pools of A100-80GB GPUs: 1 GPU with gpu-partition-size=1g.10gb; "
        "1 GPU with gpu-partition-size=3g.40gb"
    )


def test_each_backend_says_what_its_pods_are_guaranteed() -> None:
    halves = pods(4, "1/2")
    nvidia = load_config({"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_SHARING_DEGREES": "2"})
    mps = load_config(
        {
            "CASTSLICE_BACKEND": "nvidia",
            "CASTSLICE_SHARING_DEGREES": "2",
            "CASTSLICE_SHARING_STRATEGY": "mps",
        }
    )
    dra = load_config({"CASTSLICE_BACKEND": "dra"})
    assert estimate(nvidia, halves, "t").gets == (
        ("no compute or memory guaranteed (time-slicing)", 4),
    )
    assert estimate(mps, halves, "m").gets == (
        (
            "MPS client, at most 1/2 of the GPU's memory per process (enforced in software, "
            "not with MIG)",
            4,
        ),
    )
    assert estimate(dra, halves, "d").gets == (("no compute or memory guaranteed", 4),)
    assert estimate(mig(), halves, "g").gets == (("3g.40gb: 39.25 GiB, 42 of 98 SMs", 4),)


def test_plan_recommends_s_8_for_mig_the_coarsest_that_needs_the_fewest() -> None:
    # 0.1 of a GPU: an eighth at S=8 (1g.10gb, 7 a GPU), a quarter at S=4 (1g.20gb, 4 a GPU).
    mix = pods(14, "1/10") + pods(4, "1/2")
    result = plan(load_config({"CASTSLICE_BACKEND": "mig"}), mix, named_backend=True)
    counts = {
        item.settings["slicesPerGpu"]: item.gpus
        for item in result.candidates
        if item.settings.get("layout") == "mix"
    }
    # S=4: 3g.40gb x2 on 2 GPUs, 14 1g.20gb on 4; S=8, 10, 100: 14 1g.10gb on 2.
    assert counts == {4: 6, 8: 4, 10: 4, 100: 4}
    best = result.best
    assert best.name == "mig mix S=8" and best.gpus == 4
    assert result.today.gpus == 6
    assert best.environment == {
        "CASTSLICE_SLICES_PER_GPU": "8",
        "CASTSLICE_MIG_GPU_MODELS": "A100-80GB",
        "CASTSLICE_MIG_STACK": "mixed",
        "CASTSLICE_MIG_FIT": "memory",
        "CASTSLICE_MIG_WHOLE_GPU": "gpu",
        "CASTSLICE_PRESETS": "training=8,inference=4,batch=4,dev=2",
        "CASTSLICE_DEFAULT_SLICES": "2",
    }
    assert any(note.startswith("cut the 4 MIG GPUs (A100-80GB) as 2 x (") for note in best.notes)


def test_the_gpu_model_setting_chooses_the_profiles_plan_cuts() -> None:
    a30 = plan(load_config({"CASTSLICE_MIG_GPU_MODELS": "A30"}), pods(4, "1/4"))
    cut_a30 = {item.settings.get("layout") for item in a30.candidates} - {None}
    assert cut_a30 == {"mix", "all-balanced", "all-1g.6gb", "all-2g.12gb", "all-4g.24gb"}
    # A30's memory comes in quarters: four quarter Pods on one GPU cut into 1g.6gb.
    assert a30.per_backend["mig"].gpus == 1
    assert a30.per_backend["mig"].gets == (("1g.6gb: 5.81 GiB, 14 of 56 SMs", 4),)


def _opted_in_deployment(name: str, replicas: int, slice_ratio: int) -> str:
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata:
      labels: {{app: {name}}}
      annotations: {{castops.io/optimize: "true", castops.io/slice-ratio: "{slice_ratio}"}}
    spec:
      containers:
        - {{name: app, image: registry.invalid/app:1, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}
"""


MIG_WORKLOAD = "---\n".join(
    [
        _opted_in_deployment("notebooks", 9, 1),
        _opted_in_deployment("inference", 5, 4),
        _opted_in_deployment("tuning", 3, 3),
        """\
apiVersion: v1
kind: Pod
metadata: {name: trainer}
spec:
  containers:
    - {name: app, image: registry.invalid/app:1, resources: {limits: {nvidia.com/gpu: 2}}}
""",
    ]
)


@pytest.mark.parametrize(
    "today",
    [
        {"CASTSLICE_BACKEND": "mig", "CASTSLICE_SLICES_PER_GPU": "8"},
        {
            "CASTSLICE_BACKEND": "mig",
            "CASTSLICE_SLICES_PER_GPU": "8",
            "CASTSLICE_MIG_FIT": "strict",
        },
        {"CASTSLICE_BACKEND": "mig", "CASTSLICE_MIG_GPU_MODELS": "H100-80GB"},
        {"CASTSLICE_BACKEND": "mig", "CASTSLICE_SLICES_PER_GPU": "8", "CASTSLICE_MIG_STACK": "gke"},
        {
            "CASTSLICE_BACKEND": "mig",
            "CASTSLICE_SLICES_PER_GPU": "8",
            "CASTSLICE_MIG_STACK": "single",
        },
    ],
    ids=["memory-first", "strict", "h100-s4", "gke", "single"],
)
def test_every_mig_layout_plan_prints_applied_through_preview_gives_its_figure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, today: dict[str, str]
) -> None:
    result = json.loads(
        plan_in_process(
            monkeypatch, capsys, today, "plan", "-f", "-", "-o", "json", stdin=MIG_WORKLOAD
        )
    )
    shown = [item for item in result["candidates"] if "layout" in item["settings"]]
    assert {item["settings"]["layout"] for item in shown} >= {"mix", "all-3g.40gb"}
    for promised in shown:
        applied_as_printed(monkeypatch, capsys, today, promised, MIG_WORKLOAD)


def test_plan_with_the_mig_backend_prints_its_settings_and_why_that_s(tmp_path: Path) -> None:
    # 14 tasks at 0.1 of a GPU (an eighth at S=8, a quarter at today's S=4), 4 at a half.
    trace = tmp_path / "mix.csv"
    trace.write_text(HEADER + "a,1,1,1,100,\n" * 14 + "b,1,1,1,500,\n" * 4)
    done = run_plan("--trace", str(trace), "--backend", "mig")
    assert done.returncode == 0, done.stderr
    recommended = done.stdout.split("Recommended: ", 1)[1]
    assert recommended.startswith("mig mix S=8: ")
    for line in (
        "  CASTSLICE_SLICES_PER_GPU=8\n",
        "  CASTSLICE_MIG_GPU_MODELS=A100-80GB\n",
        "  CASTSLICE_MIG_FIT=memory\n",
    ):
        assert line in recommended
    (why,) = [line for line in done.stdout.splitlines() if line.startswith("Cutting GPUs (mig)")]
    # The way and S with the settings that give them.
    assert why == (
        "Cutting GPUs (mig): mig mix S=8 (CASTSLICE_SLICES_PER_GPU=8 "
        "CASTSLICE_MIG_GPU_MODELS=A100-80GB CASTSLICE_MIG_STACK=mixed CASTSLICE_MIG_FIT=memory "
        "CASTSLICE_MIG_WHOLE_GPU=gpu CASTSLICE_PRESETS=training=8,inference=4,batch=4,dev=2 "
        "CASTSLICE_DEFAULT_SLICES=2): 4 GPUs, the fewest of its ways and S; mix needs "
        "S=4: 6, S=8: 4, S=10: 4, S=100: 4 GPUs."
    )


def test_the_trade_offs_table_in_the_docs_is_what_plan_prints_for_the_trace(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    printed = plan_in_process(
        monkeypatch,
        capsys,
        {},
        "plan",
        "--trace",
        str(TRACE),
        "--mig-gpu-models",
        "A100-80GB",
        "-o",
        "markdown",
    )
    doc = DOC.read_text()
    assert doc.split(BEGIN, 1)[1].split(END, 1)[0] == f"\n{printed}"
    # The table holds every way of cutting the A100-80GB, MPS beside time-slicing, and DRA.
    for row in ("| mig mix S=8 |", "| mig all-balanced S=8 |", "(mps) |", "| dra S=100"):
        assert row in printed
    counted = plan(load_config({}), tasks_from_trace(TRACE.read_text()))
    mix = next(item for item in counted.candidates if item.name == "mig mix S=8")
    assert f"| mig mix S=8 | {mix.gpus} |" in printed
    # As the docs say, the mix packs the trace's instances onto as few GPUs as their memory
    # slices (eighths) allow.
    a100 = MODELS["A100-80GB"]
    cut_pools = [pool for pool in mix.pools if pool.instances]
    eighths = sum(
        a100.profile(name).memory_slices * count * pool.gpus  # type: ignore[union-attr]
        for pool in cut_pools
        for name, count in pool.instances
    )
    assert sum(pool.gpus for pool in cut_pools) == -(-eighths // 8) == 2198


def test_plan_counts_on_the_first_model_and_keeps_every_model_in_the_settings() -> None:
    both = load_config(
        {"CASTSLICE_BACKEND": "mig", "CASTSLICE_MIG_GPU_MODELS": "A100-80GB,H100-80GB"}
    )
    best = plan(both, pods(14, "1/10"), named_backend=True).best
    assert best.environment["CASTSLICE_MIG_GPU_MODELS"] == "A100-80GB,H100-80GB"
    assert best.gpus == 2
    assert any("MIG GPUs (A100-80GB)" in note for note in best.notes)


def test_the_scheduler_extender_is_not_advised_for_mig_devices() -> None:
    # Its DRA stack claims devices, but whole MIG instances leave no shares to fragment.
    config = load_config({"CASTSLICE_BACKEND": "mig", "CASTSLICE_MIG_STACK": "dra"})
    result = plan(config, pods(14, "1/10") + pods(4, "1/2"), named_backend=True)
    assert result.best.settings["backend"] == "mig"
    assert not result.recommended_claims_devices
    assert result.extender_advice[0] is False


def test_plan_compares_every_way_of_cutting_when_today_offers_a_few_profiles() -> None:
    """Quarters on A100-80GBs whose settings offer 1g.10gb and 3g.40gb get a 3g.40gb each,
    two a GPU: 6 GPUs. Cut into 1g.20gb, four a GPU, they need 3: plan says so, with the
    profiles to offer, and those settings give its figure."""
    today = mig(CASTSLICE_MIG_PROFILES="1g.10gb,3g.40gb")
    quarters = pods(12, "1/4")
    result = plan(today, quarters, named_backend=True)
    assert result.today.gpus == 6
    assert result.best.name == "mig mix S=8" and result.best.gpus == 3
    every = "1g.10gb,1g.20gb,2g.20gb,3g.40gb,4g.40gb,7g.80gb"
    assert result.best.environment["CASTSLICE_MIG_PROFILES"] == every
    environment = {
        "CASTSLICE_BACKEND": "mig",
        "CASTSLICE_SLICES_PER_GPU": "8",
        "CASTSLICE_MIG_PROFILES": "1g.10gb,3g.40gb",
        **result.best.environment,
    }
    assert plan(load_config(environment), quarters, named_backend=True).today.gpus == 3
    # Today's own profiles are counted first (how today's nodes are), beside every way.
    counted = cut(today, quarters)
    assert list(counted)[:3] == ["mix of 1g.10gb,3g.40gb", "mix", "all-balanced"]
    assert counted["mix of 1g.10gb,3g.40gb"].gpus == 6 and counted["all-1g.20gb"].gpus == 3


def test_keeping_todays_mig_settings_says_how_the_gpus_are_cut() -> None:
    from castslice.cli.plan import summary

    result = plan(mig(), pods(7, "1/8"), named_backend=True)
    assert result.keep
    lines = summary(result)
    kept = next(i for i, line in enumerate(lines) if line.startswith("Recommended: keep"))
    # The line after the recommendation: the layout today's count assumes.
    assert lines[kept + 1] == (
        "  with cut the 1 MIG GPU (A100-80GB) as 1 x (1g.10gb x7): a mig-parted config of your "
        "own where a layout is not all-balanced or all-<profile>, set by nvidia.com/mig.config "
        "on each node"
    )
    (why,) = [line for line in lines if line.startswith("Cutting GPUs (mig)")]
    assert why == (
        "Cutting GPUs (mig): mig mix S=8 (CASTSLICE_MIG_GPU_MODELS=A100-80GB "
        "CASTSLICE_MIG_STACK=mixed CASTSLICE_MIG_FIT=memory CASTSLICE_MIG_WHOLE_GPU=gpu): 1 GPU, "
        "the fewest of its ways and S; mix needs S=4: 2, S=8: 1, S=10: 2, S=100: 2 GPUs."
    )
