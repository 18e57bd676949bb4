"""Where the least fragmenting MIG placement puts an instance
(castslice/backends/mig/slot_fragmentation.py), against NVIDIA's sources: mig-parted
v0.15.0's `all-<profile>` counts, NVML's placements as go-nvml's A100 mock gives them and as
the H200 capture's `nvidia-smi mig -lgipp` prints them (tests/upstream/)."""

from __future__ import annotations

import re

import pytest

from castslice.backends.mig import layouts
from castslice.backends.mig.layouts import GpuState
from castslice.backends.mig.profiles import MODELS, GpuModel, Profile
from castslice.backends.mig.slot_fragmentation import (
    Host,
    Request,
    SlotFragmentation,
    apply,
    first_fit,
    gpu_fragmentation,
    room,
)
from tests.helpers import UPSTREAM, nvml_allows

A100 = MODELS["A100-80GB"]
H200 = MODELS["H200"]


def _profile(model: GpuModel, name: str) -> Profile:
    found = model.profile(name)
    assert found is not None
    return found


def _placed(model: GpuModel, *instances: tuple[str, int]) -> GpuState:
    """A GPU holding each named instance at the placement starting at the given slice."""
    state = GpuState()
    for name, start in instances:
        after = layouts.put(model, state, _profile(model, name), start)
        assert after is not None, (name, start)
        state = after
    return state


def _counts(state: GpuState) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in state.instances:
        counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.mark.parametrize("model", MODELS.values(), ids=list(MODELS))
def test_an_empty_gpu_has_room_for_as_many_of_a_profile_as_mig_parted_puts_on_one(
    model: GpuModel,
) -> None:
    for profile in model.profiles:
        assert room(model, GpuState(), profile) == profile.per_gpu, profile.name


def test_the_h200s_placements_are_the_ones_its_nvidia_smi_lists() -> None:
    text = (UPSTREAM / "h200-sxm-capture" / "nvidia-smi-mig.txt").read_text()
    ids = dict(re.findall(r"MIG (\d+g\.\d+gb)\s+(\d+)\s", text))
    listed = {
        id_: [int(start) for start in found.split(",")]
        for id_, found in re.findall(r"Profile ID\s+(\d+) Placements? ?: \{([\d,]+)\}", text)
    }
    for profile in H200.profiles:
        assert list(layouts.starts(H200, profile)) == listed[ids[profile.name]], profile.name


def test_a_slice_taken_where_a_profile_must_start_loses_that_profile_the_whole_gpu() -> None:
    four = _profile(A100, "4g.40gb")
    # A 4g.40gb only starts at slice 0: a 1g.10gb there leaves 7 free slices it cannot use.
    assert gpu_fragmentation(A100, _placed(A100, ("1g.10gb", 0)), four) == 7
    assert gpu_fragmentation(A100, _placed(A100, ("1g.10gb", 4)), four) == 3


def test_an_instance_goes_where_the_profiles_that_come_can_still_start() -> None:
    one, four = _profile(A100, "1g.10gb"), _profile(A100, "4g.40gb")
    typical = [(Request(one), Host(), 0.5), (Request(four), Host(), 0.5)]
    empty = (GpuState(),)
    move = SlotFragmentation(A100, typical).best(empty, Request(one))
    assert move is not None
    (after,) = apply(A100, empty, Request(one), move)
    assert layouts.add(A100, after, four) is not None
    assert nvml_allows(A100, _counts(after) | {"4g.40gb": 1})
    # First fit, NVML's first placement, loses the 4g.40gb.
    fitted = first_fit(A100, empty, Request(one))
    assert fitted is not None
    (blocked,) = apply(A100, empty, Request(one), fitted)
    assert layouts.add(A100, blocked, four) is None


@pytest.mark.parametrize("model", [A100, H200], ids=["A100-80GB", "H200"])
def test_a_second_half_gpu_instance_fills_a_half_taken_gpu_and_keeps_the_empty_one(
    model: GpuModel,
) -> None:
    half, full = model.profiles[-3], model.full()
    assert half.memory_slices * 2 == model.memory_total
    typical = [(Request(half), Host(), 0.5), (Request(full), Host(), 0.5)]
    gpus = (GpuState(), _placed(model, (half.name, 0)))
    move = SlotFragmentation(model, typical).best(gpus, Request(half))
    assert move is not None and move.gpus == (1,)
    after = apply(model, gpus, Request(half), move)
    assert _counts(after[1]) == {half.name: 2}
    assert layouts.add(model, after[0], full) is not None
    assert first_fit(model, gpus, Request(half)) == (0.0, (0,), (0,))


def test_a_whole_gpu_goes_to_the_node_that_could_not_take_a_two_gpu_pod_anyway() -> None:
    full = A100.full()
    typical = [(Request(full), Host(), 0.5), (Request(full, 2), Host(), 0.5)]
    rule = SlotFragmentation(A100, typical)
    both_free = (GpuState(), GpuState())
    one_free = (GpuState(), _placed(A100, (full.name, 0)))
    on_both_free = rule.best(both_free, Request(full))
    on_one_free = rule.best(one_free, Request(full))
    assert on_both_free is not None and on_one_free is not None
    assert on_one_free.growth < on_both_free.growth


def test_a_pod_without_gpus_goes_where_its_cpu_strands_no_gpu() -> None:
    full = A100.full()
    typical = [(Request(full), Host(8000, 0), 1.0)]
    rule = SlotFragmentation(A100, typical)
    pod = Host(4000, 0)
    free_gpu = rule.best((GpuState(),), None, Host(10000, 0), pod)
    full_gpus = rule.best((_placed(A100, (full.name, 0)),), None, Host(10000, 0), pod)
    assert free_gpu is not None and full_gpus is not None
    # 6 CPUs left cannot run the typical whole-GPU Pod: its GPU's 8 slices are lost.
    assert free_gpu.growth == 8
    assert full_gpus.growth == 0
