"""NVIDIA's MIG profiles per GPU model: what each instance really is, as real boards report it.

The sources (tests/test_mig_profiles.py checks every row against verbatim copies of them under
tests/upstream/, and names the rows that rest on a mock):

- NVIDIA mig-parted v0.15.0, `deployments/systemd/config-default.yaml`
  (https://github.com/NVIDIA/mig-parted/blob/v0.15.0/deployments/systemd/config-default.yaml):
  the profile names per model and how many instances of each fit one GPU (`all-<profile>`).
- What real boards report: the NVML capture of one H200 SXM (driver 580.159.04; memory in
  MiB, SMs, name), and `nvidia-smi mig -lgip` of real boards in public threads and
  repositories (memory in GiB to two decimals, SMs), and the names NVML and GPU Feature
  Discovery report for real boards (`nvidia-smi`, node labels). A row's `source` says which.
- NVIDIA go-nvml, `pkg/nvml/mock/gpus/*.go` at 2f9e261: a mock, not hardware; only where no
  real source was found (`source == MOCK`, and names in `mock_names`).
- The NVIDIA device plugin / GPU Feature Discovery v0.20.0, `internal/lm/resource.go`
  (`sanitise`): the `nvidia.com/gpu.product` label is the NVML name with spaces turned
  into `-`; under the `single` strategy a MIG node's is `<product>-MIG-<profile>`.

A profile's name says its compute slices (`3g`) and NVIDIA's rounded memory (`40gb`); its
memory slices are eighths of the GPU's memory (quarters on A30), which the name does not say.
MIG keeps part of every memory slice for itself: a one-slice instance of an H200 has 16 GiB,
not the eighth of the board's 140 GiB that `1g.18gb` suggests. A share of a MIG GPU is
therefore a share of what MIG makes usable (`usable_mib`): the memory slices, each at what
the model's one-slice instance gets; and of its compute slices, each at the SMs of its
smallest one-slice instance. An instance holds a share when its MiB (and SMs) are at least
that share of those.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import NamedTuple

# Where a row's memory and SMs were read.
CAPTURE = "capture"  # NVML on a real board (MiB exact)
NVIDIA_SMI = "nvidia-smi"  # `nvidia-smi mig -lgip` of a real board (GiB to two decimals)
MOCK = "go-nvml mock"  # no real source found: go-nvml's mock GPU


class Profile(NamedTuple):
    name: str
    compute_slices: int
    memory_slices: int
    memory_gb: int
    # How many instances of this profile alone one GPU holds.
    per_gpu: int
    # The instance's memory and streaming multiprocessors, as NVML reports them.
    memory_mib: int
    sms: int
    source: str


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
    # Those of `nvml_names` that only go-nvml's mock gives.
    mock_names: frozenset[str] = frozenset()

    @property
    def products(self) -> tuple[str, ...]:
        """`nvidia.com/gpu.product` as GPU Feature Discovery labels a node of this model."""
        return tuple(dict.fromkeys(gfd_product(name) for name in self.nvml_names))

    def with_names(self, names: tuple[str, ...]) -> GpuModel:
        """The model recognised by `names` too (CASTSLICE_MIG_PRODUCT_NAMES)."""
        return self._replace(nvml_names=tuple(dict.fromkeys(self.nvml_names + names)))

    def compute(self, profile: Profile) -> Fraction:
        """The instance's share of the compute slices."""
        return Fraction(profile.compute_slices, self.compute_total)

    def memory(self, profile: Profile) -> Fraction:
        """The instance's share of the memory slices (what it takes of a GPU's layout)."""
        return Fraction(profile.memory_slices, self.memory_total)

    @property
    def usable_mib(self) -> int:
        """The memory a share is of: every memory slice at what a one-slice instance has."""
        one = min(p.memory_mib for p in self.profiles if p.memory_slices == 1)
        return one * self.memory_total

    @property
    def usable_sms(self) -> int:
        """The SMs a share is of: every compute slice at the fewest a one-slice instance has."""
        one = min(p.sms for p in self.profiles if p.compute_slices == 1)
        return one * self.compute_total

    def memory_share(self, profile: Profile) -> Fraction:
        return Fraction(profile.memory_mib, self.usable_mib)

    def compute_share(self, profile: Profile) -> Fraction:
        return Fraction(profile.sms, self.usable_sms)

    def profile(self, name: str) -> Profile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def full(self) -> Profile:
        """The instance that takes the whole GPU (`7g.*`, `4g.24gb` on A30)."""
        return next(p for p in self.profiles if p.compute_slices == self.compute_total)


Row = tuple[str, int, int, int, int, int, int]


def _rows(source: str, *rows: Row, mock: tuple[Row, ...] = ()) -> tuple[Profile, ...]:
    """Profiles read from `source`, and the rows only the mock gives, in one table."""
    found = [Profile(*row, source) for row in rows] + [Profile(*row, MOCK) for row in mock]
    return tuple(sorted(found, key=lambda p: (p.memory_slices, p.compute_slices)))


MODELS: Mapping[str, GpuModel] = {
    model.name: model
    for model in (
        GpuModel(
            "A100-40GB",
            7,
            8,
            _rows(
                NVIDIA_SMI,
                ("1g.5gb", 1, 1, 5, 7, 4864, 14),
                ("2g.10gb", 2, 2, 10, 3, 9984, 28),
                ("3g.20gb", 3, 4, 20, 2, 20096, 42),
                ("4g.20gb", 4, 4, 20, 1, 20096, 56),
                ("7g.40gb", 7, 8, 40, 1, 40448, 98),
                mock=(("1g.10gb", 1, 2, 10, 4, 9856, 14),),
            ),
            ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
            "nvidia-tesla-a100",
        ),
        GpuModel(
            "A100-80GB",
            7,
            8,
            _rows(
                MOCK,
                ("1g.10gb", 1, 1, 10, 7, 9856, 14),
                ("1g.20gb", 1, 2, 20, 4, 19968, 14),
                ("2g.20gb", 2, 2, 20, 3, 19968, 28),
                ("3g.40gb", 3, 4, 40, 2, 40192, 42),
                ("4g.40gb", 4, 4, 40, 1, 40192, 56),
                ("7g.80gb", 7, 8, 80, 1, 80384, 98),
            ),
            ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-80GB"),
            "nvidia-a100-80gb",
            frozenset({"NVIDIA A100-PCIE-80GB"}),
        ),
        GpuModel(
            "H100-80GB",
            7,
            8,
            _rows(
                NVIDIA_SMI,
                ("1g.10gb", 1, 1, 10, 7, 9984, 16),
                ("1g.20gb", 1, 2, 20, 4, 20096, 26),
                ("2g.20gb", 2, 2, 20, 3, 20096, 32),
                ("3g.40gb", 3, 4, 40, 2, 40448, 60),
                ("4g.40gb", 4, 4, 40, 1, 40448, 64),
                ("7g.80gb", 7, 8, 80, 1, 81152, 132),
            ),
            ("NVIDIA H100 80GB HBM3",),
            "nvidia-h100-80gb",
        ),
        GpuModel(
            "H100-NVL",
            7,
            8,
            _rows(
                NVIDIA_SMI,
                ("1g.12gb", 1, 1, 12, 7, 11008, 16),
                ("1g.24gb", 1, 2, 24, 4, 22144, 26),
                ("2g.24gb", 2, 2, 24, 3, 22144, 32),
                ("3g.47gb", 3, 4, 47, 2, 47488, 60),
                ("4g.47gb", 4, 4, 47, 1, 47488, 64),
                ("7g.94gb", 7, 8, 94, 1, 95360, 132),
            ),
            ("NVIDIA H100 NVL",),
            None,
        ),
        # The H100 of 96 GB, as on a GH200 (mig-parted: "H100-96GB, PG506-96GB, GH200, H20").
        GpuModel(
            "H100-96GB",
            7,
            8,
            _rows(
                NVIDIA_SMI,
                ("1g.12gb", 1, 1, 12, 7, 11264, 16),
                ("1g.24gb", 1, 2, 24, 4, 23552, 26),
                ("2g.24gb", 2, 2, 24, 3, 23552, 32),
                ("3g.48gb", 3, 4, 48, 2, 47616, 60),
                ("4g.48gb", 4, 4, 48, 1, 47616, 64),
                ("7g.96gb", 7, 8, 96, 1, 95232, 132),
            ),
            ("NVIDIA GH200 480GB",),
            None,
        ),
        GpuModel(
            "H200",
            7,
            8,
            _rows(
                CAPTURE,
                ("1g.18gb", 1, 1, 18, 7, 16384, 16),
                ("1g.35gb", 1, 2, 35, 4, 33280, 26),
                ("2g.35gb", 2, 2, 35, 3, 33280, 32),
                ("3g.71gb", 3, 4, 71, 2, 71424, 60),
                ("4g.71gb", 4, 4, 71, 1, 71424, 64),
                ("7g.141gb", 7, 8, 141, 1, 143360, 132),
            ),
            ("NVIDIA H200", "NVIDIA H200 141GB HBM3e"),
            "nvidia-h200-141gb",
            frozenset({"NVIDIA H200 141GB HBM3e"}),
        ),
        GpuModel(
            "B200",
            7,
            8,
            _rows(
                NVIDIA_SMI,
                ("1g.23gb", 1, 1, 23, 7, 22528, 18),
                ("1g.45gb", 1, 2, 45, 4, 45312, 30),
                ("2g.45gb", 2, 2, 45, 3, 45312, 36),
                mock=(
                    ("3g.90gb", 3, 4, 90, 2, 92160, 54),
                    ("4g.90gb", 4, 4, 90, 1, 92160, 72),
                    ("7g.180gb", 7, 8, 180, 1, 184320, 126),
                ),
            ),
            ("NVIDIA B200", "NVIDIA B200 180GB HBM3e"),
            "nvidia-b200",
            frozenset({"NVIDIA B200 180GB HBM3e"}),
        ),
        GpuModel(
            "A30",
            4,
            4,
            _rows(
                NVIDIA_SMI,
                ("1g.6gb", 1, 1, 6, 4, 5952, 14),
                ("2g.12gb", 2, 2, 12, 2, 11968, 28),
                ("4g.24gb", 4, 4, 24, 1, 24064, 56),
            ),
            ("NVIDIA A30", "NVIDIA A30-PCIE-24GB"),
            None,
            frozenset({"NVIDIA A30-PCIE-24GB"}),
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


def gib_text(mib: int) -> str:
    """MiB as nvidia-smi writes GiB (two decimals), without trailing zeros: 16, 32.5, 9.75."""
    return f"{mib / 1024:.2f}".rstrip("0").rstrip(".")


def describe(model: GpuModel, profile: Profile) -> str:
    """What one instance really is, as NVML reports it: `1g.18gb: 16 GiB, 16 of 132 SMs`
    (of the SMs the model's full instance has)."""
    return (
        f"{profile.name}: {gib_text(profile.memory_mib)} GiB, "
        f"{profile.sms} of {model.full().sms} SMs"
    )
