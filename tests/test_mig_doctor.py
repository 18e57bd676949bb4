"""`castslice doctor` on MIG nodes: the profiles the settings can give against what the
nodes offer, MIG layouts not applied, and Pods waiting for an instance.

Nodes are shaped as the NVIDIA device plugin and GPU Feature Discovery v0.20.0 show them
(tests/mig_nodes.py); the live behaviour is in tests/e2e/test_mig.py.
"""

from __future__ import annotations

import pytest

from castslice.backends.tools import tools_for
from castslice.contract.findings import Result, Status
from castslice.environment import load_config
from castslice.inspect.doctor import capacity, gpu_nodes, pending
from castslice.settings.config import Config
from tests.mig_nodes import gpu_node_side, node


def mig(**env: str) -> Config:
    return load_config({"CASTSLICE_BACKEND": "mig", "CASTSLICE_SLICES_PER_GPU": "8", **env})


def cluster(strategy: str, *layouts: tuple[str, str], state: str = "success") -> list[dict]:
    return [
        node(f"{model}-{config}", *gpu_node_side(strategy, model, config, state=state))
        for model, config in layouts
    ]


MIXED = cluster(
    "mixed",
    ("A100-80GB", "all-balanced"),
    ("H100-80GB", "all-1g.20gb"),
    ("H100-80GB", "all-7g.80gb"),
    ("A100-80GB", "all-disabled"),
)


def test_nodes_offering_every_instance_pass() -> None:
    config = mig(CASTSLICE_MIG_GPU_MODELS="A100-80GB,H100-80GB")
    result = capacity.assess(config, MIXED, [])
    assert result.status is Status.OK, result.message
    assert "nvidia.com/mig-1g.20gb on 1 node" in result.message


def test_a_profile_nobody_offers_is_named_with_the_layout_that_gives_it() -> None:
    # strict: a half is 4g.40gb, which no node's layout has.
    config = mig(CASTSLICE_MIG_GPU_MODELS="A100-80GB,H100-80GB", CASTSLICE_MIG_FIT="strict")
    result = capacity.assess(config, MIXED, [])
    assert result.status is Status.FAILED
    assert "no Ready node offers nvidia.com/mig-4g.40gb (for Pods of 4 slices)" in (result.message)
    assert "nvidia.com/mig.config=all-balanced" in result.fix
    assert "all-4g.40gb" in result.fix


def test_single_nodes_are_found_by_their_product_label() -> None:
    nodes = cluster(
        "single",
        ("A100-80GB", "all-1g.10gb"),
        ("A100-80GB", "all-1g.20gb"),
        ("A100-80GB", "all-3g.40gb"),
        ("A100-80GB", "all-7g.80gb"),
        ("A100-80GB", "all-disabled"),
    )
    config = mig(CASTSLICE_MIG_STACK="single")
    result = capacity.assess(config, nodes, [])
    assert result.status is Status.OK, result.message
    # Without the 1g.20gb node a quarter has nowhere to go.
    result = capacity.assess(config, [nodes[0], *nodes[2:]], [])
    assert result.status is Status.FAILED
    assert "NVIDIA-A100-SXM4-80GB-MIG-1g.20gb" in result.message


def test_a_layout_pending_or_failed_is_named() -> None:
    config = mig()
    nodes = [*MIXED, *cluster("mixed", ("A100-80GB", "all-balanced"), state="failed")]
    nodes[-1]["metadata"]["name"] = "broken"
    result = capacity.assess(config, nodes, [])
    assert result.status is Status.FAILED
    assert (
        "node broken: nvidia.com/mig.config.state=failed (nvidia.com/mig.config=all-balanced)"
        in result.message
    )


def test_a_single_strategy_node_with_mixed_profiles_is_named() -> None:
    nodes = cluster("single", ("A100-80GB", "all-balanced"))
    result = capacity.assess(mig(CASTSLICE_MIG_STACK="single"), nodes, [])
    assert "NVIDIA-A100-SXM4-80GB-MIG-INVALID" in result.message


def test_whole_gpu_pods_need_a_gpu_without_mig() -> None:
    only_mig = [n for n in MIXED if "disabled" not in n["metadata"]["name"]]
    result = gpu_nodes.assess(mig(), only_mig)
    assert result.status is Status.FAILED
    assert gpu_nodes.assess(mig(), MIXED).status is Status.OK


def waiting(message: str) -> dict:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ml",
            "annotations": {"castslice.castops.io/applied": "{}"},
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ],
        },
    }


def test_the_pending_check_reads_each_stacks_scheduler_message() -> None:
    mixed = waiting("0/4 nodes are available: 4 Insufficient nvidia.com/mig-3g.40gb.")
    result = pending.assess(mig(), [mixed])
    assert "Insufficient nvidia.com/mig-3g.40gb" in result.message
    single = waiting(
        "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."
    )
    result = pending.assess(mig(CASTSLICE_MIG_STACK="single"), [single])
    assert result.status is Status.FAILED
    assert "no node with the labels it selects" in result.message


def test_dra_mig_devices_of_every_instance_are_looked_for_in_the_resource_slices() -> None:
    from castslice.backends.mig import devices_check
    from castslice.backends.tools import tools_for
    from tests.mig_nodes import mig_devices, resource_slice

    config = mig(CASTSLICE_MIG_STACK="dra", CASTSLICE_MIG_GPU_MODELS="A100-80GB,H100-80GB")
    backend = tools_for(config)
    (check,) = backend.node_checks() or ()
    assert check.name == "mig devices"
    needed = backend.needed_instances()  # type: ignore[attr-defined]
    deviceclass = {"metadata": {"name": "mig.nvidia.com"}}
    balanced = resource_slice("a100", mig_devices("A100-80GB", "all-balanced"))
    quarters = resource_slice("h100", mig_devices("H100-80GB", "all-1g.20gb"))
    full = resource_slice("h100-full", mig_devices("H100-80GB", "all-7g.80gb"))
    result = devices_check.assess(config, needed, deviceclass, [balanced, quarters, full], "fix")
    assert result.status is Status.OK, result.message
    # Without 1g.20gb, a quarter's claim falls back to all-balanced's 2g.20gb: no Pod waits.
    result = devices_check.assess(config, needed, deviceclass, [balanced, full], "fix")
    assert result.status is Status.OK, result.message
    # With only 1g.10gb instances nothing a quarter's claim lists is there.
    eighths = resource_slice("a100-eighths", mig_devices("A100-80GB", "all-1g.10gb"))
    result = devices_check.assess(config, needed, deviceclass, [eighths], "fix")
    assert result.status is Status.FAILED
    assert result.message.startswith(
        "no MIG device A100-80GB 1g.20gb or H100-80GB 1g.20gb or A100-80GB 2g.20gb or "
        "H100-80GB 2g.20gb or A100-80GB 3g.40gb"
    )
    assert "(for Pods of 2 slices)" in result.message
    missing_class = devices_check.assess(config, needed, None, [balanced], "fix")
    assert "no DeviceClass mig.nvidia.com" in missing_class.message


def test_only_pods_of_a_whole_gpu_need_a_gpu_without_mig() -> None:
    result = gpu_nodes.assess(mig(CASTSLICE_PRESETS="dev=1,training=8"), MIXED)
    assert "for Pods of 8 slices or more (preset training)" in result.message


def test_a_missing_time_shared_partition_pool_is_named_before_any_pod_waits() -> None:
    def gke(name: str, size: str, clients: int | None = None) -> dict:
        labels = {"cloud.google.com/gke-gpu-partition-size": size}
        gpus = {"1g.10gb": 7, "1g.20gb": 4, "3g.40gb": 2, "7g.80gb": 1}[size]
        if clients:
            labels["cloud.google.com/gke-gpu-sharing-strategy"] = "time-sharing"
            labels["cloud.google.com/gke-max-shared-clients-per-gpu"] = str(clients)
            gpus *= clients
        return node(name, labels, {"nvidia.com/gpu": str(gpus)})

    config = mig(
        CASTSLICE_MIG_STACK="gke",
        CASTSLICE_SLICES_PER_GPU="32",
        CASTSLICE_MIG_TIME_SHARED_CLIENTS="4",
        CASTSLICE_MIG_PROFILES="1g.10gb,1g.20gb,3g.40gb,7g.80gb",
    )
    dedicated = [gke(f"p-{size}", size) for size in ("1g.10gb", "1g.20gb", "3g.40gb", "7g.80gb")]
    dedicated.append(node("whole", {}, {"nvidia.com/gpu": "1"}))
    result = capacity.assess(config, dedicated, [])
    assert result.status is Status.FAILED
    assert "for Pods of 1 slice" in result.message
    assert "gpu-sharing-strategy=time-sharing,max-shared-clients-per-gpu=4" in result.fix
    # A time-shared pool of another client count does not serve them either.
    result = capacity.assess(config, [*dedicated, gke("ts-2", "1g.10gb", 2)], [])
    assert result.status is Status.FAILED
    result = capacity.assess(config, [*dedicated, gke("ts-4", "1g.10gb", 4)], [])
    assert result.status is Status.OK, result.message


BALANCED_H200 = "1g.18gb,2g.35gb,3g.71gb"


@pytest.mark.parametrize("strategy", ["mixed", "single"])
def test_a_mig_node_whose_product_no_model_knows_is_named_with_the_line_to_add(
    strategy: str,
) -> None:
    """An H200 NVL reports a name of its own; with the H200's profiles, doctor names the
    node and the exact setting that adds the name, and with it set the node serves."""
    config = "all-1g.18gb" if strategy == "single" else "all-balanced"
    labels, resources = gpu_node_side(strategy, "H200", config, nvml_name="NVIDIA H200 NVL")
    nodes = [node("h200-nvl", labels, resources), node("whole", {}, {"nvidia.com/gpu": "1"})]
    settings = {
        "CASTSLICE_MIG_STACK": strategy,
        "CASTSLICE_MIG_GPU_MODELS": "H200",
        # What the layout gives.
        "CASTSLICE_MIG_PROFILES": "1g.18gb" if strategy == "single" else BALANCED_H200,
    }
    result = capacity.assess(mig(**settings), nodes, [])
    assert result.status is Status.FAILED
    assert "node h200-nvl: its MIG devices (" in result.message
    assert "named 'NVIDIA-H200-NVL', which no model of CASTSLICE_MIG_GPU_MODELS (H200)" in (
        result.message
    )
    assert "set CASTSLICE_MIG_PRODUCT_NAMES=H200=NVIDIA-H200-NVL" in result.message
    settings["CASTSLICE_MIG_PRODUCT_NAMES"] = "H200=NVIDIA-H200-NVL"
    result = capacity.assess(mig(**settings), nodes, [])
    assert result.status is Status.OK, result.message


def test_a_board_of_a_model_not_configured_is_named_with_both_settings() -> None:
    labels, resources = gpu_node_side("single", "H200", "all-1g.18gb", nvml_name="NVIDIA H200 NVL")
    problems = tools_for(mig(CASTSLICE_MIG_STACK="single")).node_problems(
        [node("h200-nvl", labels, resources)]
    )
    assert problems == [
        "node h200-nvl: its MIG devices (1g.18gb) are on a GPU named 'NVIDIA-H200-NVL', which "
        "no model of CASTSLICE_MIG_GPU_MODELS (A100-80GB) is known by; they are H200's "
        "profiles: add H200 to it and set CASTSLICE_MIG_PRODUCT_NAMES=H200=NVIDIA-H200-NVL"
    ]


def test_dra_names_mig_devices_of_a_product_no_model_knows() -> None:
    from castslice.backends.mig import devices_check
    from tests.mig_nodes import mig_devices, resource_slice

    settings = {
        "CASTSLICE_MIG_STACK": "dra",
        "CASTSLICE_MIG_GPU_MODELS": "H200",
        "CASTSLICE_MIG_PROFILES": BALANCED_H200,
    }
    nvl = resource_slice("nvl", mig_devices("H200", "all-balanced", nvml_name="NVIDIA H200 NVL"))
    deviceclass = {"metadata": {"name": "mig.nvidia.com"}}

    def assess(config: Config) -> Result:
        needed = tools_for(config).needed_instances()  # type: ignore[attr-defined]
        return devices_check.assess(config, needed, deviceclass, [nvl], "fix")

    result = assess(mig(**settings))
    assert result.status is Status.FAILED
    # The claim's CEL compares NVML's name: the line gives it as the driver publishes it.
    assert "set CASTSLICE_MIG_PRODUCT_NAMES=H200=NVIDIA H200 NVL" in result.message
    settings["CASTSLICE_MIG_PRODUCT_NAMES"] = "H200=NVIDIA H200 NVL"
    result = assess(mig(**settings))
    assert result.status is Status.OK, result.message


@pytest.mark.parametrize("stack", ["mixed", "single"])
@pytest.mark.parametrize("model", ["A100-80GB", "H200"])
def test_the_e2e_environment_up_makes_a_node_for_every_mig_pod(stack: str, model: str) -> None:
    """`python -m tests.e2e up` with CASTSLICE_BACKEND=mig: doctor finds a node for every
    Pod the settings can make."""
    from tests.e2e.__main__ import mig_nodes

    settings = {
        "CASTSLICE_BACKEND": "mig",
        "CASTSLICE_MIG_STACK": stack,
        "CASTSLICE_MIG_GPU_MODELS": model,
    }
    # As KWOK makes them: Ready.
    nodes = [
        node(n["metadata"]["name"], n["metadata"]["labels"], n["status"]["allocatable"])
        for n in mig_nodes(settings)
    ]
    result = capacity.assess(load_config(settings), nodes, [])
    assert result.status is Status.OK, result.message
