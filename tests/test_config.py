"""Configuration from the environment, validated once at start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from castslice.environment import KINDS, load_config
from castslice.render.chart_values import CHART_KINDS
from castslice.settings.config import Config, ConfigError
from castslice.settings.table import Kind

ROOT = Path(__file__).resolve().parent.parent


def test_defaults() -> None:
    assert load_config({}) == Config(
        shared_resource="nvidia.com/gpu-shared",
        gpu_resource="nvidia.com/gpu",
        presets={"training": 4, "inference": 2, "batch": 2, "dev": 1},
        default_slices=1,
        max_slice_ratio=1000,
        path_token=None,
    )


def test_every_variable_is_read() -> None:
    config = load_config(
        {
            "CASTSLICE_SHARED_RESOURCE": "nvidia.com/gpu.shared",
            "CASTSLICE_GPU_RESOURCE": "example.com/accelerator",
            "CASTSLICE_PRESETS": " llm = 8 , notebook=1",
            "CASTSLICE_DEFAULT_SLICES": "2",
            "CASTSLICE_MAX_SLICE_RATIO": "64",
            "CASTSLICE_PATH_TOKEN": "Zk3_q-Lm.9~abcdefgh",
            "CASTSLICE_BACKEND": "gke",
            "CASTSLICE_SLICES_PER_GPU": "8",
            "CASTSLICE_SHARING_DEGREES": "8, 2,4",
            "CASTSLICE_SHARING_STRATEGY": "mps",
            "UNRELATED": "ignored",
        }
    )
    assert config == Config(
        shared_resource="nvidia.com/gpu.shared",
        gpu_resource="example.com/accelerator",
        presets={"llm": 8, "notebook": 1},
        default_slices=2,
        max_slice_ratio=64,
        path_token="Zk3_q-Lm.9~abcdefgh",
        backend="gke",
        slices_per_gpu=8,
        sharing_degrees=(2, 4, 8),
        sharing_strategy="mps",
    )


def test_nvidia_backend_defaults_to_the_renamed_shared_resource() -> None:
    assert load_config({"CASTSLICE_BACKEND": "nvidia"}).shared_resource == "nvidia.com/gpu.shared"
    config = load_config({"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_GPU_RESOURCE": "a.io/gpu"})
    assert config.shared_resource == "a.io/gpu.shared"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("CASTSLICE_SHARED_RESOURCE", "gpu-shared", "needs a domain prefix"),
        ("CASTSLICE_SHARED_RESOURCE", "NVIDIA.com/gpu", "is not a lowercase DNS subdomain"),
        ("CASTSLICE_SHARED_RESOURCE", "nvidia.com/gpu shared", "must be 1-63 letters"),
        ("CASTSLICE_SHARED_RESOURCE", "nvidia.com/", "must be 1-63 letters"),
        ("CASTSLICE_SHARED_RESOURCE", "nvidia.com/" + "a" * 64, "must be 1-63 letters"),
        ("CASTSLICE_SHARED_RESOURCE", "kubernetes.io/gpu", "reserved for native resources"),
        ("CASTSLICE_SHARED_RESOURCE", "x.kubernetes.io/gpu", "reserved for native resources"),
        ("CASTSLICE_SHARED_RESOURCE", "nvidia.com/gpu", "must differ"),
        ("CASTSLICE_GPU_RESOURCE", "nvidia.com/gpu/x", "must be 1-63 letters"),
        ("CASTSLICE_GPU_RESOURCE", "", "is set but empty"),
        ("CASTSLICE_PRESETS", "training", "is not of the form type=slices"),
        ("CASTSLICE_PRESETS", "training=4,,dev=1", "is not of the form type=slices"),
        ("CASTSLICE_PRESETS", "=4", "is not of the form type=slices"),
        ("CASTSLICE_PRESETS", "training=four", "must be a whole number from 1 to 1000"),
        ("CASTSLICE_PRESETS", "training=0", "must be a whole number from 1 to 1000"),
        ("CASTSLICE_PRESETS", "training=2000", "must be a whole number from 1 to 1000"),
        ("CASTSLICE_PRESETS", "dev=1,dev=2", "is listed twice"),
        ("CASTSLICE_DEFAULT_SLICES", "0", "must be a whole number from 1 to 1000"),
        ("CASTSLICE_DEFAULT_SLICES", "-1", "must be a whole number from 1 to 1000"),
        ("CASTSLICE_DEFAULT_SLICES", "1.5", "must be a whole number from 1 to 1000"),
        ("CASTSLICE_DEFAULT_SLICES", "1001", "must be a whole number from 1 to 1000"),
        ("CASTSLICE_MAX_SLICE_RATIO", "0", "must be a whole number from 1 to 1000000"),
        ("CASTSLICE_MAX_SLICE_RATIO", "ten", "must be a whole number from 1 to 1000000"),
        ("CASTSLICE_MAX_SLICE_RATIO", "  ", "is set but empty"),
        ("CASTSLICE_BACKEND", "hami", "must be one of: resource, nvidia, gke, dra"),
        ("CASTSLICE_BACKEND", "GKE", "must be one of: resource, nvidia, gke, dra"),
        ("CASTSLICE_SLICES_PER_GPU", "0", "must be a whole number from 1 to 1000"),
        ("CASTSLICE_SHARING_DEGREES", "1", "'1' is not a clients-per-GPU count"),
        ("CASTSLICE_SHARING_DEGREES", "2,,4", "'' is not a clients-per-GPU count"),
        ("CASTSLICE_SHARING_DEGREES", "4;8", "'4;8' is not a clients-per-GPU count"),
        ("CASTSLICE_SHARING_DEGREES", "2,4,2", "2 is listed twice"),
        ("CASTSLICE_SHARING_DEGREES", "1001", "from 2 to 1000"),
        ("CASTSLICE_SHARING_STRATEGY", "time-sharing", "must be one of: time-slicing, mps"),
        ("CASTSLICE_DRA_DEVICE_CLASS", "GPU.nvidia.com", "is not a DeviceClass name"),
        ("CASTSLICE_DRA_DEVICE_CLASS", "gpu_nvidia", "is not a DeviceClass name"),
        ("CASTSLICE_DRA_CAPACITY", "1shares", "is not a device capacity name"),
        ("CASTSLICE_DRA_CAPACITY", "Example.com/shares", "is not a device capacity name"),
        ("CASTSLICE_DRA_CAPACITY", "a" * 33, "is not a device capacity name"),
        ("CASTSLICE_DRA_GPU_MEMORY", "80GB", "must be one GPU's memory as a whole number of Mi"),
        ("CASTSLICE_DRA_GPU_MEMORY", "-80Gi", "must be one GPU's memory"),
        ("CASTSLICE_DRA_GPU_MEMORY", "1Ki", "must be one GPU's memory"),
        ("CASTSLICE_DRA_GPU_MEMORY", "80G", "from 1Mi to 1024Ti"),
        ("CASTSLICE_DRA_GPU_MEMORY", "1.5Ti", "from 1Mi to 1024Ti"),
        ("CASTSLICE_DRA_GPU_MEMORY", "080Gi", "from 1Mi to 1024Ti"),
        ("CASTSLICE_DRA_GPU_MEMORY", "1025Ti", "from 1Mi to 1024Ti"),
        ("CASTSLICE_DRA_GPU_MEMORY", "85899345920", "from 1Mi to 1024Ti"),
        ("CASTSLICE_PATH_TOKEN", "short", "at least 16 characters"),
        ("CASTSLICE_PATH_TOKEN", "has/slash/in/it/000", "at least 16 characters from"),
        ("CASTSLICE_PATH_TOKEN", "has?query=1&more=2", "at least 16 characters from"),
    ],
)
def test_invalid_values_name_the_variable(variable: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config({variable: value})
    assert str(raised.value).startswith(variable)
    assert message in str(raised.value)


def test_dra_settings_are_read() -> None:
    config = load_config(
        {
            "CASTSLICE_BACKEND": "dra",
            "CASTSLICE_DRA_DEVICE_CLASS": "gpu.example.com",
            "CASTSLICE_DRA_CAPACITY": "example.com/slices",
            "CASTSLICE_DRA_GPU_MEMORY": "24576Mi",
        }
    )
    assert (config.dra_device_class, config.dra_capacity, config.dra_gpu_memory) == (
        "gpu.example.com",
        "example.com/slices",
        24 * 2**30,
    )
    default = load_config({})
    assert (default.dra_device_class, default.dra_capacity, default.dra_gpu_memory) == (
        "gpu.nvidia.com",
        "shares",
        None,
    )


def test_max_ratio_bounds_default_and_presets() -> None:
    with pytest.raises(ConfigError, match=r"CASTSLICE_DEFAULT_SLICES.*from 1 to 8"):
        load_config({"CASTSLICE_MAX_SLICE_RATIO": "8", "CASTSLICE_DEFAULT_SLICES": "9"})
    with pytest.raises(ConfigError, match=r"CASTSLICE_PRESETS.*from 1 to 3"):
        load_config({"CASTSLICE_MAX_SLICE_RATIO": "3"})


def test_path_token_is_never_echoed() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config({"CASTSLICE_PATH_TOKEN": "secret/token/value"})
    assert "secret" not in str(raised.value)


def _start(*flags: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """functions-framework started on main.py with `flags`, where it must stop at once."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "functions_framework",
            "--source=main.py",
            *flags,
            "--host=127.0.0.1",
            "--port=0",
        ],
        cwd=ROOT,
        env={**os.environ, **settings},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("target", ["mutate", "mutate_asgi"])
def test_invalid_configuration_stops_the_server_at_start(target: str) -> None:
    started = _start(f"--target={target}", CASTSLICE_MAX_SLICE_RATIO="lots")
    assert started.returncode != 0
    assert started.stderr.strip().splitlines()[-1] == (
        "castslice: invalid configuration: CASTSLICE_MAX_SLICE_RATIO='lots' "
        "must be a whole number from 1 to 1000000"
    )


def test_mig_profiles_of_no_model_listed_stop_the_server_at_start() -> None:
    """Every Pod would get a whole GPU: the server does not start."""
    try:
        started = _start(
            "--target=mutate",
            CASTSLICE_BACKEND="mig",
            CASTSLICE_MIG_GPU_MODELS="H200",
            CASTSLICE_MIG_PROFILES="1g.10gb,3g.40gb",
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the server started and served with profiles no model of H200 has")
    assert started.stderr.strip().splitlines()[-1] == (
        "castslice: invalid configuration: CASTSLICE_MIG_PROFILES: 1g.10gb, 3g.40gb are "
        "profiles of no model in CASTSLICE_MIG_GPU_MODELS (H200); their profiles are 1g.18gb, "
        "1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb"
    )
    assert started.returncode != 0


def test_every_kind_of_setting_has_its_parser_and_its_chart_side() -> None:
    """A kind added to the table is read (environment.KINDS) and written into the chart
    (render.chart_values.CHART_KINDS), or this fails before the chart's files do."""
    assert set(KINDS) == set(CHART_KINDS) == set(Kind)
