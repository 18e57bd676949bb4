"""GPU nodes with MIG as the NVIDIA device plugin and GPU Feature Discovery v0.20.0 show
them, for the unit tests of doctor and the end-to-end tests alike.

- Resources: the `mixed` strategy advertises `nvidia.com/mig-<profile>` per profile and no
  `nvidia.com/gpu` for a MIG-enabled GPU; `single` advertises each MIG device as one
  `nvidia.com/gpu` (k8s-device-plugin v0.20.0, internal/lm/mig-strategy.go, copied in
  tests/upstream/).
- Labels (internal/lm/resource.go and mig-strategy.go): `nvidia.com/mig.strategy`; the GPU's
  `nvidia.com/gpu.product` (the NVML name, spaces as `-`), `.count`, `.replicas` (0: a
  MIG-enabled GPU is labelled without sharing), `.sharing-strategy`, `.memory`; under
  `mixed` per profile `nvidia.com/mig-<profile>.count`, `.product`
  (`<product>-MIG-<profile>`), `.replicas`, `.sharing-strategy`, `.memory`, `.slices.gi`,
  `.slices.ci`; under `single` the same on `nvidia.com/gpu.*`, overriding the GPU's.
- The layouts: mig-parted v0.15.0's config-default.yaml (tests/upstream/), which the GPU
  Operator's mig-manager applies from the node label `nvidia.com/mig.config` and reports in
  `nvidia.com/mig.config.state`.
- MIG memory in MiB: NVML's `MemorySizeMB` of each GPU instance profile, as go-nvml's GPU
  models at 2f9e261 give it (tests/upstream/go-nvml-2f9e261-mock-gpus-*.go.txt).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from castslice.backends.mig.profiles import MODELS

UPSTREAM = Path(__file__).parent / "upstream"
# The PCI device id mig-parted's device-filter names each model by (its all-balanced).
_DEVICE_IDS = {"A100-80GB": "0x20B210DE", "H100-80GB": "0x233010DE"}
_PRODUCTS = {"A100-80GB": "NVIDIA-A100-SXM4-80GB", "H100-80GB": "NVIDIA-H100-80GB-HBM3"}
# The GPU's own memory in MiB, `MemoryMB` of the same models.
_GPU_MEMORY = {"A100-80GB": 81920, "H100-80GB": 81920}
_MIG_MEMORY = {
    "A100-80GB": {"1g.10gb": 9856, "1g.20gb": 19968, "2g.20gb": 19968, "3g.40gb": 40192,
                  "4g.40gb": 40192, "7g.80gb": 80384},
    "H100-80GB": {"1g.10gb": 10240, "1g.20gb": 20480, "2g.20gb": 20480, "3g.40gb": 40960,
                  "4g.40gb": 40960, "7g.80gb": 81920},
}  # fmt: skip


def layout(model: str, config: str) -> dict[str, int]:
    """The MIG devices one GPU of `model` gets from mig-parted's `config` ({} when disabled)."""
    configs = yaml.safe_load((UPSTREAM / "mig-parted-v0.15.0-config-default.yaml").read_text())
    entries = configs["mig-configs"][config]
    for entry in entries:
        filters = entry.get("device-filter")
        filters = [filters] if isinstance(filters, str) else filters or []
        if not filters or _DEVICE_IDS[model] in filters:
            return {name: int(count) for name, count in (entry.get("mig-devices") or {}).items()}
    raise AssertionError(f"{config} has no entry for {model}")


def gpu_node_side(
    strategy: str, model: str, config: str, gpus: int = 1, state: str = "success"
) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, allocatable extended resources) of a node of `gpus` GPUs of `model` with the
    MIG layout `config`, under the device plugin's `strategy` (mixed or single)."""
    product = _PRODUCTS[model]
    devices = layout(model, config)
    labels = {
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": strategy,
        "nvidia.com/mig.config": config,
        "nvidia.com/mig.config.state": state,
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": str(_GPU_MEMORY[model]),
        "nvidia.com/mps.capable": "false",
    }
    if not devices:
        labels.update({"nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none"})
        return labels, {"nvidia.com/gpu": str(gpus)}
    labels.update({"nvidia.com/gpu.replicas": "0", "nvidia.com/gpu.sharing-strategy": "none"})
    table = MODELS[model]
    if strategy == "single":
        # One profile per node, or GFD labels the product `-MIG-INVALID`.
        (name, count), *rest = devices.items()
        if rest:
            labels["nvidia.com/gpu.product"] = f"{product}-MIG-INVALID"
            return labels, {}
        labels.update(_mig_labels("nvidia.com/gpu", model, name, count * gpus))
        labels["nvidia.com/gpu.replicas"] = "1"
        return labels, {"nvidia.com/gpu": str(count * gpus)}
    resources = {}
    for name, count in devices.items():
        assert table.profile(name) is not None, name
        labels.update(_mig_labels(f"nvidia.com/mig-{name}", model, name, count * gpus))
        resources[f"nvidia.com/mig-{name}"] = str(count * gpus)
    return labels, resources


def _mig_labels(resource: str, model: str, name: str, count: int) -> dict[str, str]:
    profile = MODELS[model].profile(name)
    assert profile is not None
    return {
        f"{resource}.product": f"{_PRODUCTS[model]}-MIG-{name}",
        f"{resource}.count": str(count),
        f"{resource}.replicas": "1",
        f"{resource}.sharing-strategy": "none",
        f"{resource}.memory": str(_MIG_MEMORY[model][name]),
        f"{resource}.slices.gi": str(profile.compute_slices),
        f"{resource}.slices.ci": str(profile.compute_slices),
    }


def node(name: str, labels: dict[str, str], allocatable: dict[str, str]) -> dict[str, Any]:
    """A Ready node as the API server returns it."""
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


# `nvidia-smi mig -lgip`'s GPU instance profile ids on an 80 GB A100 or H100, which the
# NVIDIA DRA driver puts in a MIG device's name.
_PROFILE_IDS = {"1g.10gb": 19, "1g.20gb": 15, "2g.20gb": 14, "3g.40gb": 9, "4g.40gb": 5,
                "7g.80gb": 0}  # fmt: skip


def mig_devices(model: str, config: str, minor: int = 0) -> list[dict[str, Any]]:
    """The MIG devices of one GPU as the NVIDIA DRA driver v25.12.0 publishes them
    (cmd/gpu-kubelet-plugin/deviceinfo.go, MigDeviceInfo.GetDevice; the name from mig.go,
    ToCanonicalName: gpu-<minor>-mig-<profile without dots>-<profile id>-<placement>)."""
    table = MODELS[model]
    nvml_name = table.nvml_names[0]
    parent = f"GPU-{minor:08d}-0000-0000-0000-{model.encode().hex()[:12]}"
    devices = []
    start = 0
    for name, count in layout(model, config).items():
        profile = table.profile(name)
        assert profile is not None
        for _ in range(count):
            capacity = {
                "multiprocessors": {"value": str(14 * profile.compute_slices)},
                "copyEngines": {"value": str(profile.compute_slices)},
                "decoders": {"value": "1"},
                "encoders": {"value": "0"},
                "jpegEngines": {"value": "0"},
                "ofaEngines": {"value": "0"},
                "memory": {"value": f"{_MIG_MEMORY[model][name]}Mi"},
            }
            for memory_slice in range(start, start + profile.memory_slices):
                capacity[f"memorySlice{memory_slice}"] = {"value": "1"}
            devices.append(
                {
                    "name": f"gpu-{minor}-mig-{name.replace('.', '')}-{_PROFILE_IDS[name]}-{start}",
                    "attributes": {
                        "type": {"string": "mig"},
                        "uuid": {
                            "string": f"MIG-{minor:04d}{start:04d}-0000-0000-0000-000000000000"
                        },
                        "parentUUID": {"string": parent},
                        "profile": {"string": name},
                        "productName": {"string": nvml_name},
                        "brand": {"string": "Nvidia"},
                        "architecture": {"string": "Ampere" if "A100" in model else "Hopper"},
                        "cudaComputeCapability": {
                            "version": "8.0.0" if "A100" in model else "9.0.0"
                        },
                        "driverVersion": {"version": "580.95.5"},
                        "cudaDriverVersion": {"version": "13.0.0"},
                        "resource.kubernetes.io/pciBusID": {"string": f"0000:{minor + 7:02x}:00.0"},
                    },
                    "capacity": capacity,
                }
            )
            start += profile.memory_slices
    return devices


def resource_slice(node_name: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    """One ResourceSlice per node, in a pool named after it (the driver's layout)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
