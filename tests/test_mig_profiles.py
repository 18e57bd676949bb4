"""Every row of the MIG profile table against NVIDIA's own sources, copied verbatim into
tests/upstream/ (not against numbers of our own):

- mig-parted-v0.15.0-config-default.yaml: NVIDIA/mig-parted v0.15.0,
  deployments/systemd/config-default.yaml
  (https://github.com/NVIDIA/mig-parted/blob/v0.15.0/deployments/systemd/config-default.yaml)
- go-nvml-2f9e261-mock-gpus-<gpu>.go.txt: NVIDIA/go-nvml at
  2f9e261fe40a7a1c54783d66805e8920564763b4, pkg/nvml/mock/gpus/<gpu>.go
  (https://github.com/NVIDIA/go-nvml/tree/2f9e261fe40a7a1c54783d66805e8920564763b4/pkg/nvml/mock/gpus)
- k8s-device-plugin-v0.20.0-resource.go.txt: NVIDIA/k8s-device-plugin v0.20.0,
  internal/lm/resource.go (`sanitise`, the product label)
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from castslice.backends.mig.profiles import MODELS, GpuModel, Profile, describe, gfd_product

UPSTREAM = Path(__file__).parent / "upstream"
MIG_PARTED = yaml.safe_load((UPSTREAM / "mig-parted-v0.15.0-config-default.yaml").read_text())

# Which go-nvml mock file and profile map models each of the table's GPU models.
MOCKS = {
    "A100-40GB": ("a100", "a100_40gb_GpuInstanceProfiles"),
    "A100-80GB": ("a100", "a100_80gb_GpuInstanceProfiles"),
    "H100-80GB": ("h100", "h100_80gb_GpuInstanceProfiles"),
    "H200": ("h200", "h200_141gb_GpuInstanceProfiles"),
    "B200": ("b200", "b200_180gb_GpuInstanceProfiles"),
    "A30": ("a30", "a30_24gb_GpuInstanceProfiles"),
}
# The PCI device id mig-parted's `all-balanced` names each model by, under a comment that
# names the model (checked below).
DEVICE_IDS = {
    "A100-40GB": ("0x20B010DE", "# A100-40GB, A800-40GB"),
    "A100-80GB": ("0x20B210DE", "# H100-80GB, H800-80GB, A100-80GB, A800-80GB"),
    "H100-80GB": ("0x233010DE", "# H100-80GB, H800-80GB, A100-80GB, A800-80GB"),
    "H200": ("0x233510DE", "# H200 141GB, H200 NVL"),
    "B200": ("0x290110DE", "# B200"),
    "A30": ("0x20B710DE", "# A30-24GB"),
}


class GpuInstanceProfile(NamedTuple):
    id: str
    slices: int
    instances: int
    memory_mb: int


def _mock(gpu: str) -> str:
    return (UPSTREAM / f"go-nvml-2f9e261-mock-gpus-{gpu}.go.txt").read_text()


def gpu_instance_profiles(gpu: str, variable: str) -> list[GpuInstanceProfile]:
    """The GpuInstanceProfileInfo entries of one map in a go-nvml mock, as NVML reports them."""
    text = _mock(gpu)
    body = text.split(f"{variable} = map[int]nvml.GpuInstanceProfileInfo{{", 1)[1]
    body = body.split("\n}", 1)[0] if body.lstrip("\n").startswith("\tnvml") else body
    body = re.split(r"\n\t?}\n", body, maxsplit=1)[0]
    found = []
    for match in re.finditer(r"nvml\.GPU_INSTANCE_PROFILE_(\w+): \{(.*?)\n\t*\},", body, re.S):
        fields = dict(re.findall(r"(\w+):\s+(\d+)", match.group(2)))
        found.append(
            GpuInstanceProfile(
                match.group(1),
                int(fields["SliceCount"]),
                int(fields["InstanceCount"]),
                int(fields["MemorySizeMB"]),
            )
        )
    return found


def nvml_names(gpu: str) -> list[str]:
    return re.findall(r'Name:\s+"([^"]+)"', _mock(gpu))


def sanitise(name: str) -> str:
    """GPU Feature Discovery's product label of an NVML name (k8s-device-plugin v0.20.0,
    internal/lm/resource.go, `sanitise`), read from the copy of that file."""
    source = (UPSTREAM / "k8s-device-plugin-v0.20.0-resource.go.txt").read_text()
    assert 're := regexp.MustCompile("[^A-Za-z0-9-_. ]")' in source
    assert 'sanitised = strings.Join(strings.Fields(input), "-")' in source
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", name).split())


def mig_parted_count(model: str, profile: str) -> int:
    """How many `profile` instances mig-parted's `all-<profile>` config makes on one GPU of
    `model`: the entry whose device-filter names the model's PCI id, else the only entry."""
    entries: list[dict[str, Any]] = MIG_PARTED["mig-configs"][f"all-{profile}"]
    device = DEVICE_IDS[model][0]
    chosen = [e for e in entries if device in _filters(e)]
    if not chosen:
        chosen = [e for e in entries if "device-filter" not in e] or entries
    assert len(chosen) == 1, (model, profile, chosen)
    devices = chosen[0]["mig-devices"]
    assert set(devices) == {profile}
    return int(devices[profile])


def _filters(entry: dict[str, Any]) -> list[str]:
    found = entry.get("device-filter") or []
    return [found] if isinstance(found, str) else list(found)


ROWS = [(model, profile) for model in MODELS.values() for profile in model.profiles]


@pytest.mark.parametrize(("model", "profile"), ROWS, ids=[f"{m.name}-{p.name}" for m, p in ROWS])
def test_each_profile_is_nvidias(model: GpuModel, profile: Profile) -> None:
    # The name: compute slices and memory, as NVIDIA spells it.
    assert profile.name == f"{profile.compute_slices}g.{profile.memory_gb}gb"
    # mig-parted makes exactly this many of it on one GPU of this model.
    assert mig_parted_count(model.name, profile.name) == profile.per_gpu
    # NVML's GPU instance profile with these compute slices, this many instances and this
    # share of the memory (the full instance's memory is all of it).
    reported = [p for p in gpu_instance_profiles(*MOCKS[model.name]) if "REV1" not in p.id]
    full = max(reported, key=lambda p: p.slices)
    assert full.slices == model.compute_total
    matching = [
        p
        for p in reported
        if p.slices == profile.compute_slices
        and round(Fraction(p.memory_mb, full.memory_mb) * model.memory_total)
        == profile.memory_slices
    ]
    assert len(matching) == 1, (profile, reported)
    assert matching[0].instances == profile.per_gpu


@pytest.mark.parametrize("model", MODELS.values(), ids=list(MODELS))
def test_the_device_ids_are_the_models(model: GpuModel) -> None:
    device, comment = DEVICE_IDS[model.name]
    text = (UPSTREAM / "mig-parted-v0.15.0-config-default.yaml").read_text()
    balanced = text.split("  all-balanced:", 1)[1]
    after_comment = balanced.split(f"    {comment}\n", 1)[1]
    assert device in after_comment.split("\n", 1)[0]


@pytest.mark.parametrize("model", MODELS.values(), ids=list(MODELS))
def test_every_profile_nvidia_defines_is_in_the_table(model: GpuModel) -> None:
    reported = [p for p in gpu_instance_profiles(*MOCKS[model.name]) if "REV1" not in p.id]
    assert len(reported) == len(model.profiles)


@pytest.mark.parametrize("model", MODELS.values(), ids=list(MODELS))
def test_the_names_are_nvmls_and_the_product_labels_gfds(model: GpuModel) -> None:
    # go-nvml's A100-SXM4-40GB mock is named "Mock NVIDIA A100-SXM4-40GB"; NVML says "NVIDIA".
    names = {name.removeprefix("Mock ") for name in nvml_names(MOCKS[model.name][0])}
    assert model.nvml_names
    assert set(model.nvml_names) <= names
    assert model.products == tuple(sanitise(name) for name in model.nvml_names)


@pytest.mark.parametrize(
    "name", ["NVIDIA A100-SXM4-80GB", "NVIDIA  H100 80GB HBM3", "Tesla T4 (rev 1)", "GH200/144G"]
)
def test_the_product_label_is_gfds_sanitise(name: str) -> None:
    assert gfd_product(name) == sanitise(name)


def test_the_real_fractions_are_said() -> None:
    a100 = MODELS["A100-80GB"]
    assert describe(a100, a100.profile("3g.40gb")) == (  # type: ignore[arg-type]
        "3g.40gb: 3/7 of the compute, 1/2 of the memory"
    )
    a30 = MODELS["A30"]
    assert describe(a30, a30.profile("4g.24gb")) == (  # type: ignore[arg-type]
        "4g.24gb: all of the compute, all of the memory"
    )
    small = MODELS["A100-40GB"]
    assert describe(small, small.profile("1g.10gb")) == (  # type: ignore[arg-type]
        "1g.10gb: 1/7 of the compute, 1/4 of the memory"
    )
