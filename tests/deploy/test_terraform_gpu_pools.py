"""infra/gpu-node-pools.tf: optional GKE GPU node pools that match the gke backend.

Parsed with python-hcl2 for its structure; where terraform is installed, the locals
that turn the sharing degrees into pools are evaluated by Terraform, and the pools
are checked against what CastSlice's own gke backend asks of a node.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from castslice.backends.tools import tools_for
from castslice.environment import load_config

from .terraform_offline import Locals, module, plan, refusal, variable_args
from .variants import INFRA, blocks, load_hcl

POOLS_FILE = load_hcl(INFRA / "gpu-node-pools.tf")
POOL = blocks(POOLS_FILE, "resource")["google_container_node_pool"]["gpu"]
LOCALS = blocks(POOLS_FILE, "locals")
VARIABLE = blocks(load_hcl(INFRA / "variables.tf"), "variable")["gke_gpu_node_pools"]

CLUSTER = (
    'cluster="gpu-cluster",location="europe-west4",'
    'machine_type="g2-standard-8",accelerator_type="nvidia-l4"'
)
GKE = {"backend": "gke"}
# The node labels GKE gives a sharing pool's nodes; their values, by strategy.
STRATEGY_LABEL = "cloud.google.com/gke-gpu-sharing-strategy"
CLIENTS_LABEL = "cloud.google.com/gke-max-shared-clients-per-gpu"
GKE_LABEL_VALUE = {"TIME_SHARING": "time-sharing", "MPS": "mps"}
# GKE: a node pool name has at most 40 lowercase letters, digits and hyphens.
POOL_NAME = re.compile(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?")


def pools_variable(**extra: str) -> str:
    fields = ",".join([CLUSTER, *(f"{key}={value}" for key, value in extra.items())])
    return "{" + fields + "}"


def test_there_are_no_pools_unless_asked_for() -> None:
    assert VARIABLE["default"] is None
    assert POOL["for_each"] == "${local.gke_gpu_node_pools}"
    assert LOCALS["gke_gpu_node_pools"].startswith("${var.gke_gpu_node_pools == null ? {} :")


def test_each_pool_shares_its_gpus_as_its_entry_says() -> None:
    (node_config,) = POOL["node_config"]
    (accelerator,) = node_config["guest_accelerator"]
    assert accelerator["type"] == "${var.gke_gpu_node_pools.accelerator_type}"
    assert accelerator["gpu_driver_installation_config"] == [
        {"gpu_driver_version": "${var.gke_gpu_node_pools.gpu_driver_version}"}
    ]
    (sharing,) = accelerator["dynamic"]
    assert sharing["gpu_sharing_config"]["for_each"] == (
        "${each.value.max_shared_clients_per_gpu == null ? [] : [each.value]}"
    )
    assert sharing["gpu_sharing_config"]["content"] == [
        {
            "gpu_sharing_strategy": "${gpu_sharing_config.value.sharing_strategy}",
            "max_shared_clients_per_gpu": "${gpu_sharing_config.value.max_shared_clients_per_gpu}",
        }
    ]
    assert POOL["cluster"] == "${var.gke_gpu_node_pools.cluster}"
    assert POOL["autoscaling"] == [
        {
            "min_node_count": "${var.gke_gpu_node_pools.min_nodes}",
            "max_node_count": "${var.gke_gpu_node_pools.max_nodes}",
        }
    ]


def test_both_application_strategies_have_a_gke_strategy() -> None:
    mapping = LOCALS["gke_sharing_strategy"]
    assert '"time-slicing" = "TIME_SHARING"' in mapping and '"mps" = "MPS"' in mapping


@pytest.fixture(scope="module")
def pools(tmp_path_factory: pytest.TempPathFactory) -> Locals:
    return Locals(tmp_path_factory.mktemp("pools"), ["gke_gpu_node_pools", "container_env"])


@pytest.fixture(scope="module")
def variables_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return module(tmp_path_factory.mktemp("pool-variables"))


@pytest.mark.terraform
def test_no_pool_by_default(pools: Locals) -> None:
    assert pools.evaluate(*variable_args())["gke_gpu_node_pools"] == {}


@pytest.mark.terraform
def test_one_sharing_pool_per_degree_and_one_of_whole_gpus(pools: Locals) -> None:
    evaluated = pools.evaluate(
        *variable_args(**GKE, sharing_degrees="[2, 4, 8]", gke_gpu_node_pools=pools_variable())
    )
    assert evaluated["gke_gpu_node_pools"] == {
        "castslice-ts-2": {
            "sharing_strategy": "TIME_SHARING",
            "max_shared_clients_per_gpu": 2,
            "gpu_partition_size": None,
        },
        "castslice-ts-4": {
            "sharing_strategy": "TIME_SHARING",
            "max_shared_clients_per_gpu": 4,
            "gpu_partition_size": None,
        },
        "castslice-ts-8": {
            "sharing_strategy": "TIME_SHARING",
            "max_shared_clients_per_gpu": 8,
            "gpu_partition_size": None,
        },
        "castslice-whole": {
            "sharing_strategy": None,
            "max_shared_clients_per_gpu": None,
            "gpu_partition_size": None,
        },
    }
    assert evaluated["container_env"]["CASTSLICE_SHARING_DEGREES"] == "2,4,8"


@pytest.mark.terraform
def test_mps_pools_without_a_whole_gpu_pool(pools: Locals) -> None:
    settings = pools_variable(whole_gpu_pool="false", name_prefix='"ml"')
    evaluated = pools.evaluate(
        *variable_args(**GKE, sharing_strategy="mps", gke_gpu_node_pools=settings)
    )
    assert evaluated["gke_gpu_node_pools"] == {
        "ml-mps-4": {
            "sharing_strategy": "MPS",
            "max_shared_clients_per_gpu": 4,
            "gpu_partition_size": None,
        },
    }


@pytest.mark.terraform
def test_the_longest_pool_name_fits_gke(pools: Locals) -> None:
    prefix = "p" + "-long" * 6 + "x"
    assert len(prefix) == 32
    evaluated = pools.evaluate(
        *variable_args(
            **GKE,
            sharing_strategy="mps",
            sharing_degrees="[48]",
            gke_gpu_node_pools=pools_variable(name_prefix=f'"{prefix}"'),
        )
    )
    for name in evaluated["gke_gpu_node_pools"]:
        assert POOL_NAME.fullmatch(name), name


@pytest.mark.terraform
@pytest.mark.parametrize(
    ("strategy", "degrees", "slices_per_gpu"),
    [("time-slicing", "[2, 4]", "4"), ("mps", "[2, 3, 8]", "8"), ("time-slicing", "[4]", "4")],
)
def test_every_pod_the_gke_backend_places_has_a_pool(
    pools: Locals, strategy: str, degrees: str, slices_per_gpu: str
) -> None:
    evaluated = pools.evaluate(
        *variable_args(
            **GKE,
            sharing_strategy=strategy,
            sharing_degrees=degrees,
            slices_per_gpu=slices_per_gpu,
            gke_gpu_node_pools=pools_variable(),
        )
    )
    # The node labels of each pool, as GKE sets them from gpu_sharing_config.
    offered = [
        {}
        if pool["max_shared_clients_per_gpu"] is None
        else {
            STRATEGY_LABEL: GKE_LABEL_VALUE[pool["sharing_strategy"]],
            CLIENTS_LABEL: str(pool["max_shared_clients_per_gpu"]),
        }
        for pool in evaluated["gke_gpu_node_pools"].values()
    ]
    backend = tools_for(load_config(evaluated["container_env"]))
    for slices in range(1, 2 * int(slices_per_gpu) + 1):
        selector = dict(backend.place(slices).node_selector)
        assert selector in offered, (slices, selector, offered)


MIG = {"backend": "mig"}
PARTITION_LABEL = "cloud.google.com/gke-gpu-partition-size"


@pytest.mark.terraform
def test_mig_partition_pools_replace_the_sharing_pools_and_set_the_profiles(
    pools: Locals,
) -> None:
    settings = pools_variable(mig_partition_sizes='["1g.10gb", "3g.40gb", "7g.80gb"]')
    evaluated = pools.evaluate(*variable_args(**MIG, gke_gpu_node_pools=settings))
    none = {"sharing_strategy": None, "max_shared_clients_per_gpu": None}
    assert evaluated["gke_gpu_node_pools"] == {
        "castslice-1g10gb": {**none, "gpu_partition_size": "1g.10gb"},
        "castslice-3g40gb": {**none, "gpu_partition_size": "3g.40gb"},
        "castslice-7g80gb": {**none, "gpu_partition_size": "7g.80gb"},
        "castslice-whole": {**none, "gpu_partition_size": None},
    }
    env = evaluated["container_env"]
    assert env["CASTSLICE_MIG_STACK"] == "gke"
    assert env["CASTSLICE_MIG_GPU_MODELS"] == "A100-80GB"
    assert env["CASTSLICE_MIG_PROFILES"] == "1g.10gb,3g.40gb,7g.80gb"
    # Every Pod the mig backend places, at S = 4 and 8, has a pool that serves it: GKE labels
    # a partition pool's nodes with its size, and none of the whole pool's.
    offered = [
        {PARTITION_LABEL: pool["gpu_partition_size"]} if pool["gpu_partition_size"] else {}
        for pool in evaluated["gke_gpu_node_pools"].values()
    ]
    for per_gpu in ("4", "8"):
        backend = tools_for(load_config({**env, "CASTSLICE_SLICES_PER_GPU": per_gpu}))
        for slices in range(1, 2 * int(per_gpu) + 1):
            placement = backend.place(slices)
            assert any(backend.serves(labels, placement) for labels in offered), (slices, placement)
    (node_config,) = POOL["node_config"]
    (accelerator,) = node_config["guest_accelerator"]
    assert accelerator["gpu_partition_size"] == "${each.value.gpu_partition_size}"


@pytest.mark.terraform
def test_the_longest_partition_pool_name_fits_gke(pools: Locals) -> None:
    prefix = "p" + "-long" * 6 + "x"
    settings = pools_variable(
        name_prefix=f'"{prefix}"',
        mig_partition_sizes='["7g.141gb"]',
        mig_time_shared_clients="48",
        mig_gpu_model='"H200"',
    )
    evaluated = pools.evaluate(*variable_args(**MIG, gke_gpu_node_pools=settings))
    assert len(evaluated["gke_gpu_node_pools"]) == 3
    for name in evaluated["gke_gpu_node_pools"]:
        assert POOL_NAME.fullmatch(name), name


@pytest.mark.terraform
@pytest.mark.parametrize("per_gpu", ["8", "32"])
def test_a_time_shared_pool_of_the_smallest_partition_serves_the_pods_smaller_than_it(
    pools: Locals, per_gpu: str
) -> None:
    # Listed out of order: the smallest is found by its memory, then its compute.
    sizes = '["3g.40gb", "1g.20gb", "2g.20gb", "1g.10gb"]'
    settings = pools_variable(mig_partition_sizes=sizes, mig_time_shared_clients="4")
    evaluated = pools.evaluate(*variable_args(**MIG, gke_gpu_node_pools=settings))
    pools_made = evaluated["gke_gpu_node_pools"]
    assert pools_made["castslice-ts1g10"] == {
        "sharing_strategy": "TIME_SHARING",
        "max_shared_clients_per_gpu": 4,
        "gpu_partition_size": "1g.10gb",
    }
    # The dedicated pools stay as they were.
    assert pools_made["castslice-1g10gb"]["max_shared_clients_per_gpu"] is None
    env = evaluated["container_env"]
    assert env["CASTSLICE_MIG_TIME_SHARED_CLIENTS"] == "4"
    # The node labels GKE gives each pool: the partition size, and on the time-shared pool
    # the sharing strategy and clients per GPU (GKE, "Share GPUs with multiple workloads
    # using time-sharing").
    offered = []
    for pool in pools_made.values():
        labels = {}
        if pool["gpu_partition_size"]:
            labels[PARTITION_LABEL] = pool["gpu_partition_size"]
        if pool["max_shared_clients_per_gpu"]:
            labels[STRATEGY_LABEL] = GKE_LABEL_VALUE[pool["sharing_strategy"]]
            labels[CLIENTS_LABEL] = str(pool["max_shared_clients_per_gpu"])
        offered.append(labels)
    backend = tools_for(load_config({**env, "CASTSLICE_SLICES_PER_GPU": per_gpu}))
    shared = 0
    for slices in range(1, 2 * int(per_gpu) + 1):
        placement = backend.place(slices)
        serving = [labels for labels in offered if backend.serves(labels, placement)]
        # Exactly one pool: a dedicated partition never lands on the time-shared pool.
        assert len(serving) == 1, (slices, placement, serving)
        shared += CLIENTS_LABEL in serving[0]
    # At S = 32, a quarter of 1g.10gb (1/8) holds 1/32: one slice count shares; at S = 8 none.
    assert shared == (1 if per_gpu == "32" else 0)


@pytest.mark.terraform
@pytest.mark.parametrize(
    ("assignments", "message"),
    [
        ({"gke_gpu_node_pools": pools_variable()}, 'gke_gpu_node_pools is for backend = "gke"'),
        (
            {**GKE, "sharing_degrees": "[4, 64]", "gke_gpu_node_pools": pools_variable()},
            "every sharing degree must be at most 48",
        ),
        (
            {**GKE, "gke_gpu_node_pools": pools_variable(min_nodes="3", max_nodes="2")},
            "0 <= min_nodes <= max_nodes",
        ),
        (
            {**GKE, "gke_gpu_node_pools": pools_variable(accelerator_count="0")},
            "accelerator_count a whole number from 1",
        ),
        (
            {**GKE, "gke_gpu_node_pools": pools_variable(gpu_driver_version='"NEWEST"')},
            "gpu_driver_version DEFAULT, LATEST or INSTALLATION_DISABLED",
        ),
        (
            {**GKE, "gke_gpu_node_pools": pools_variable(name_prefix='"GPU"')},
            "name_prefix must be 1-32 lowercase letters",
        ),
        (
            {**GKE, "gke_gpu_node_pools": pools_variable(name_prefix='"' + "a" * 33 + '"')},
            "name_prefix must be 1-32 lowercase letters",
        ),
        (
            {**MIG, "gke_gpu_node_pools": pools_variable()},
            "mig_partition_sizes lists the MIG partition pools",
        ),
        (
            {**GKE, "gke_gpu_node_pools": pools_variable(mig_partition_sizes='["1g.10gb"]')},
            "mig_partition_sizes lists the MIG partition pools",
        ),
        (
            {**MIG, "gke_gpu_node_pools": pools_variable(mig_partition_sizes='["1g.10GB"]')},
            "mig_partition_sizes must be MIG profiles of mig_gpu_model",
        ),
        # The application would refuse CASTSLICE_MIG_PROFILES=1g.10gb with an H200.
        (
            {
                **MIG,
                "gke_gpu_node_pools": pools_variable(
                    mig_partition_sizes='["1g.10gb"]', mig_gpu_model='"H200"'
                ),
            },
            "mig_partition_sizes must be MIG profiles of mig_gpu_model",
        ),
        (
            {
                **MIG,
                "gke_gpu_node_pools": pools_variable(
                    mig_partition_sizes='["1g.18gb"]', mig_gpu_model='"h200"'
                ),
            },
            "mig_gpu_model must be one of: A100-40GB",
        ),
        (
            {
                **MIG,
                "gke_gpu_node_pools": pools_variable(
                    mig_partition_sizes='["1g.10gb"]', mig_time_shared_clients="49"
                ),
            },
            "mig_time_shared_clients time-shares the smallest of mig_partition_sizes",
        ),
        (
            {**GKE, "gke_gpu_node_pools": pools_variable(mig_time_shared_clients="4")},
            "mig_time_shared_clients time-shares the smallest of mig_partition_sizes",
        ),
        (
            {**GKE, "gke_gpu_node_pools": '{cluster="c",location="l"}'},
            'attributes "accelerator_type" and "machine_type" are required',
        ),
    ],
)
def test_pools_that_cannot_work_are_refused(
    variables_module: Path, assignments: dict[str, str], message: str
) -> None:
    result = plan(variables_module, *variable_args(**assignments))
    assert message in refusal(result), result.stderr
