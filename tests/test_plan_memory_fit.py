"""GPU memory beside the share: with CASTSLICE_GPU_MEMORY each container that shares a GPU
requests its share of the setting's MiB, rounded down (castslice.contract.gpu_memory).
Shares that fit a GPU add up to at most one, and numbers rounded down add up to at most
their sum, so the requests on a GPU add up to at most the setting; with
CASTSLICE_GPU_MEMORY_ENFORCED_ONLY a Pod only runs where the GPU has at least that much. A
GPU-memory dimension then changes nothing a GPU holds beside the shares.

Shown on the openb trace's task lists (bench/packing/data/): every GPU state their shares
can reach, under every configuration `castslice plan` counts, on each GPU model the trace's
nodes name, with its memory as the FGD paper's simulator gives it
(tests/upstream/kubernetes-scheduler-simulator-c5d08f3-gpu-memory-mib.go.txt). Where the
setting is above a node's GPU (a mixed fleet set to its largest model) the memory binds,
and only the required node affinity keeps such Pods off that node."""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

from castslice.backends import placer_for
from castslice.backends.placer import DRIVER_MAJOR, GPU_MEMORY
from castslice.backends.tools import plans_for
from castslice.contract.gpu_memory import memory_cap
from castslice.environment import load_config
from castslice.inspect.plan import (
    candidate_configs,
    estimate,
    rescaled,
    slices_for,
    tasks_from_trace,
)
from castslice.settings.config import MEBIBYTE, Config

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "packing" / "data"
TABLE = ROOT / "tests" / "upstream" / "kubernetes-scheduler-simulator-c5d08f3-gpu-memory-mib.go.txt"
# The simulator's MapGpuTypeMemoryMiB: bytes / 1024 / 1024, as Go's integer division.
MODEL_MIB = {
    model: int(size) // 1024 // 1024
    for model, size in re.findall(r'"(\w+)":\s+int64\((\d+) / 1024 / 1024\)', TABLE.read_text())
}
FLEET = sorted(
    {row["model"] for row in csv.DictReader((DATA / "openb_node_list_gpu_node.csv").open())}
)
TASK_LISTS = sorted(DATA.glob("openb_pod_list_*.csv"))
# Every share of one GPU a task of the stored lists asks for.
SHARES = sorted(
    {
        task.gpus
        for path in TASK_LISTS
        for task in tasks_from_trace(path.read_text(), path.name)
        if task.opted_in
    }
)


def with_memory(config: Config, mebibytes: int) -> Config:
    return replace(config, gpu_memory=mebibytes * MEBIBYTE)


def placed_shares(config: Config, shares: Sequence[Fraction]) -> tuple[Fraction, ...]:
    """The share of a GPU each of `shares` is given and asks memory for under `config`:
    those that get part of a GPU with a GPU memory request."""
    backend = plans_for(config)
    given = set()
    for share in shares:
        placement = backend.place(slices_for(share, config.slices_per_gpu))
        if placement.memory_share is not None:
            given.add(placement.gpus)
    return tuple(sorted(given))


def fullest_gpu(given: Sequence[Fraction], mebibytes: int) -> int:
    """The most MiB the requests on one GPU add up to, over every set of Pods (any number
    of each share in `given`) whose shares fit it, on a setting of `mebibytes`."""
    unit = math.lcm(*(share.denominator for share in given))
    items = []
    for share in given:
        cap = memory_cap(share, mebibytes * MEBIBYTE)
        items.append((int(share * unit), cap.request if cap else 0))
    # most[c]: the most MiB requested by Pods whose shares add up to at most c / unit.
    most = [0] * (unit + 1)
    for room in range(1, unit + 1):
        most[room] = max(
            [most[room - 1]]
            + [most[room - weight] + request for weight, request in items if weight <= room]
        )
    return most[unit]


def sharing_configs() -> dict[tuple[Fraction, ...], list[str]]:
    """Each set of shares a configuration `castslice plan` counts gives the trace's tasks
    (GPU memory requests and all), with the configurations that give it, and the trace's
    own thousandths (`dra` at S = 1000)."""
    base = with_memory(load_config({"CASTSLICE_BACKEND": "dra"}), min(MODEL_MIB[m] for m in FLEET))
    found: dict[tuple[Fraction, ...], list[str]] = {}
    thousandths = rescaled(base, 1000)
    candidates = [
        (name, candidate.config)
        for name, candidate in candidate_configs(base)
        if candidate.layout is None
    ]
    for name, config in [*candidates, ("dra S=1000", thousandths)]:
        given = placed_shares(config, SHARES)
        if given:
            found.setdefault(given, []).append(name)
    return found


def test_the_trace_and_its_gpu_models_are_what_the_proof_covers() -> None:
    assert len(TASK_LISTS) == 14
    assert FLEET == ["A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32"]
    assert {model: MODEL_MIB[model] for model in FLEET} == {
        "A10": 22731,
        "G2": 20000,
        "G3": 30000,
        "P100": 16280,
        "T4": 15109,
        "V100M16": 16160,
        "V100M32": 32510,
    }
    # Twenty kinds of share, 0.05 to 0.81 of a GPU.
    assert (len(SHARES), SHARES[0], SHARES[-1]) == (20, Fraction(1, 20), Fraction(81, 100))


def test_on_the_openb_trace_gpu_memory_requests_never_bind_beside_the_shares() -> None:
    configs = sharing_configs()
    # Every backend that shares GPUs without MIG is among them.
    backends = {name.split()[0] for names in configs.values() for name in names}
    assert backends == {"nvidia", "gke", "resource", "dra"}
    smallest = min(MODEL_MIB[model] for model in FLEET)
    for given, names in configs.items():
        for model in FLEET:
            gpu = MODEL_MIB[model]
            # A pool of one model set to its memory, and a mixed fleet set to its smallest.
            for setting in {gpu, smallest}:
                fullest = fullest_gpu(given, setting)
                assert 0 < fullest <= setting <= gpu, (names, model, setting, fullest)


def test_on_the_trace_s_thousandths_a_full_gpu_is_requested_to_within_a_mib_a_pod() -> None:
    for model in FLEET:
        gpu = MODEL_MIB[model]

        left = gpu - fullest_gpu(SHARES, gpu)

        # Rounding down loses less than a MiB a Pod, and no more than 1 / 0.05 = 20 Pods of
        # the trace fit one GPU: the memory is all but fully asked for, never beyond.
        assert 0 <= left < 1 / SHARES[0], (model, left)


def test_plan_counts_no_more_gpus_for_the_trace_with_memory_requests() -> None:
    (default,) = [path for path in TASK_LISTS if path.name == "openb_pod_list_default.csv"]
    tasks = tasks_from_trace(default.read_text(), default.name)
    base = load_config({"CASTSLICE_BACKEND": "dra", "CASTSLICE_SLICES_PER_GPU": "100"})

    without = estimate(base, tasks, "dra S=100")
    counted = estimate(with_memory(base, MODEL_MIB["T4"]), tasks, "dra S=100")

    assert counted.memory is not None and counted.memory.requested > 0
    assert counted.gpus == without.gpus


def test_a_setting_above_a_node_s_gpu_binds_and_only_the_node_affinity_keeps_pods_off() -> None:
    largest = MODEL_MIB["V100M32"]
    hundredths = load_config({"CASTSLICE_BACKEND": "dra", "CASTSLICE_SLICES_PER_GPU": "100"})
    config = with_memory(hundredths, largest)
    given = placed_shares(config, SHARES)

    # On a T4, shares that fit it request more memory than it has: one Pod of 0.81 alone.
    assert fullest_gpu(given, largest) > MODEL_MIB["T4"]
    assert memory_cap(Fraction(81, 100), largest * MEBIBYTE).request > MODEL_MIB["T4"]

    placer = placer_for(config)
    placement_slices = slices_for(Fraction(81, 100), config.slices_per_gpu)
    placement = placer.place(placement_slices)
    t4 = {DRIVER_MAJOR: "615", GPU_MEMORY: str(MODEL_MIB["T4"])}
    v100 = {DRIVER_MAJOR: "615", GPU_MEMORY: str(largest)}
    assert not placer.serves(t4, placement)
    assert placer.serves(v100, placement)

    anywhere = placer_for(replace(config, gpu_memory_enforced_only=False))
    assert anywhere.serves(t4, anywhere.place(placement_slices))
