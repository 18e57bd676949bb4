"""The packing benchmark's table and plots, written into docs/performance.md between markers.

The plots are SVG written here (no plotting library): allocation ratio against arrived
workload, one line per configuration (the mean over seeds), and the FGD paper's
results at 130 % arrival as reference lines.
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from .trace import BATCHES, LISTS

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "performance.md"
IMAGES = REPO / "docs" / "images"
BEGIN, END = "<!-- packing:begin -->", "<!-- packing:end -->"
# The task lists' table and plot: the extender in process (`offline --record`) beside the
# artefact's FGD and Best-fit on the same seeds.
LISTS_BEGIN, LISTS_END = "<!-- lists:begin -->", "<!-- lists:end -->"
LISTS_RESULTS = Path(__file__).parent / "results" / "offline_lists.jsonl"
LISTS_PLOT = "packing-lists.svg"
# The authors' published simulator results on the default trace, per seed (data/README.md).
PAPER = Path(__file__).parent / "data" / "fgd_artefact_allocation.csv"
# The paper's policies drawn and tabled, in its order.
PAPER_POLICIES = ("Random-fit", "Dot-product", "GPU Packing", "Best-fit", "FGD")


# The artefact's published results on each task list it runs, FGD and Best-fit (the same
# file's rows of the lists this repository stores, data/README.md).
LISTS_PAPER = Path(__file__).parent / "data" / "fgd_artefact_allocation_lists.csv"
_LIST_PREFIX = "openb_pod_list_"


def _seeds_by(path: Path, *columns: str) -> dict[Any, dict[int, tuple[float, float]]]:
    """The (at 100 %, at 130 %) allocation ratios by seed, under the row's `columns`."""
    found: dict[Any, dict[int, tuple[float, float]]] = defaultdict(dict)
    with path.open(newline="") as file:
        for row in csv.DictReader(file):
            pair = (float(row["allocation_at_100"]) / 100, float(row["allocation_at_130"]) / 100)
            key = tuple(row[column].removeprefix(_LIST_PREFIX) for column in columns)
            found[key[0] if len(key) == 1 else key][int(row["seed"])] = pair
    return dict(found)


def paper_seeds(path: Path = PAPER) -> dict[str, dict[int, tuple[float, float]]]:
    """Each policy's (at 100 %, at 130 %) allocation ratios by seed."""
    return _seeds_by(path, "policy")


def list_results(path: Path = LISTS_PAPER) -> dict[tuple[str, str], dict[int, tuple[float, float]]]:
    """Per (task list, policy), the (at 100 %, at 130 %) allocation ratios by seed."""
    return _seeds_by(path, "workload", "policy")


def paper_results(path: Path = PAPER) -> dict[str, list[tuple[float, float]]]:
    """Each policy's (at 100 %, at 130 %) allocation ratios, one pair per seed."""
    return {name: list(seeds.values()) for name, seeds in paper_seeds(path).items()}


# Each policy's mean at 130 % arrival over the seeds: the plots' reference lines.
ANCHORS = {
    name: statistics.fmean(at_130 for _, at_130 in paper_results()[name]) for name in PAPER_POLICIES
}
_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000",
)  # fmt: skip


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def at(record: dict[str, Any], arrival: float) -> tuple[float, int]:
    point = min(record["curve"], key=lambda item: abs(item[0] - arrival))
    return point[1], point[2]


def order(record: dict[str, Any]) -> str:
    """The tasks' order a replay used; replays recorded before orders were: arrival."""
    return str(record.get("order", "arrival"))


def creation(record: dict[str, Any]) -> str:
    """How a replay created its Pods; replays recorded before there was a choice: batches."""
    return str(record.get("creation", BATCHES))


def sequence(record: dict[str, Any]) -> str:
    """The order the tasks came in, as the tables name it: the tasks' order, and how the
    Pods were created where not in batches."""
    return order(record) + ("" if creation(record) == BATCHES else f", {creation(record)}")


def groups(
    records: Sequence[dict[str, Any]],
) -> dict[tuple[int, str, str, str], list[dict[str, Any]]]:
    """Replays by (every, profile, configuration, sequence), a seed replayed again counted
    once: its latest replay, which ran the code as it is (results are appended as they end)."""
    latest: dict[tuple[int, str, str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for record in records:
        if record.get("list", "default") != "default":
            continue  # another task list's replay: its own table
        key = (record["every"], record["profile"], record["configuration"], sequence(record))
        latest[key][record["seed"]] = record
    return {key: list(seeds.values()) for key, seeds in latest.items()}


def _spread(values: Sequence[float]) -> str:
    mean = statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.1%}"
    return f"{mean:.1%} ({min(values):.1%}–{max(values):.1%})"


def table(records: Sequence[dict[str, Any]], every: int) -> list[str]:
    lines = [
        "| configuration | profile | order | seeds | at 100 % | at 130 % "
        "| GPUs unallocated at 130 % | Pods Pending at 130 % | minutes per replay |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    chosen = {key: value for key, value in groups(records).items() if key[0] == every}
    ordered = sorted(chosen.items(), key=lambda item: -statistics.fmean(
        at(record, 1.3)[0] for record in item[1]
    ))  # fmt: skip
    for (_, profile, name, sequence), items in ordered:
        full = [at(record, 1.3) for record in items]
        gpus = items[0]["gpus"]
        lines.append(
            f"| {name} | {profile} | {sequence} | {len(items)} "
            f"| {_spread([at(record, 1.0)[0] for record in items])} "
            f"| {_spread([ratio for ratio, _ in full])} "
            f"| {statistics.fmean(gpus * (1 - ratio) for ratio, _ in full):.0f} of {gpus} "
            f"| {statistics.fmean(pending for _, pending in full):.0f} "
            f"| {statistics.fmean(record['seconds'] for record in items) / 60:.1f} |"
        )
    return lines


def plot(records: Sequence[dict[str, Any]], every: int, profile: str) -> str:
    """Allocation ratio against arrived workload, the mean curve per configuration."""
    width, height, left, bottom, right, top = 760, 440, 60, 50, 200, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    # Below half the cluster every configuration places all that arrives: not shown.
    x_min, x_max, y_min = 0.5, 1.3, 0.5

    def x(value: float) -> float:
        return left + (value - x_min) / (x_max - x_min) * plot_w

    def y(value: float) -> float:
        return top + (1 - (value - y_min) / (1 - y_min)) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{left}" y="18" font-size="14">GPU allocation ratio, scheduler profile '
        f"{profile} ({'the whole trace' if every == 1 else f'one trace node in {every}'})</text>",
    ]
    for tick in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
        parts.append(
            f'<line x1="{left}" y1="{y(tick):.1f}" x2="{left + plot_w}" y2="{y(tick):.1f}" '
            'stroke="#eee"/>'
            f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.0%}</text>'
        )
    for tick in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3):
        parts.append(
            f'<text x="{x(tick):.1f}" y="{top + plot_h + 18}" '
            f'text-anchor="middle">{tick:.0%}</text>'
        )
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{height - 10}" text-anchor="middle">arrived GPU '
        "demand, share of the cluster's GPUs</text>"
    )
    # Where every arrived task is placed: allocation equals arrival.
    parts.append(
        f'<line x1="{x(y_min):.1f}" y1="{y(y_min):.1f}" x2="{x(1):.1f}" y2="{y(1):.1f}" '
        'stroke="#bbb" stroke-dasharray="2 2"/>'
    )
    label_y = float("-inf")
    for name, value in sorted(ANCHORS.items(), key=lambda item: -item[1]):
        # Across the plot, labelled at its left where every curve is still below them; the
        # labels at least a line apart, downwards from the highest anchor's line.
        label_y = max(y(value) - 3, label_y + 11)
        parts.append(
            f'<line x1="{left}" y1="{y(value):.1f}" x2="{left + plot_w}" y2="{y(value):.1f}" '
            'stroke="#aaa" stroke-dasharray="5 3"/>'
            f'<text x="{left + 4}" y="{label_y:.1f}" fill="#555" font-size="10" '
            'stroke="white" stroke-width="3" paint-order="stroke">'
            f"FGD paper, {name}: {value:.1%}</text>"
        )
    chosen = {
        key[2] + ("" if key[3] == "arrival" else f", {key[3]}"): items
        for key, items in groups(records).items()
        if key[:2] == (every, profile)
    }
    legend = sorted(chosen, key=lambda name: -statistics.fmean(
        at(record, 1.3)[0] for record in chosen[name]
    ))  # fmt: skip
    for index, name in enumerate(legend):
        colour = _COLOURS[index % len(_COLOURS)]
        # Past the last colour, the colours come round again dashed.
        dashes = ' stroke-dasharray="6 3"' if index >= len(_COLOURS) else ""
        items = chosen[name]
        points = []
        for position in range(min(len(record["curve"]) for record in items)):
            arrived = statistics.fmean(record["curve"][position][0] for record in items)
            placed = statistics.fmean(record["curve"][position][1] for record in items)
            if arrived >= x_min:
                points.append(f"{x(arrived):.1f},{y(max(placed, y_min)):.1f}")
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dashes} '
            f'points="{" ".join(points)}"/>'
        )
        final = statistics.fmean(at(record, 1.3)[0] for record in items)
        parts.append(
            f'<line x1="{left + plot_w + 8}" y1="{top + index * 18 + 1}" '
            f'x2="{left + plot_w + 26}" y2="{top + index * 18 + 1}" stroke="{colour}" '
            f'stroke-width="3"{dashes}/><text x="{left + plot_w + 30}" y="{top + index * 18 + 5}">'
            f"{name} {final:.1%}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def paper_table(records: Sequence[dict[str, Any]], every: int) -> list[str]:
    """The replays in the paper's order (shuffled, with Python's draws or the artefact's own)
    beside the paper's policies: like for like."""
    rows = []
    # The artefact's draws are the paper's own workloads, seed for seed: FGD on just the seeds
    # replayed is the like-for-like figure, where their few seeds would sit in its spread.
    paper = paper_seeds()
    fgd = paper["FGD"]
    same_seeds: set[tuple[int, ...]] = set()
    for (scale, profile, name, _), items in groups(records).items():
        tasks = order(items[0])
        if scale == every and tasks in ("shuffled", "artefact"):
            draws = "the artefact's draws" if tasks == "artefact" else "Python's draws"
            made = "" if creation(items[0]) == BATCHES else f", Pods {creation(items[0])}"
            rows.append((
                f"{name}, {profile} profile (this replay, {draws}{made})",
                [at(record, 1.0)[0] for record in items],
                [at(record, 1.3)[0] for record in items],
            ))  # fmt: skip
            seeds = tuple(sorted(record["seed"] for record in items))
            if tasks == "artefact" and len(seeds) < len(fgd) and set(seeds) <= set(fgd):
                same_seeds.add(seeds)
    if not rows:
        return []
    for seeds in sorted(same_seeds):
        rows.append((
            f"FGD (the paper's simulator, the whole trace, seed{'s' if len(seeds) > 1 else ''} "
            f"{', '.join(map(str, seeds))})",
            [fgd[seed][0] for seed in seeds],
            [fgd[seed][1] for seed in seeds],
        ))  # fmt: skip
    for name, by_seed in paper.items():
        if name in PAPER_POLICIES:
            rows.append((
                f"{name} (the paper's simulator, the whole trace)",
                [at_100 for at_100, _ in by_seed.values()],
                [at_130 for _, at_130 in by_seed.values()],
            ))  # fmt: skip
    rows.sort(key=lambda row: -statistics.fmean(row[2]))
    lines = [
        "In the paper's order (tasks shuffled, then tuned), beside the paper's own results:",
        "",
        "| policy | seeds | at 100 % | at 130 % |",
        "|---|---|---|---|",
    ]
    for name, at_100, at_130 in rows:
        lines.append(f"| {name} | {len(at_130)} | {_spread(at_100)} | {_spread(at_130)} |")
    return [*lines, ""]


def cost_table(records: Sequence[dict[str, Any]], every: int) -> list[str]:
    """What scheduling cost in the replays that measured it: kube-scheduler's attempts that
    placed a Pod and its CPU, beside the extender's calls, time in them, CPU and memory."""
    rows = []
    for record in (record for items in groups(records).values() for record in items):
        scheduler, extender = record.get("scheduler") or {}, record.get("extender") or {}
        if record["every"] != every or not (scheduler or extender):
            continue
        calls = extender.get("calls") or 0
        rows.append(
            f"| {record['configuration']} | {record['profile']} | {sequence(record)} "
            f"| {record['seed']} "
            + (
                f"| {scheduler['attempts']:.0f} | {scheduler['attempt_mean'] * 1000:.0f} ms "
                f"| {scheduler['attempt_p99'] * 1000:.0f} ms | {scheduler['cpu_seconds']:.0f} s "
                f"| {scheduler['peak_rss'] / 2**20:.0f} MiB "
                if scheduler
                else "| | | | | "
            )
            + (
                f"| {calls} | {extender['seconds'] / calls * 1000:.1f} ms "
                f"| {extender['cpu_seconds']:.0f} s | {extender['peak_rss'] / 2**20:.0f} MiB |"
                if calls
                else "| | | | |"
            )
        )
    if not rows:
        return []
    return [
        "What scheduling cost (blank: not recorded by that replay):",
        "",
        "| configuration | profile | order | seed | Pods scheduled | attempt, mean | attempt, "
        "p99 | scheduler CPU | scheduler peak RSS | extender calls | per call | extender CPU "
        "| extender peak RSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text).strip("-")


def section(records: Sequence[dict[str, Any]]) -> tuple[str, dict[str, str]]:
    """The Markdown between the markers, and the SVG files it shows (name → text)."""
    images: dict[str, str] = {}
    lines: list[str] = []
    for every in sorted({record["every"] for record in records}):
        sample = [record for record in records if record["every"] == every]
        first = sample[0]
        scope = (
            "the whole trace" if every == 1 else f"one trace node in {every}"
        ) + f": {first['nodes']} nodes, {first['gpus']} GPUs"
        lines += ["", f"#### {scope[0].upper()}{scope[1:]}", "", *table(records, every), ""]
        lines += paper_table(records, every)
        if every == 1:
            lines += cost_table(records, every)
        for profile in sorted({record["profile"] for record in sample}):
            name = f"packing-{_slug(profile)}-every-{every}.svg"
            images[name] = plot(records, every, profile)
            lines.append(f"![allocation ratio, {profile} profile, {scope}](images/{name})")
            lines.append("")
    return "\n".join(lines), images


Reading = Literal["artefact", "crossing"]


def list_runs(
    records: Sequence[dict[str, Any]], policy: str = "extender", reading: Reading = "artefact"
) -> dict[str, dict[int, tuple[float, float]]]:
    """The figures of `policy` (the extender, or `fgd`: FGD in process) per task list and
    seed (as fractions), from the whole cluster in the artefact's order, its nodes named as
    its simulator names them, with nothing else changed; a seed run again: its latest run.
    Records from before the nodes were so named (no `names`) had the trace's names.

    `reading`: `artefact`, the figures as the paper reads its own runs
    (`offline.artefact_reading`), where the record carries them (older records carry only
    the other); `crossing`, the demand placed when the arrivals crossed 100 % and at the
    end."""
    found: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
    for record in records:
        settings = (record["order"], record["every"], record["lag"], record["jitter"])
        plain = (*settings, record.get("names", "trace")) == ("artefact", 1, 0, 0, "artefact")
        if plain and record["policy"] == policy and not record["batches"]:
            pair = (record["at_100"] / 100, record["at_130"] / 100)
            read = record.get("artefact_figures")
            if reading == "artefact" and read and None not in read:
                pair = (read[0] / 100, read[1] / 100)
            found[record["list"]][record["seed"]] = pair
    return {name: dict(sorted(found[name].items())) for name in LISTS if name in found}


def _seed_list(seeds: Sequence[int]) -> str:
    if list(seeds) == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def lists_table(records: Sequence[dict[str, Any]]) -> list[str]:
    """Per task list, the extender's means beside FGD's and Best-fit's on the same seeds;
    the difference to FGD with the standard error of its seeds' paired differences, and
    on how many seeds the extender places as much as FGD or more (to FGD's hundredths)."""
    published = list_results()
    lines = [
        "| task list | seeds | extender at 100 % | FGD | Best-fit | extender at 130 % | FGD "
        "| Best-fit | extender − FGD at 100 % / 130 % | seeds at or above FGD |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for name, runs in list_runs(records).items():
        seeds = list(runs)
        means = [
            statistics.fmean(by_seed[seed][point] for seed in seeds)
            for by_seed in (runs, published[name, "FGD"], published[name, "Best-fit"])
            for point in (0, 1)
        ]
        rows.append((name, _seed_list(seeds), means, _paired(runs, published[name, "FGD"], seeds)))
    if len(rows) > 1:
        columns = zip(*(means for _, _, means, _ in rows), strict=True)
        pooled = [
            [value for _, _, _, differences in rows for value in differences[point]]
            for point in (0, 1)
        ]
        mean = [statistics.fmean(column) for column in columns]
        rows.append((f"mean of {len(rows)}", "", mean, pooled))
    for name, seeds, (ours_100, ours_130, fgd_100, fgd_130, best_100, best_130), paired in rows:
        lines.append(
            f"| {name} | {seeds} | **{ours_100:.2%}** | {fgd_100:.2%} "
            f"| {best_100:.2%} | **{ours_130:.2%}** | {fgd_130:.2%} | {best_130:.2%} "
            f"| {(ours_100 - fgd_100) * 100:+.2f}{_error(paired[0])} / "
            f"{(ours_130 - fgd_130) * 100:+.2f}{_error(paired[1])} "
            f"| {_at_or_above(paired[0])} / {_at_or_above(paired[1])} of {len(paired[0])} |"
        )
    return lines


def _paired(
    ours: Mapping[int, tuple[float, float]],
    theirs: Mapping[int, tuple[float, float]],
    seeds: Sequence[int],
) -> list[list[float]]:
    """Per point (100 %, 130 %), each seed's difference in points, ours less theirs."""
    return [[(ours[seed][point] - theirs[seed][point]) * 100 for seed in seeds] for point in (0, 1)]


def port_table(records: Sequence[dict[str, Any]]) -> list[str]:
    """Per task list with FGD also placed in process (`offline --policies fgd`: this
    project's port of the simulator's policy, on the extender's draws and harness), its
    means, the extender less it on the same seeds, and it less the paper's FGD."""
    ours, port, published = list_runs(records), list_runs(records, "fgd"), list_results()
    lines = [
        "| task list | seeds | FGD in process at 100 % | at 130 % | extender − FGD in process "
        "at 100 % / 130 % | seeds at or above | FGD in process − the paper's FGD |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, runs in port.items():
        seeds = [seed for seed in runs if seed in ours.get(name, {})]
        if not seeds:
            continue
        against = _paired(ours[name], runs, seeds)
        behind = _paired(runs, published[name, "FGD"], seeds)
        lines.append(
            f"| {name} | {_seed_list(seeds)} "
            f"| {statistics.fmean(runs[seed][0] for seed in seeds):.2%} "
            f"| {statistics.fmean(runs[seed][1] for seed in seeds):.2%} "
            f"| {statistics.fmean(against[0]):+.2f}{_error(against[0])} / "
            f"{statistics.fmean(against[1]):+.2f}{_error(against[1])} "
            f"| {_at_or_above(against[0])} / {_at_or_above(against[1])} of {len(seeds)} "
            f"| {statistics.fmean(behind[0]):+.2f} / {statistics.fmean(behind[1]):+.2f} |"
        )
    return lines if len(lines) > 2 else []


def _error(differences: Sequence[float]) -> str:
    """± the standard error of the mean of paired differences (none for one seed)."""
    if len(differences) < 2:
        return ""
    return f" ± {statistics.stdev(differences) / math.sqrt(len(differences)):.2f}"


def _at_or_above(differences: Sequence[float]) -> int:
    # FGD's figures are published to the hundredth: a difference it rounds away is a tie.
    return sum(1 for difference in differences if difference > -0.005)


def _mark(shape: str, centre_x: float, centre_y: float, colour: str, filled: bool) -> str:
    """A circle or a square centred there, filled or hollow."""
    style = f'fill="{colour if filled else "white"}" stroke="{colour}" stroke-width="2"'
    if shape == "circle":
        return f'<circle cx="{centre_x:.1f}" cy="{centre_y:.1f}" r="5" {style}/>'
    return f'<rect x="{centre_x - 4:.1f}" y="{centre_y - 4:.1f}" width="8" height="8" {style}/>'


def lists_plot(records: Sequence[dict[str, Any]]) -> str:
    """Per task list, the extender's and Best-fit's mean less FGD's on the same seeds, in
    points, at 100 % and at 130 %."""
    published = list_results()
    runs = list_runs(records)
    width, left, top, row, right = 760, 110, 40, 22, 30
    height = top + row * len(runs) + 50
    low, high = -4.0, 1.0
    plot_w = width - left - right

    def x(value: float) -> float:
        return left + (min(max(value, low), high) - low) / (high - low) * plot_w

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{left}" y="18" font-size="14">Placed GPUs against the FGD paper\'s FGD on '
        "the same seeds, in points (beyond -4: at -4)</text>",
    ]
    bottom = top + row * len(runs)
    for tick in range(int(low), int(high) + 1):
        parts.append(
            f'<line x1="{x(tick):.1f}" y1="{top - 8}" x2="{x(tick):.1f}" y2="{bottom}" '
            f'stroke="{"#888" if tick == 0 else "#eee"}"/>'
            f'<text x="{x(tick):.1f}" y="{bottom + 16}" text-anchor="middle">{tick:+d}</text>'
        )
    marks = (
        ("extender at 100 %", "#1f77b4", "circle", 0, False),
        ("extender at 130 %", "#1f77b4", "circle", 1, True),
        ("Best-fit at 100 %", "#ff7f0e", "rect", 0, False),
        ("Best-fit at 130 %", "#ff7f0e", "rect", 1, True),
    )
    for index, (name, by_seed) in enumerate(runs.items()):
        middle = top + index * row + row / 2
        parts.append(f'<text x="{left - 8}" y="{middle + 4:.1f}" text-anchor="end">{name}</text>')
        fgd = published[name, "FGD"]
        for _, colour, shape, point, filled in marks:
            source = by_seed if shape == "circle" else published[name, "Best-fit"]
            gap = statistics.fmean(source[seed][point] - fgd[seed][point] for seed in by_seed)
            parts.append(_mark(shape, x(gap * 100), middle, colour, filled))
    for index, (name, colour, shape, _, filled) in enumerate(marks):
        at_x, at_y = left + index * 160, height - 12
        parts.append(_mark(shape, at_x, at_y - 4, colour, filled))
        parts.append(f'<text x="{at_x + 10}" y="{at_y}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def lists_section(records: Sequence[dict[str, Any]]) -> str:
    """The Markdown between the lists' markers."""
    beside = port_table(records)
    return "\n".join(
        [*lists_table(records), "", f"![the task lists](images/{LISTS_PLOT})"]
        + (["", *beside] if beside else [])
    )


def _between(doc: str, begin: str, end: str, text: str) -> str:
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{text}\n{end}{tail}"


def write(results: Path, lists: Path = LISTS_RESULTS) -> None:
    records = read(results)
    text, images = section(records)
    list_records = read(lists)
    images[LISTS_PLOT] = lists_plot(list_records)
    IMAGES.mkdir(exist_ok=True)
    for name, svg in images.items():
        (IMAGES / name).write_text(svg)
    doc = _between(DOC.read_text(), BEGIN, END, text)
    DOC.write_text(_between(doc, LISTS_BEGIN, LISTS_END, lists_section(list_records)))


# The departures replay (departures.py): its table and plot.
DEPARTURES_BEGIN, DEPARTURES_END = "<!-- departures:begin -->", "<!-- departures:end -->"
DEPARTURES_RESULTS = Path(__file__).parent / "results" / "departures.jsonl"
DEPARTURES_PLOT = "packing-departures.svg"
_DEPARTURE_POLICIES = {
    "default": "default profile",
    "most-allocated": "MostAllocated profile",
    "extender": "extender",
    "fgd": "FGD",
    "mig-first-fit": "MIG first fit",
    "mig-least-fragmenting": "MIG least fragmenting",
}
_DAY = 86400


def _duration(seconds: float | None) -> str:
    """Seconds as the largest unit that keeps them readable."""
    if seconds is None:
        return "never"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * _DAY:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / _DAY:.1f} d"


def _latest(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str, int, Any], dict[str, Any]]:
    """The last record of each (kind, policy, seed, bound)."""
    return {
        (record["kind"], record["policy"], record["seed"], record.get("bound_s")): record
        for record in records
    }


def departures_table(records: Sequence[dict[str, Any]]) -> list[str]:
    """Per policy, the replay on every node, then the fewest nodes for each bound."""
    lines = [
        "| policy | seed | nodes | GPUs | longest wait allowed | Pods that waited | median "
        "wait | p95 | longest | peak allocation | mean allocation | longest wait, a node fewer |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = list(_DEPARTURE_POLICIES)
    latest = sorted(
        _latest(records).values(),
        key=lambda r: (r["kind"] != "whole", r.get("bound_s") or 0, order.index(r["policy"]),
                       r["seed"]),
    )  # fmt: skip
    for record in latest:
        bound = "(every node)" if record["kind"] == "whole" else _duration(record["bound_s"])
        waited = record["waited"]
        # Not kept even on every node: the count is more than the cluster has, the waits
        # are those on every node.
        beyond = "more than " if record.get("kept") is False else ""
        lines.append(
            f"| {_DEPARTURE_POLICIES[record['policy']]} | {record['seed']} | "
            f"{beyond}{record['nodes']} | {beyond}{record['gpus']} | {bound} | "
            f"{waited} of {record['tasks']} | "
            f"{_duration(record['wait_median_s']) if waited else '-'} | "
            f"{_duration(record['wait_p95_s']) if waited else '-'} | "
            f"{_duration(record['wait_max_s']) if waited else '-'} | "
            f"{record['allocation_peak']:.2%} | {record['allocation_mean']:.2%} | "
            f"{_duration(record['one_fewer_max_wait_s']) if record['kind'] == 'fewest' else '-'} |"
        )
    return lines


def departures_plot(records: Sequence[dict[str, Any]], bound: int) -> str:
    """GPUs allocated over the trace's busy part on every node, per policy, and the GPUs
    each policy needs to keep every wait within `bound` seconds."""
    latest = _latest(records)
    wholes = [latest[key] for key in sorted(latest) if key[0] == "whole" and key[2] == 42]
    needs = [latest[key] for key in sorted(latest) if key[0] == "fewest" and key[3] == bound
             and key[2] == 42 and latest[key].get("kept") is not False]  # fmt: skip
    width, height, left, bottom, right, top = 760, 440, 60, 50, 250, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    first, last = wholes[0]["span_s"]
    # GPUs on a log scale: the trace's demand (tens) and the clusters (hundreds to thousands).
    high = 10 ** math.ceil(math.log10(max([record["gpus"] for record in needs] + [10])))

    def x(seconds: float) -> float:
        return left + (seconds - first) / (last - first) * plot_w

    def y(gpus: float) -> float:
        return top + (1 - math.log10(max(gpus, 1)) / math.log10(high)) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{left}" y="18" font-size="14">GPUs allocated, Pods leaving: the openb trace '
        f"in its own time ({wholes[0]['nodes']} nodes, {wholes[0]['gpus']} GPUs)</text>",
    ]
    tick = 1
    while tick <= high:
        parts.append(
            f'<line x1="{left}" y1="{y(tick):.1f}" x2="{left + plot_w}" y2="{y(tick):.1f}" '
            f'stroke="#eee"/><text x="{left - 6}" y="{y(tick) + 4:.1f}" '
            f'text-anchor="end">{tick}</text>'
        )
        tick *= 10
    for day in range(math.ceil(first / _DAY), math.floor(last / _DAY) + 1, 5):
        parts.append(
            f'<text x="{x(day * _DAY):.1f}" y="{top + plot_h + 18}" '
            f'text-anchor="middle">{day}</text>'
        )
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{height - 10}" text-anchor="middle">day of the '
        "trace (the highest allocation in each stretch of 1.6 hours)</text>"
    )
    dashes = ("", ' stroke-dasharray="6 3"', ' stroke-dasharray="2 3"')
    for index, record in enumerate(wholes):
        colour = _COLOURS[list(_DEPARTURE_POLICIES).index(record["policy"])]
        points = " ".join(
            f"{x(when):.1f},{y(ratio * record['gpus']):.1f}" for when, ratio in record["curve"]
        )
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dashes[index % 3]} '
            f'points="{points}"/>'
            f'<line x1="{left + plot_w + 8}" y1="{top + index * 18 + 1}" '
            f'x2="{left + plot_w + 26}" y2="{top + index * 18 + 1}" stroke="{colour}" '
            f'stroke-width="3"{dashes[index % 3]}/><text x="{left + plot_w + 30}" '
            f'y="{top + index * 18 + 5}">{_DEPARTURE_POLICIES[record["policy"]]}, every node</text>'
        )
    for index, record in enumerate(needs):
        colour = _COLOURS[list(_DEPARTURE_POLICIES).index(record["policy"])]
        row = top + (len(wholes) + 1 + index) * 18
        parts.append(
            f'<line x1="{left}" y1="{y(record["gpus"]):.1f}" x2="{left + plot_w}" '
            f'y2="{y(record["gpus"]):.1f}" stroke="{colour}" stroke-dasharray="8 4"/>'
            f'<text x="{left + plot_w + 8}" y="{row + 5}">{_DEPARTURE_POLICIES[record["policy"]]}'
            f" needs {record['gpus']} GPUs</text>"
        )
    parts.append(
        f'<text x="{left + plot_w + 8}" y="{top + (len(wholes) + 1 + len(needs)) * 18 + 5}" '
        f'fill="#555">(no Pod waiting over {_duration(bound)})</text>'
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _whole_list(record: dict[str, Any]) -> bool:
    return record.get("largest_gpus") is None


def departures_section(records: Sequence[dict[str, Any]]) -> str:
    """The Markdown between the departures' markers: the replays of the whole task list,
    its plot, then per limit those of the tasks asking at most that many GPUs
    (`--largest-gpus`)."""
    lines = [
        *departures_table([record for record in records if _whole_list(record)]),
        "",
        f"![GPUs allocated, Pods leaving](images/{DEPARTURES_PLOT})",
    ]
    for limit in sorted({record["largest_gpus"] for record in records if not _whole_list(record)}):
        kept = [record for record in records if record.get("largest_gpus") == limit]
        lines += ["", f"Only the tasks asking {limit} GPUs or fewer:", "", *departures_table(kept)]
    return "\n".join(lines)


def write_departures(results: Path = DEPARTURES_RESULTS, bound: int = 600) -> None:
    """The departures plot into docs/images and its tables into docs/performance.md."""
    records = read(results)
    IMAGES.mkdir(exist_ok=True)
    whole = [record for record in records if _whole_list(record)]
    (IMAGES / DEPARTURES_PLOT).write_text(departures_plot(whole, bound))
    text = departures_section(records)
    DOC.write_text(_between(DOC.read_text(), DEPARTURES_BEGIN, DEPARTURES_END, text))


GAP_RESULTS = REPO / "bench" / "packing" / "results" / "gap.jsonl"
GAP_BEGIN, GAP_END = "<!-- gap:begin -->", "<!-- gap:end -->"


def gap_table(records: Sequence[dict[str, Any]]) -> list[str]:
    """Per task list and seed (its latest record): the bound beside the extender at both
    points, and the GPUs it leaves free at the end by why they stay free."""
    latest = {(record["list"], record["seed"]): record for record in records}
    lines = [
        "| task list | seed | bound at 100 % | extender | bound at 130 % | extender "
        "| free at the end: no Pending task's model | CPU | memory | GPUs or shares |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = {name: place for place, name in enumerate(LISTS)}
    for name, seed in sorted(latest, key=lambda key: (order.get(key[0], len(order)), key[1])):
        record = latest[name, seed]
        free = record["left_free"]
        lines.append(
            f"| {name} | {seed} | {record['bound_100']:.2f}% | **{record['extender_100']:.2f}%** "
            f"| {record['bound_130']:.2f}% | **{record['extender_130']:.2f}%** "
            f"| {free['model']:.2f}% | {free['cpu']:.2f}% | {free['memory']:.2f}% "
            f"| {free['gpus']:.2f}% |"
        )
    return lines


def write_gap(results: Path = GAP_RESULTS) -> None:
    """The bound's table into docs/performance.md."""
    text = "\n".join(gap_table(read(results)))
    DOC.write_text(_between(DOC.read_text(), GAP_BEGIN, GAP_END, text))
