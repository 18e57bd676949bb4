"""GPU memory requests and limits: the MiB a share is worth, and the env that asks for it,
applied to the container and compared whole."""

from __future__ import annotations

import copy
from fractions import Fraction

import jsonpatch
import pytest

from castslice.contract.gpu_memory import (
    LIMIT_ENV,
    REQUEST_ENV,
    MemoryCap,
    memory_cap,
    memory_env_operations,
)

MIB = 2**20
# GPU memory in MiB as nvidia-smi's memory.total and GPU Feature Discovery's
# nvidia.com/gpu.memory give it: an H200 SXM read on driver 580.159.04 (150754820096 bytes
# from NVML), an L4.
H200 = 143771 * MIB
L4 = 23034 * MIB


@pytest.mark.parametrize(
    ("share", "memory", "expected"),
    [
        # A quarter of an H200 (143771 MiB): 35942.75, rounded down.
        (Fraction(1, 4), H200, MemoryCap(35942, 35942)),
        (Fraction(1, 2), H200, MemoryCap(71885, 71885)),
        (Fraction(1, 3), L4, MemoryCap(7678, 7678)),
        (Fraction(3, 4), L4, MemoryCap(17275, 17275)),
    ],
)
def test_a_share_is_its_part_of_the_gpu_rounded_down(
    share: Fraction, memory: int, expected: MemoryCap
) -> None:
    assert memory_cap(share, memory) == expected


@pytest.mark.parametrize("degree", [2, 3, 4, 7, 8, 48])
@pytest.mark.parametrize("memory", [H200, L4, 16384 * MIB, 81559 * MIB])
def test_the_requests_of_one_gpus_clients_never_add_up_to_more_than_it_has(
    degree: int, memory: int
) -> None:
    cap = memory_cap(Fraction(1, degree), memory)
    assert cap is not None
    assert cap.request * degree <= memory // MIB
    # ... and leave less than one MiB per client unused.
    assert memory // MIB - cap.request * degree < degree


@pytest.mark.parametrize("share", [Fraction(1), Fraction(2), Fraction(5, 4), Fraction(0)])
def test_whole_gpus_and_no_gpu_get_no_cap(share: Fraction) -> None:
    assert memory_cap(share, H200) is None


def test_a_share_below_one_mib_gets_no_cap() -> None:
    # A 0 MiB limit would let the container allocate nothing at all.
    assert memory_cap(Fraction(1, 1000), 512 * MIB) is None


@pytest.mark.parametrize(
    ("burst", "limit"),
    [
        # Half the GPU at most, a quarter guaranteed.
        (Fraction(1, 2), 71885),
        # Never beyond the whole GPU.
        (Fraction(3), 143771),
        (Fraction(1), 143771),
        # A burst below the share takes nothing away from it.
        (Fraction(1, 8), 35942),
    ],
)
def test_a_burst_raises_the_limit_not_the_request(burst: Fraction, limit: int) -> None:
    assert memory_cap(Fraction(1, 4), H200, burst) == MemoryCap(35942, limit)


def test_the_statement_names_both_numbers() -> None:
    assert MemoryCap(35942, 71885).statement() == (
        "memory limited to 71885 MiB by the driver (35942 MiB guaranteed)"
    )


CAP = MemoryCap(35942, 71885)
OURS = [{"name": REQUEST_ENV, "value": "35942"}, {"name": LIMIT_ENV, "value": "71885"}]


def rewritten(container: dict, cap: MemoryCap = CAP) -> dict:
    pod = {"spec": {"containers": [copy.deepcopy(container)]}}
    operations = memory_env_operations("/spec/containers/0", pod["spec"]["containers"][0], cap)
    result: dict = jsonpatch.JsonPatch(operations).apply(pod)
    return result["spec"]["containers"][0]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (None, OURS),
        ([], OURS),
        (
            [{"name": "A", "value": "1"}],
            [{"name": "A", "value": "1"}, *OURS],
        ),
        # A value the user set is replaced where it stands; the other is added.
        (
            [{"name": LIMIT_ENV, "value": "999999"}, {"name": "A", "value": "1"}],
            [OURS[1], {"name": "A", "value": "1"}, OURS[0]],
        ),
        # From a ConfigMap key: replaced by CastSlice's value.
        (
            [
                {
                    "name": REQUEST_ENV,
                    "valueFrom": {"configMapKeyRef": {"name": "gpu", "key": "request"}},
                }
            ],
            [OURS[0], OURS[1]],
        ),
        # Set twice (the API server only warns): the kubelet keeps the last; both replaced.
        (
            [{"name": LIMIT_ENV, "value": "1"}, {"name": LIMIT_ENV, "value": "999999"}],
            [OURS[1], OURS[1], OURS[0]],
        ),
        # Already CastSlice's values: nothing to change.
        (OURS, OURS),
    ],
)
def test_the_env_asks_for_the_cap_whatever_the_container_set(
    env: list | None, expected: list
) -> None:
    container: dict = {"name": "main", "image": "cuda"}
    if env is not None:
        container["env"] = env
    assert rewritten(container) == {"name": "main", "image": "cuda", "env": expected}


def test_env_from_is_left_as_it_is_because_env_wins_over_it() -> None:
    container = {"name": "main", "envFrom": [{"configMapRef": {"name": "limits"}}]}
    assert rewritten(container) == {**container, "env": OURS}


def test_nothing_to_change_gives_no_operation() -> None:
    container = {"name": "main", "env": [*OURS, {"name": "A", "value": "1"}]}
    assert memory_env_operations("/spec/containers/0", container, CAP) == []
