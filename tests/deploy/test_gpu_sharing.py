"""The node-side configuration in infra/gpu-sharing/ for the nvidia and resource backends.

The device plugin's configs are checked against the rules of the NVIDIA device
plugin's own parser (api/config/v1: version v1, at least one resource, replicas of
2 or more) and against what CastSlice's backends ask of a node configured with them.
The labels a node gets are GPU Feature Discovery's: `nvidia.com/gpu.replicas` is
the entry's replicas and `nvidia.com/gpu.sharing-strategy` its strategy, or `none`
for an entry without sharing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from castslice.backends.tools import tools_for
from castslice.environment import load_config
from castslice.settings.config import SHARING_STRATEGIES

from .variants import INFRA

GPU_SHARING = INFRA / "gpu-sharing"
NVIDIA = GPU_SHARING / "nvidia"
RESOURCE = GPU_SHARING / "resource"
CONFIG_FILES = (NVIDIA / "device-plugin-config.yaml", RESOURCE / "device-plugin-config.yaml")
KUBERNETES_VERSIONS = ("1.30", "1.37")
NO_SHARING = "whole-gpu"
# The device plugin's config keys for CastSlice's strategy names.
SHARING_KEYS = {"time-slicing": "timeSlicing", "mps": "mps"}
ENTRY_NAME = re.compile(r"(?P<strategy>time-slicing|mps)-(?P<replicas>[0-9]+)")
GPU = "nvidia.com/gpu"
# What `renameByDefault: true` advertises instead of nvidia.com/gpu.
SHARED = "nvidia.com/gpu.shared"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"


def config_map(path: Path) -> dict[str, Any]:
    (document,) = list(yaml.safe_load_all(path.read_text()))
    return document


def entries(path: Path) -> dict[str, dict[str, Any]]:
    """The device plugin configs of a ConfigMap, parsed, by entry name."""
    return {name: yaml.safe_load(text) for name, text in config_map(path)["data"].items()}


def sharing_entries(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """(strategy, replicas) from each sharing entry's name -> its `sharing.<strategy>` block."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for name, config in entries(path).items():
        if name == NO_SHARING:
            continue
        match = ENTRY_NAME.fullmatch(name)
        assert match, f"{path.name}: entry {name!r} is neither {NO_SHARING} nor <strategy>-<N>"
        strategy = match["strategy"]
        assert list(config["sharing"]) == [SHARING_KEYS[strategy]], name
        found[(strategy, int(match["replicas"]))] = config["sharing"][SHARING_KEYS[strategy]]
    return found


def gfd_labels(strategy: str | None, replicas: int) -> dict[str, str]:
    """The sharing labels GPU Feature Discovery puts on a node running an entry."""
    return {REPLICAS_LABEL: str(replicas), STRATEGY_LABEL: strategy or "none"}


def test_every_yaml_file_parses() -> None:
    files = sorted(GPU_SHARING.rglob("*.yaml"))
    assert len(files) >= 5
    for path in files:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
        assert documents, f"{path} holds no YAML document"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda path: path.parent.name)
def test_the_config_maps_match_the_kubernetes_schema(path: Path, version: str) -> None:
    kubernetes_validate.validate(config_map(path), version, strict=True)


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda path: path.parent.name)
def test_every_entry_is_a_config_the_device_plugin_accepts(path: Path) -> None:
    configs = entries(path)
    assert configs[NO_SHARING] == {"version": "v1"}
    for name, config in configs.items():
        assert config["version"] == "v1", name
        assert set(config) <= {"version", "flags", "sharing"}, name
    for (strategy, replicas), sharing in sharing_entries(path).items():
        assert sharing["renameByDefault"] is True, (strategy, replicas)
        assert sharing["resources"] == [{"name": GPU, "replicas": replicas}]
        assert replicas >= 2


def test_nvidia_entries_refuse_more_than_one_unit_and_cover_the_default_degrees() -> None:
    shipped = sharing_entries(NVIDIA / "device-plugin-config.yaml")
    for sharing in shipped.values():
        assert sharing["failRequestsGreaterThanOne"] is True
    default_degrees = load_config({}).sharing_degrees
    for strategy in SHARING_STRATEGIES:
        degrees = {replicas for kind, replicas in shipped if kind == strategy}
        assert set(default_degrees) | {2} <= degrees, strategy


@pytest.mark.parametrize("strategy", SHARING_STRATEGIES)
def test_the_nvidia_backend_sends_each_share_to_the_node_an_entry_makes(strategy: str) -> None:
    shipped = sharing_entries(NVIDIA / "device-plugin-config.yaml")
    degrees = sorted(replicas for kind, replicas in shipped if kind == strategy)
    config = load_config(
        {
            "CASTSLICE_BACKEND": "nvidia",
            "CASTSLICE_SHARING_DEGREES": ",".join(map(str, degrees)),
            "CASTSLICE_SHARING_STRATEGY": strategy,
        }
    )
    backend = tools_for(config)
    for degree in degrees:
        # The share that fills one client of a GPU shared `degree` ways.
        placement = backend.place(config.slices_per_gpu // degree)
        assert placement.node_selector == gfd_labels(strategy, degree)
        # One unit of what the node advertises: failRequestsGreaterThanOne lets it through.
        assert (placement.resource, placement.quantity) == (SHARED, 1)
    whole = backend.place(config.slices_per_gpu)
    assert whole.node_selector.items() <= gfd_labels(None, 1).items()
    assert whole.resource == GPU


def test_resource_entries_advertise_the_shared_resource_at_the_preset_scale() -> None:
    (((strategy, replicas), sharing),) = sharing_entries(
        RESOURCE / "device-plugin-config.yaml"
    ).items()
    assert strategy == "time-slicing"
    # A Pod asks for several units: the plugin must not fail containers asking for more than 1.
    assert sharing["failRequestsGreaterThanOne"] is False
    flags = entries(RESOURCE / "device-plugin-config.yaml")[f"{strategy}-{replicas}"]["flags"]
    assert flags == {"plugin": {"sharedDevicesAllocationPolicy": "packed"}}
    # The stock plugin's shared name, as the README tells the user to configure it.
    config = load_config({"CASTSLICE_SHARED_RESOURCE": SHARED})
    backend = tools_for(config)
    assert config.backend == "resource"
    for preset, slices in config.presets.items():
        placement = backend.place(slices)
        assert placement.resource == SHARED, preset
        assert placement.node_selector == {}, preset
        # No preset needs more units than one GPU's replicas.
        assert placement.quantity <= replicas, preset
    assert max(config.presets.values()) == replicas


def test_both_config_maps_fit_the_same_device_plugin_settings() -> None:
    nvidia, resource = (config_map(path) for path in CONFIG_FILES)
    assert nvidia["metadata"]["name"] == resource["metadata"]["name"]
    assert "namespace" not in nvidia["metadata"] and "namespace" not in resource["metadata"]
    name = nvidia["metadata"]["name"]
    pointers = {
        "ClusterPolicy patch": yaml.safe_load((NVIDIA / "clusterpolicy-patch.yaml").read_text())[
            "spec"
        ]["devicePlugin"]["config"],
        "GPU Operator values": yaml.safe_load((NVIDIA / "gpu-operator-values.yaml").read_text())[
            "devicePlugin"
        ]["config"],
        "device plugin values": yaml.safe_load((NVIDIA / "device-plugin-values.yaml").read_text())[
            "config"
        ],
    }
    for where, pointer in pointers.items():
        # Unlabelled nodes run the entry without sharing: nothing shares until a node is labelled.
        assert pointer == {"name": name, "default": NO_SHARING}, where
    standalone = yaml.safe_load((NVIDIA / "device-plugin-values.yaml").read_text())
    assert standalone["gfd"] == {"enabled": True}


def test_the_readme_names_each_backend_and_file() -> None:
    readme = (GPU_SHARING / "README.md").read_text()
    for backend in ("`gke`", "`nvidia`", "`resource`", "gke_gpu_node_pools"):
        assert backend in readme
    for path in sorted(GPU_SHARING.rglob("*.yaml")):
        assert str(path.relative_to(GPU_SHARING)) in readme, path
    assert "CASTSLICE_SHARED_RESOURCE=nvidia.com/gpu.shared" in readme


DRA = GPU_SHARING / "dra"


def test_the_shipped_claim_templates_are_the_renderer_output() -> None:
    from castslice.backends.dra.claim_templates import claim_templates, default_counts

    config = load_config({"CASTSLICE_BACKEND": "dra"})
    shipped = list(yaml.safe_load_all((DRA / "claim-templates.yaml").read_text()))
    assert shipped == claim_templates(config, [None], default_counts(config).counts)
    for template in shipped:
        kubernetes_validate.validate(template, "1.37", strict=True)


def test_the_dra_driver_publishes_as_many_shares_as_castslice_counts() -> None:
    values = yaml.safe_load((DRA / "dra-driver-values.yaml").read_text())
    assert values["featureGates"] == {"ConsumableShares": True}
    assert values["consumableShares"] == str(load_config({}).slices_per_gpu)
    # The chart installs GPUs only when told the device plugin is off; the host driver's root.
    assert values["gpuResourcesEnabledOverride"] is True
    assert values["nvidiaDriverRoot"] == "/"
    readme = (GPU_SHARING / "README.md").read_text()
    assert "--version 0.5.0" in readme
    assert "device-taint-rule.yaml" in readme
