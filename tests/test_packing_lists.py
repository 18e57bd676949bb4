"""The FGD artefact's task lists and its published results on them, as the packing
benchmark stores and replays them (bench/packing/data/README.md)."""

from __future__ import annotations

import csv
import json
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

from bench.packing import offline, report
from bench.packing.trace import (
    ARRIVAL,
    LISTS,
    TASKS_CSV,
    TraceTask,
    read_nodes,
    read_tasks,
    sample_nodes,
    task_list,
    workload,
)

KEPT_ASIDE = ("gpushare60", "gpushare80", "gpuspec33")


def test_fourteen_lists_are_stored_and_none_of_those_kept_aside() -> None:
    assert len(LISTS) == 14 and task_list("default") == TASKS_CSV
    stored = {path.name for path in TASKS_CSV.parent.glob("openb_pod_list_*.csv")}
    assert stored == {task_list(name).name for name in LISTS}
    for name in KEPT_ASIDE:
        with pytest.raises(ValueError, match=f"task list '{name}': one of default, "):
            task_list(name)


def _gpu_tasks(name: str) -> list[bool]:
    """Per GPU task of the list: whether it names GPU models."""
    return [bool(task.gpu_spec) for task in read_tasks(task_list(name)) if task.num_gpu]


@pytest.mark.parametrize(("name", "percent"), [("gpuspec10", 10), ("gpuspec20", 20),
                                               ("gpuspec25", 25)])  # fmt: skip
def test_a_gpuspec_list_pins_its_share_of_the_gpu_tasks_to_models(name: str, percent: int) -> None:
    pinned = _gpu_tasks(name)
    assert abs(sum(pinned) / len(pinned) - percent / 100) < 0.01
    assert not any(_gpu_tasks("default"))
    # The same tasks as the trace otherwise: only the models differ.
    strip = [(t.name, t.cpu_milli, t.memory_mib, t.num_gpu, t.gpu_milli)
             for t in read_tasks(task_list(name))]  # fmt: skip
    assert strip == [(t.name, t.cpu_milli, t.memory_mib, t.num_gpu, t.gpu_milli)
                     for t in read_tasks()]  # fmt: skip


@pytest.mark.parametrize(("name", "percent"), [("cpu050", 5), ("cpu100", 10), ("cpu200", 20),
                                               ("cpu250", 25)])  # fmt: skip
def test_a_cpu_list_has_its_share_of_tasks_without_gpus(name: str, percent: int) -> None:
    tasks = read_tasks(task_list(name))
    assert abs(sum(not task.num_gpu for task in tasks) / len(tasks) - percent / 100) < 0.005
    assert len({task.name for task in tasks}) == len(tasks)


def test_the_artefact_s_results_are_ten_seeds_of_fgd_and_best_fit_on_each_list() -> None:
    results = report.list_results()
    assert set(results) == {(name, policy) for name in LISTS for policy in ("FGD", "Best-fit")}
    assert all(sorted(seeds) == list(range(42, 52)) for seeds in results.values())
    # The default list's rows are those of the paper's file, seed for seed.
    assert results["default", "FGD"] == report.paper_seeds()["FGD"]
    assert results["default", "Best-fit"] == report.paper_seeds()["Best-fit"]
    with report.LISTS_PAPER.open(newline="") as file:
        assert {row["tune"] for row in csv.DictReader(file)} == {"1.3"}


def test_the_artefact_order_draws_from_the_list_it_is_given() -> None:
    source = task_list("gpuspec25")
    tasks = read_tasks(source)
    gpus = sum(node.gpus for node in sample_nodes(read_nodes(), 5))
    drawn = workload(tasks, gpus, 42, "artefact", source)
    assert sum((task.demand for task in drawn), Fraction(0)) <= ARRIVAL * gpus
    assert set(drawn) <= set(tasks) and len(set(drawn)) == len(drawn)
    # The same names as the default list's draw (the lists differ in models only), the
    # variant's tasks.
    default = workload(read_tasks(), gpus, 42, "artefact")
    assert [task.name for task in drawn] == [task.name for task in default]
    assert any(task.gpu_spec for task in drawn)
    with pytest.raises(ValueError, match="whole trace file"):
        workload(tasks, gpus, 42, "artefact")


def test_the_offline_harness_records_each_seed_of_a_list(tmp_path: Path) -> None:
    record = tmp_path / "lists.jsonl"
    arguments = ["--list", "gpuspec25", "--every", "40", "--seeds", "42,43", "--order",
                 "artefact", "--policies", "extender,fgd", "--record", str(record)]  # fmt: skip
    assert offline.main(arguments) == 0
    assert offline.main(arguments) == 0
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert Counter((line["seed"], line["policy"]) for line in lines) == {
        (42, "extender"): 2, (43, "extender"): 2, (42, "fgd"): 2, (43, "fgd"): 2,
    }  # fmt: skip
    # The nodes named as the artefact's simulator names them in each seed's run.
    assert {(line["list"], line["order"], line["every"], line["names"]) for line in lines} == {
        ("gpuspec25", "artefact", 40, "artefact")
    }
    assert all(0 < line["at_100"] <= line["at_130"] <= 100 for line in lines)
    # Read as the artefact reads its runs too, to the hundredth.
    assert all(
        0 < line["artefact_figures"][0] <= line["artefact_figures"][1] <= 100 for line in lines
    )
    # The code each ran: this checkout's commit (none where it is no git checkout).
    assert {line["commit"] for line in lines} == {offline.head_commit()}
    # A run is its seed's: the same figures again.
    assert lines[:4] == lines[4:]
    # Unless asked to keep the trace's names.
    assert offline.main([*arguments, "--trace-names"]) == 0
    kept = [json.loads(line) for line in record.read_text().splitlines()][8:]
    assert [line["names"] for line in kept] == ["trace"] * 4
    # Ties went to other nodes: other figures (seed 42, FGD: 89.52 % at 100 % on the trace's
    # names, 90.12 % on the simulator's).
    assert [line["at_100"] for line in kept] != [line["at_100"] for line in lines[:4]]


def _tasks(*milli: int) -> list[TraceTask]:
    return [TraceTask(f"t{index}", 1000, 0, 1, each, ()) for index, each in enumerate(milli)]


def test_a_run_is_read_as_the_artefact_reads_its_own() -> None:
    """Ten GPUs: 99 % arrives placed, then sixteen tasks of 0.1 % each, the last six (from
    100.1 % arrived) Pending."""
    tasks = _tasks(*[100] * 99, *[10] * 16)
    nodes = ["n"] * 99 + ["n"] * 10 + [""] * 6
    at_100, at_130 = offline.artefact_reading(tasks, nodes, 10)
    # The tasks whose arrival rounds to 100 %: 99.5 (to even) to 100.5 (to even), eleven;
    # placed 99.5 ... 100.0, then 100.0 five times: their mean to the hundredth.
    assert at_100 == round((99.5 + 99.6 + 99.7 + 99.8 + 99.9 + 100.0 + 5 * 100.0) / 11, 2)
    assert at_100 == 99.86
    # No task arrives near 130 %: no figure, as the artefact gives none.
    assert at_130 is None
    # Where no arrival rounds to the point, those within 1 % count: nine whole GPUs placed
    # of twelve, then 0.8 GPU placed (arrival 128 %, placed 98 %), then 0.06 (128.6 %, which
    # rounds to 129, placed 98.6 %).
    tasks = _tasks(*[1000] * 12, *[100] * 8, 60)
    at_100, at_130 = offline.artefact_reading(tasks, ["n"] * 9 + [""] * 3 + ["n"] * 9, 10)
    assert at_100 == 90.0
    assert at_130 == 98.6


def _record(seed: int, at_100: float, at_130: float, **changed: object) -> dict[str, object]:
    plain = {"list": "gpuspec20", "order": "artefact", "every": 1, "lag": 0, "jitter": 0,
             "batches": False, "names": "artefact", "seed": seed, "policy": "extender"}  # fmt: skip
    return {**plain, "at_100": at_100, "at_130": at_130, **changed}


def test_the_lists_table_sets_the_extender_beside_fgd_and_best_fit_on_its_seeds() -> None:
    records = [
        _record(42, 90.0, 95.0),
        # Run again: the latest counts.
        _record(42, 94.63, 95.01),
        # Not the whole cluster, not the extender, not the paper's order: not in the table.
        _record(43, 50.0, 50.0, every=4),
        _record(43, 50.0, 50.0, policy="fgd"),
        _record(43, 50.0, 50.0, order="shuffled"),
        # The nodes named as the trace names them, not as the paper's runs did: not either.
        _record(43, 50.0, 50.0, names="trace"),
        {key: value for key, value in _record(43, 50.0, 50.0).items() if key != "names"},
        _record(44, 95.0, 95.5, list="default"),
    ]
    lines = report.lists_table(records)
    assert lines[2:] == [
        # The artefact's seed 44 on the default list: FGD 95.29 / 95.44, Best-fit 92.89 / 93.09.
        "| default | 44 | **95.00%** | 95.29% | 92.89% | **95.50%** | 95.44% | 93.09% "
        "| -0.29 / +0.06 | 0 / 1 of 1 |",
        # Seed 42 of gpuspec20: FGD 94.59 / 94.76, Best-fit 88.38 / 93.26.
        "| gpuspec20 | 42 | **94.63%** | 94.59% | 88.38% | **95.01%** | 94.76% | 93.26% "
        "| +0.04 / +0.25 | 1 / 1 of 1 |",
        lines[-1],
    ]
    # Over both lists' seeds: behind FGD on one at 100 %, ahead on both at 130 %.
    assert lines[-1].endswith("| 1 / 2 of 2 |")
    # The lists' means, each list counted once whatever its seeds: the extender's, FGD's and
    # Best-fit's at 100 % and at 130 % by hand.
    cells = [cell.strip("* %") for cell in lines[-1].split("|")[1:-1]]
    assert cells[:2] == ["mean of 2", ""]
    expected = [94.815, 94.94, 90.635, 95.255, 95.10, 93.175]
    assert all(
        abs(float(cell) - want) < 0.006 for cell, want in zip(cells[2:8], expected, strict=True)
    )
    svg = report.lists_plot(records)
    assert svg.count("<circle") == 2 * 2 + 2 and svg.count("<rect") == 2 * 2 + 2 + 1


def test_the_tables_read_each_run_as_the_artefact_reads_its_own_where_recorded() -> None:
    records = [
        _record(42, 94.63, 95.01, artefact_figures=[94.59, 95.0]),
        # No figure near a point, or a record from before the reading was recorded: the
        # allocation when the arrivals crossed 100 % and at the end.
        _record(43, 94.0, 94.5, artefact_figures=[None, 94.4]),
        _record(44, 93.0, 93.5),
    ]

    def in_points(reading: report.Reading) -> dict[int, tuple[float, float]]:
        runs = report.list_runs(records, reading=reading)["gpuspec20"]
        return {seed: (round(a * 100, 4), round(b * 100, 4)) for seed, (a, b) in runs.items()}

    assert in_points("artefact") == {42: (94.59, 95.0), 43: (94.0, 94.5), 44: (93.0, 93.5)}
    assert in_points("crossing") == {42: (94.63, 95.01), 43: (94.0, 94.5), 44: (93.0, 93.5)}
    # The table sets the artefact's reading beside the paper's (seed 42: FGD 94.59 / 94.76).
    assert "| gpuspec20 | 42 | **94.59%** | 94.59% |" in report.lists_table(records[:1])[2]


def test_fgd_in_process_is_set_beside_the_extender_on_the_seeds_both_ran() -> None:
    records = [
        _record(42, 94.63, 95.01),
        _record(43, 94.00, 94.50),
        _record(42, 94.53, 95.11, policy="fgd"),
        # Only FGD in process: no seed to pair.
        _record(44, 94.00, 94.00, list="default", policy="fgd"),
    ]
    assert report.port_table(records)[2:] == [
        # Seed 42 of gpuspec20: the extender 0.10 ahead at 100 %, 0.10 behind at 130 %; the
        # port 0.06 below the paper's FGD (94.59) at 100 %, 0.35 above (94.76) at 130 %.
        "| gpuspec20 | 42 | 94.53% | 95.11% | +0.10 / -0.10 | 1 / 0 of 1 | -0.06 / +0.35 |"
    ]
    # Without FGD in process, the lists' section has no such table.
    assert report.port_table(records[:2]) == []
    assert "FGD in process" not in report.lists_section(records[:2])
    assert "FGD in process" in report.lists_section(records)


def test_fgd_in_process_read_as_the_paper_reads_places_what_the_paper_s_fgd_placed() -> None:
    """The recorded runs of this project's FGD port, read as the artefact reads its own,
    give the paper's figures on every seed to the hundredth: the port and the reading are
    the paper's. Read when the arrivals cross 100 %, twelve seeds of `gpuspec10` and
    `gpuspec25` differ by up to 0.11."""
    records = report.read(report.LISTS_RESULTS)
    published = report.list_results()
    read = report.list_runs(
        [record for record in records if "artefact_figures" in record], policy="fgd"
    )
    assert {"gpuspec10", "gpuspec25"} <= set(read)
    for name, runs in read.items():
        for seed, figures in runs.items():
            assert [round(value * 100, 2) for value in figures] == [
                round(value * 100, 2) for value in published[name, "FGD"][seed]
            ], (name, seed)
    crossing = report.list_runs(records, policy="fgd", reading="crossing")["gpuspec25"]
    assert round(crossing[50][0] * 100, 2) != round(published["gpuspec25", "FGD"][50][0] * 100, 2)


def test_the_difference_to_fgd_carries_its_seeds_standard_error_and_ties_to_the_hundredth() -> None:
    # Paired differences +0.04 and -0.06: a standard deviation of 0.0707, over the root of 2.
    assert report._error([0.04, -0.06]) == " ± 0.05"
    assert report._error([0.25, 0.03]) == " ± 0.11"
    assert report._error([0.25]) == ""
    # 94.586 against FGD's 94.59 rounds to it: a tie; 94.584 does not.
    assert report._at_or_above([94.586 - 94.59, 94.584 - 94.59, 0.2]) == 2


def test_the_docs_show_the_recorded_lists() -> None:
    """docs/performance.md's task-list table and plot are what `python -m bench.packing
    report` writes from bench/packing/results/offline_lists.jsonl."""
    records = report.read(report.LISTS_RESULTS)
    assert {"gpuspec10", "gpuspec20", "gpuspec25"} <= set(report.list_runs(records))
    doc = report.DOC.read_text()
    shown = doc.split(report.LISTS_BEGIN, 1)[1].split(report.LISTS_END, 1)[0]
    assert shown == f"\n{report.lists_section(records)}\n"
    assert (report.IMAGES / report.LISTS_PLOT).read_text() == report.lists_plot(records)
