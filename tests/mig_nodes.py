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
  (`<product>-MIG-<profile>`), `.replicas`, `.sharing-strategy`, `.memory`,
  `.multiprocessors`, `.slices.gi`, `.slices.ci`; under `single` the same on
  `nvidia.com/gpu.*`, overriding the GPU's.
- The layouts: mig-parted v0.15.0's config-default.yaml (tests/upstream/), which the GPU
  Operator's mig-manager applies from the node label `nvidia.com/mig.config` and reports in
  `nvidia.com/mig.config.state`.
- MIG memory in MiB and SMs: the profile table's, as real boards report them
  (tests/test_mig_profiles.py checks each row against its source; the H200's are the
  capture's, tests/upstream/h200-sxm-capture/).
- The H200: named and sized as the captured board reports (NVML `NVIDIA H200`, 143771 MiB,
  PCI id 0x233510DE); a board of another name takes `product`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from castslice.backends.mig.profiles import MODELS, gfd_product

UPSTREAM = Path(__file__).parent / "upstream"
# The PCI device id mig-parted's device-filter names each model by (its all-balanced).
_DEVICE_IDS = {"A100-80GB": "0x20B210DE", "H100-80GB": "0x233010DE", "H200": "0x233510DE"}
# NVML's name of each board, as real ones report it (tests/upstream/gpu-names.txt, the
# H200 capture).
NVML_NAMES = {
    "A100-80GB": "NVIDIA A100-SXM4-80GB",
    "H100-80GB": "NVIDIA H100 80GB HBM3",
    "H200": "NVIDIA H200",
}
# The GPU's own memory in MiB (GFD's nvidia.com/gpu.memory): nvidia-smi's memory.total of
# real boards (tests/upstream/gpu-names.txt, the H200 capture).
_GPU_MEMORY = {"A100-80GB": 81920, "H100-80GB": 81559, "H200": 143771}


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
    strategy: str,
    model: str,
    config: str,
    gpus: int = 1,
    state: str = "success",
    nvml_name: str | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, allocatable extended resources) of a node of `gpus` GPUs of `model` with the
    MIG layout `config`, under the device plugin's `strategy` (mixed or single); its boards
    report `nvml_name` (by default the model's real name)."""
    product = gfd_product(nvml_name or NVML_NAMES[model])
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
        labels.update(_mig_labels("nvidia.com/gpu", model, product, name, count * gpus))
        labels["nvidia.com/gpu.replicas"] = "1"
        return labels, {"nvidia.com/gpu": str(count * gpus)}
    resources = {}
    for name, count in devices.items():
        assert table.profile(name) is not None, name
        labels.update(_mig_labels(f"nvidia.com/mig-{name}", model, product, name, count * gpus))
        resources[f"nvidia.com/mig-{name}"] = str(count * gpus)
    return labels, resources


def _mig_labels(resource: str, model: str, product: str, name: str, count: int) -> dict[str, str]:
    profile = MODELS[model].profile(name)
    assert profile is not None
    return {
        f"{resource}.product": f"{product}-MIG-{name}",
        f"{resource}.count": str(count),
        f"{resource}.replicas": "1",
        f"{resource}.sharing-strategy": "none",
        f"{resource}.memory": str(profile.memory_mib),
        f"{resource}.multiprocessors": str(profile.sms),
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


# `nvidia-smi mig -lgip`'s GPU instance profile ids by (compute, memory) slices, the same on
# the A100, H100 and H200 (the H200 capture; tests/upstream/nvidia-smi-h100-80gb.txt), which
# the NVIDIA DRA driver puts in a MIG device's name.
_PROFILE_IDS = {(1, 1): 19, (1, 2): 15, (2, 2): 14, (3, 4): 9, (4, 4): 5, (7, 8): 0}


def mig_devices(
    model: str, config: str, minor: int = 0, nvml_name: str | None = None
) -> list[dict[str, Any]]:
    """The MIG devices of one GPU as the NVIDIA DRA driver v25.12.0 publishes them
    (cmd/gpu-kubelet-plugin/deviceinfo.go, MigDeviceInfo.GetDevice; the name from mig.go,
    ToCanonicalName: gpu-<minor>-mig-<profile without dots>-<profile id>-<placement>)."""
    table = MODELS[model]
    nvml_name = nvml_name or NVML_NAMES[model]
    parent = f"GPU-{minor:08d}-0000-0000-0000-{model.encode().hex()[:12]}"
    devices = []
    start = 0
    for name, count in layout(model, config).items():
        profile = table.profile(name)
        assert profile is not None
        profile_id = _PROFILE_IDS[(profile.compute_slices, profile.memory_slices)]
        for _ in range(count):
            capacity = {
                "multiprocessors": {"value": str(profile.sms)},
                "copyEngines": {"value": str(profile.compute_slices)},
                "decoders": {"value": "1"},
                "encoders": {"value": "0"},
                "jpegEngines": {"value": "0"},
                "ofaEngines": {"value": "0"},
                "memory": {"value": f"{profile.memory_mib}Mi"},
            }
            for memory_slice in range(start, start + profile.memory_slices):
                capacity[f"memorySlice{memory_slice}"] = {"value": "1"}
            devices.append(
                {
                    "name": f"gpu-{minor}-mig-{name.replace('.', '')}-{profile_id}-{start}",
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
