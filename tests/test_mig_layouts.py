"""How MIG instances lay out on a GPU (castslice/backends/mig/layouts.py), against NVIDIA's
own sources copied verbatim into tests/upstream/ (see tests/test_mig_profiles.py):

- NVML's GPU instance placements (`GpuInstancePlacements`) of go-nvml's A100 and A30 models
  at 2f9e261 (pkg/nvml/mock/gpus/a100.go, a30.go);
- mig-parted v0.15.0's `all-balanced` and `all-<profile>` layouts (config-default.yaml).

`nvml_allows` below decides from those sources alone whether one GPU can hold a set of
instances; `castslice plan`'s tests use it as the oracle for the layouts plan prints.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from castslice.backends.mig import layouts
from castslice.backends.mig.profiles import MODELS, GpuModel
from tests.helpers import (
    DEVICE_IDS,
    MIG_PARTED,
    PLACEMENT_MOCKS,
    mig_parted_filters,
    nvml_allows,
    nvml_placements,
)

NVML_MODELS = [MODELS[name] for name in PLACEMENT_MOCKS]


@pytest.mark.parametrize("model", NVML_MODELS, ids=[m.name for m in NVML_MODELS])
def test_each_profile_starts_where_nvml_places_it(model: GpuModel) -> None:
    for name, placed in nvml_placements(model).items():
        profile = model.profile(name)
        assert profile is not None
        assert layouts.starts(model, profile) == tuple(start for start, _ in placed), name
        assert {size for _, size in placed} == {profile.memory_slices}, name


@pytest.mark.parametrize("model", MODELS.values(), ids=list(MODELS))
def test_all_balanced_is_mig_parteds(model: GpuModel) -> None:
    device = DEVICE_IDS[model.name][0]
    assert dict(layouts.BALANCED[model.name]) == _balanced(device)


def _balanced(device: str) -> dict[str, int]:
    for entry in MIG_PARTED["mig-configs"]["all-balanced"]:
        if device in mig_parted_filters(entry):
            return {name: int(count) for name, count in entry["mig-devices"].items()}
    raise AssertionError(f"all-balanced names no {device}")


# Sets of instances on one A100-80GB, each decided by hand from NVIDIA's placements.
HAND = [
    ({"1g.10gb": 7}, True),
    ({"1g.10gb": 8}, False),  # 8 memory slices, but a 1g.10gb never starts at the eighth
    ({"3g.40gb": 2}, True),
    ({"3g.40gb": 2, "1g.10gb": 1}, False),  # both halves taken
    ({"4g.40gb": 1, "3g.40gb": 1}, True),
    ({"4g.40gb": 2}, False),  # a 4g.40gb only starts at 0
    ({"2g.20gb": 3, "1g.10gb": 1}, True),
    ({"2g.20gb": 3, "1g.20gb": 1}, True),
    ({"1g.20gb": 4}, True),
    ({"1g.20gb": 3, "1g.10gb": 2}, True),  # 1g.20gb at 0, 2, 6 and 1g.10gb at 4, 5
    ({"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, True),  # all-balanced
    ({"7g.80gb": 1, "1g.10gb": 1}, False),
]


@pytest.mark.parametrize(("instances", "allowed"), HAND, ids=[str(i) for i, _ in HAND])
def test_which_instances_one_gpu_holds(instances: dict[str, int], allowed: bool) -> None:
    model = MODELS["A100-80GB"]
    assert nvml_allows(model, instances) is allowed
    assert layouts.allowed(model, instances) is allowed


@pytest.mark.parametrize("model", MODELS.values(), ids=list(MODELS))
def test_mig_parteds_layouts_are_allowed(model: GpuModel) -> None:
    assert layouts.allowed(model, layouts.BALANCED[model.name])
    for profile in model.profiles:
        assert layouts.allowed(model, {profile.name: profile.per_gpu})
        assert not layouts.allowed(model, {profile.name: profile.per_gpu + 1})


@pytest.mark.parametrize(
    ("instances", "gpus"),
    [
        ({"1g.10gb": 7}, 1),
        ({"3g.40gb": 4}, 2),
        ({"4g.40gb": 1, "3g.40gb": 1}, 1),  # the 4g.40gb first, at 0; the 3g.40gb at 4
        ({"4g.40gb": 2, "3g.40gb": 2}, 2),
        ({"2g.20gb": 3, "1g.10gb": 1}, 1),
        ({"1g.20gb": 9}, 3),
        ({"3g.40gb": 1, "1g.20gb": 2}, 1),
    ],
)
def test_packing_hand_worked_mixes(instances: dict[str, int], gpus: int) -> None:
    packed = layouts.pack(MODELS["A100-80GB"], instances)
    assert sum(packed.values()) == gpus


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from([p.name for p in MODELS["A100-80GB"].profiles]),
                       st.integers(1, 30), min_size=1))  # fmt: skip
def test_every_packed_gpu_is_a_layout_nvml_allows_and_holds_every_instance(
    instances: dict[str, int],
) -> None:
    model = MODELS["A100-80GB"]
    packed = layouts.pack(model, instances)
    held: Counter[str] = Counter()
    for layout, gpus in packed.items():
        assert nvml_allows(model, Counter(layout)), layout
        for name in layout:
            held[name] += gpus
    assert held == Counter(instances)
    # No packing needs fewer GPUs than the memory slices or compute slices demand.
    memory = sum(model.profile(n).memory_slices * c for n, c in instances.items())  # type: ignore[union-attr]
    assert sum(packed.values()) >= math.ceil(memory / model.memory_total)


@pytest.mark.parametrize("model", NVML_MODELS, ids=[m.name for m in NVML_MODELS])
def test_an_instance_removed_frees_its_slices_for_the_next(model: GpuModel) -> None:
    """A Pod that leaves gives back its instance's placement (the departures replay of
    bench/packing/mig.py): every placement NVML lists, taken and given back."""
    for profile in model.profiles:
        for start in layouts.starts(model, profile):
            empty = layouts.GpuState()
            placed = layouts.put(model, empty, profile, start)
            assert placed is not None
            assert layouts.remove(placed, profile, start) == empty
    # The whole GPU's instance, given back, leaves room for the smallest again.
    empty = layouts.GpuState()
    big = max(model.profiles, key=lambda profile: profile.memory_slices)
    taken = layouts.put(model, empty, big, 0)
    assert taken is not None
    smallest = min(model.profiles, key=lambda profile: profile.memory_slices)
    assert layouts.put(model, taken, smallest, 0) is None
    assert layouts.put(model, layouts.remove(taken, big, 0), smallest, 0) is not None
    # Where no such instance is, there is nothing to give back.
    with pytest.raises(ValueError, match=rf"no {smallest.name} instance at slice 0"):
        layouts.remove(empty, smallest, 0)
    with pytest.raises(ValueError, match=rf"no {smallest.name} instance at slice 0"):
        layouts.remove(taken, smallest, 0)
