"""NVIDIA's MIG profiles per GPU model: what each instance really is.

The sources, and what each gives (tests/test_mig_profiles.py checks every row against
verbatim copies of them under tests/upstream/):

- NVIDIA mig-parted v0.15.0, `deployments/systemd/config-default.yaml`
  (https://github.com/NVIDIA/mig-parted/blob/v0.15.0/deployments/systemd/config-default.yaml):
  the profile names per model and how many instances of each fit one GPU (`all-<profile>`).
- NVIDIA go-nvml, `pkg/nvml/mock/gpus/{a100,h100,h200,b200,a30}.go` at 2f9e261
  (https://github.com/NVIDIA/go-nvml/tree/2f9e261fe40a7a1c54783d66805e8920564763b4/pkg/nvml/mock/gpus):
  the GPU instance profiles as NVML reports them: compute slices (`SliceCount`), instances
  (`InstanceCount`) and memory (`MemorySizeMB`, whose share of the full instance's is the
  share of the memory slices), and the product names NVML reports.
- The NVIDIA device plugin / GPU Feature Discovery v0.20.0, `internal/lm/resource.go`
  (`sanitise`): the `nvidia.com/gpu.product` label is the NVML name with spaces turned
  into `-`; under the `single` strategy a MIG node's is `<product>-MIG-<profile>`.

A profile's name says its compute slices (`3g`) and its memory (`40gb`); its memory
slices are eighths of the GPU's memory (quarters on A30), which the name does not say:
`1g.10gb` is an eighth of an A100-80GB and a quarter of an A100-40GB.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import NamedTuple


class Profile(NamedTuple):
    name: str
    compute_slices: int
    memory_slices: int
    memory_gb: int
    # How many instances of this profile alone one GPU holds.
    per_gpu: int


class GpuModel(NamedTuple):
    """A MIG-capable GPU model and the profiles NVIDIA defines for it."""

    name: str
    compute_total: int
    memory_total: int
    profiles: tuple[Profile, ...]
    # The names NVML gives GPUs of this model (the NVIDIA DRA driver's `productName`).
    nvml_names: tuple[str, ...]
    # `cloud.google.com/gke-accelerator` of GKE's node pools of this model, if GKE has it.
    gke_accelerator: str | None

    @property
    def products(self) -> tuple[str, ...]:
        """`nvidia.com/gpu.product` as GPU Feature Discovery labels a node of this model."""
        return tuple(gfd_product(name) for name in self.nvml_names)

    def compute(self, profile: Profile) -> Fraction:
        return Fraction(profile.compute_slices, self.compute_total)

    def memory(self, profile: Profile) -> Fraction:
        return Fraction(profile.memory_slices, self.memory_total)

    def profile(self, name: str) -> Profile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def full(self) -> Profile:
        """The instance that takes the whole GPU (`7g.*`, `4g.24gb` on A30)."""
        return next(p for p in self.profiles if p.compute_slices == self.compute_total)


def _eighths(*rows: tuple[str, int, int, int, int]) -> tuple[Profile, ...]:
    return tuple(Profile(*row) for row in rows)


# The 80 GB geometry of A100 and H100: the same names, slices and counts.
_80GB = _eighths(
    ("1g.10gb", 1, 1, 10, 7),
    ("1g.20gb", 1, 2, 20, 4),
    ("2g.20gb", 2, 2, 20, 3),
    ("3g.40gb", 3, 4, 40, 2),
    ("4g.40gb", 4, 4, 40, 1),
    ("7g.80gb", 7, 8, 80, 1),
)

MODELS: Mapping[str, GpuModel] = {
    model.name: model
    for model in (
        GpuModel(
            "A100-40GB",
            7,
            8,
            _eighths(
                ("1g.5gb", 1, 1, 5, 7),
                ("1g.10gb", 1, 2, 10, 4),
                ("2g.10gb", 2, 2, 10, 3),
                ("3g.20gb", 3, 4, 20, 2),
                ("4g.20gb", 4, 4, 20, 1),
                ("7g.40gb", 7, 8, 40, 1),
            ),
            ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
            "nvidia-tesla-a100",
        ),
        GpuModel(
            "A100-80GB",
            7,
            8,
            _80GB,
            ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-80GB"),
            "nvidia-a100-80gb",
        ),
        GpuModel("H100-80GB", 7, 8, _80GB, ("NVIDIA H100 80GB HBM3",), "nvidia-h100-80gb"),
        GpuModel(
            "H200",
            7,
            8,
            _eighths(
                ("1g.18gb", 1, 1, 18, 7),
                ("1g.35gb", 1, 2, 35, 4),
                ("2g.35gb", 2, 2, 35, 3),
                ("3g.71gb", 3, 4, 71, 2),
                ("4g.71gb", 4, 4, 71, 1),
                ("7g.141gb", 7, 8, 141, 1),
            ),
            ("NVIDIA H200 141GB HBM3e",),
            "nvidia-h200-141gb",
        ),
        GpuModel(
            "B200",
            7,
            8,
            _eighths(
                ("1g.23gb", 1, 1, 23, 7),
                ("1g.45gb", 1, 2, 45, 4),
                ("2g.45gb", 2, 2, 45, 3),
                ("3g.90gb", 3, 4, 90, 2),
                ("4g.90gb", 4, 4, 90, 1),
                ("7g.180gb", 7, 8, 180, 1),
            ),
            ("NVIDIA B200 180GB HBM3e",),
            "nvidia-b200",
        ),
        GpuModel(
            "A30",
            4,
            4,
            _eighths(
                ("1g.6gb", 1, 1, 6, 4),
                ("2g.12gb", 2, 2, 12, 2),
                ("4g.24gb", 4, 4, 24, 1),
            ),
            ("NVIDIA A30-PCIE-24GB",),
            None,
        ),
    )
}

PROFILE_NAMES: tuple[str, ...] = tuple(
    sorted(
        {profile.name for model in MODELS.values() for profile in model.profiles},
        key=lambda name: (int(name.split("g.")[0]), int(name.split(".")[1].removesuffix("gb"))),
    )
)


def gfd_product(nvml_name: str) -> str:
    """GPU Feature Discovery's `sanitise` (k8s-device-plugin v0.20.0, internal/lm/resource.go):
    characters outside `A-Za-z0-9-_. ` dropped, runs of spaces turned into one `-`."""
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", nvml_name).split())


def fraction_text(share: Fraction) -> str:
    return "all" if share == 1 else f"{share.numerator}/{share.denominator}"


def describe(model: GpuModel, profile: Profile) -> str:
    """What one instance really is, e.g. `3g.40gb: 3/7 of the compute, 1/2 of the memory`."""
    return (
        f"{profile.name}: {fraction_text(model.compute(profile))} of the compute, "
        f"{fraction_text(model.memory(profile))} of the memory"
    )
