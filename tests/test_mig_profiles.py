"""Every row of the MIG profile table against what real boards report, copied verbatim into
tests/upstream/ with the citation at the top of each copy (not against numbers of our own):

- h200-sxm-capture/: one NVIDIA H200 SXM read through NVML and `nvidia-smi mig` (driver
  580.159.04; its README says how): the name, every GPU instance profile's memory in MiB,
  SMs, instances and placements.
- nvidia-smi-<board>.txt: `nvidia-smi mig -lgip` of real boards in public threads and
  repositories (memory in GiB to two decimals, SMs, instances), each file citing its page.
- gpu-names.txt: the names real boards report, from `nvidia-smi` and GPU Feature Discovery's
  node labels in public issues and in clusters' public configuration.
- mig-parted-v0.15.0-config-default.yaml: NVIDIA/mig-parted v0.15.0,
  deployments/systemd/config-default.yaml: the profiles per model and instances per GPU.
- go-nvml-2f9e261-mock-gpus-<gpu>.go.txt: NVIDIA/go-nvml at 2f9e261, pkg/nvml/mock/gpus/:
  a mock, the source only of the rows and names MOCK_ROWS and MOCK_NAMES list.
- k8s-device-plugin-v0.20.0-resource.go.txt: NVIDIA/k8s-device-plugin v0.20.0,
  internal/lm/resource.go (`sanitise`, the product label).

NVIDIA's MIG User Guide ("Supported MIG Profiles") gives each profile's fraction of the
memory and of the SMs, not MiB or SM counts; the slices here are those fractions.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from typing import Any, NamedTuple

import pytest

from castslice.backends.mig.profiles import (
    CAPTURE,
    MOCK,
    MODELS,
    NVIDIA_SMI,
    GpuModel,
    Profile,
    describe,
    gfd_product,
)
from tests.helpers import (
    DEVICE_IDS,
    MIG_PARTED,
    MOCKS,
    UPSTREAM,
    gpu_instance_profiles,
    mig_parted_filters,
    nvml_mock,
)

CAPTURED = json.loads((UPSTREAM / "h200-sxm-capture" / "nvml-mig.json").read_text())["gpus"][0]

# The real board's `nvidia-smi mig -lgip` each model's rows are read from.
LGIP = {
    "A100-40GB": "nvidia-smi-a100-40gb.txt",
    "H100-80GB": "nvidia-smi-h100-80gb.txt",
    "H100-NVL": "nvidia-smi-h100-nvl.txt",
    "H100-96GB": "nvidia-smi-gh200.txt",
    "B200": "nvidia-smi-b200.txt",
    "A30": "nvidia-smi-a30.txt",
}
# The rows no real source was found for: their MiB and SMs are go-nvml's mock's.
MOCK_ROWS = {
    ("A100-40GB", "1g.10gb"),
    *(("A100-80GB", p.name) for p in MODELS["A100-80GB"].profiles),
    ("B200", "3g.90gb"),
    ("B200", "4g.90gb"),
    ("B200", "7g.180gb"),
}
# The names no real source was found for: go-nvml's mock gives them.
MOCK_NAMES = {
    "NVIDIA A100-PCIE-80GB",
    "NVIDIA H200 141GB HBM3e",
    "NVIDIA B200 180GB HBM3e",
    "NVIDIA A30-PCIE-24GB",
}


class LgipRow(NamedTuple):
    """One profile of `nvidia-smi mig -lgip`: its GiB as printed, SMs, and instances."""

    gib: str
    sms: int
    instances: int


def lgip(model: str) -> dict[str, LgipRow]:
    """The profiles (without media-extension variants) of a real board's `-lgip`."""
    text = (UPSTREAM / LGIP[model]).read_text()
    rows = re.findall(
        r"^\|\s+\d+\s+MIG (\S+)\s+\d+\s+\d+/(\d+)\s+([\d.]+)\s+(?:Yes|No)\s+(\d+)\s", text, re.M
    )
    return {name: LgipRow(gib, int(sms), int(total)) for name, total, gib, sms in rows}


def captured(name: str) -> dict[str, Any]:
    """The H200 capture's GPU instance profile `MIG <name>`, as NVML reported it."""
    found = [p for p in CAPTURED["gpu_instance_profiles"] if p.get("name") == f"MIG {name}"]
    assert len(found) == 1, name
    return found[0]


def nvml_names(gpu: str) -> list[str]:
    return re.findall(r'Name:\s+"([^"]+)"', nvml_mock(gpu))


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
    chosen = [e for e in entries if device in mig_parted_filters(e)]
    if not chosen:
        chosen = [e for e in entries if "device-filter" not in e] or entries
    assert len(chosen) == 1, (model, profile, chosen)
    devices = chosen[0]["mig-devices"]
    assert set(devices) == {profile}
    return int(devices[profile])


ROWS = [(model, profile) for model in MODELS.values() for profile in model.profiles]


@pytest.mark.parametrize(("model", "profile"), ROWS, ids=[f"{m.name}-{p.name}" for m, p in ROWS])
def test_each_profile_is_what_the_board_reports(model: GpuModel, profile: Profile) -> None:
    # The name: compute slices and memory, as NVIDIA spells it.
    assert profile.name == f"{profile.compute_slices}g.{profile.memory_gb}gb"
    # mig-parted makes exactly this many of it on one GPU of this model.
    assert mig_parted_count(model.name, profile.name) == profile.per_gpu
    assert ((model.name, profile.name) in MOCK_ROWS) == (profile.source == MOCK)
    if profile.source == CAPTURE:
        assert model.name == "H200"
        found = captured(profile.name)
        assert found["memorySizeMB"] == profile.memory_mib
        assert found["multiprocessorCount"] == profile.sms
        assert found["instanceCount"] == profile.per_gpu
        assert found["sliceCount"] == profile.compute_slices
        # A placement's size is the memory slices it takes.
        assert {size for _, size in found["placements"]} == {profile.memory_slices}
    elif profile.source == NVIDIA_SMI:
        row = lgip(model.name)[profile.name]
        # nvidia-smi prints MiB / 1024 to two decimals; MIG memory comes in 64 MiB steps.
        assert f"{profile.memory_mib / 1024:.2f}" == row.gib
        assert profile.memory_mib % 64 == 0
        assert row.sms == profile.sms
        assert row.instances == profile.per_gpu
    else:
        _check_against_the_mock(model, profile)


def _check_against_the_mock(model: GpuModel, profile: Profile) -> None:
    reported = [p for p in gpu_instance_profiles(*MOCKS[model.name]) if "REV1" not in p.id]
    full = max(reported, key=lambda p: p.slices)
    matching = [
        p
        for p in reported
        if p.slices == profile.compute_slices
        and round(Fraction(p.memory_mb, full.memory_mb) * model.memory_total)
        == profile.memory_slices
    ]
    assert len(matching) == 1, (profile, reported)
    assert matching[0].instances == profile.per_gpu
    assert matching[0].memory_mb == profile.memory_mib
    assert matching[0].sms == profile.sms


def test_the_rows_that_rest_on_a_mock_are_these() -> None:
    """The rows no real board's report was found for (named here, so a new source that
    replaces one shows): A100-80GB altogether, A100-40GB's 1g.10gb (the A100 40GB capture
    predates it), B200's 3g.90gb, 4g.90gb and 7g.180gb (the B200 thread stops at 2g.45gb)."""
    on_a_mock = {(m.name, p.name) for m, p in ROWS if p.source == MOCK}
    assert on_a_mock == MOCK_ROWS
    names = {name for model in MODELS.values() for name in model.mock_names}
    assert names == MOCK_NAMES


def test_the_h200_is_the_capture() -> None:
    h200 = MODELS["H200"]
    assert CAPTURED["name"] in h200.nvml_names
    assert CAPTURED["pci_device_id"].upper().replace("X", "x") == DEVICE_IDS["H200"][0]
    # Every profile NVML lists (but the media-extension one) is in the table.
    listed = {p["name"] for p in CAPTURED["gpu_instance_profiles"] if "name" in p}
    assert {f"MIG {p.name}" for p in h200.profiles} == listed - {"MIG 1g.18gb+me"}
    # The full instance has less than the board: MIG keeps some memory for itself.
    board = CAPTURED["memory_total_bytes"] // 2**20
    assert board == 143771
    assert h200.full().memory_mib < board


@pytest.mark.parametrize("model", sorted(LGIP))
def test_every_profile_the_board_lists_is_in_the_table(model: str) -> None:
    listed = {name for name in lgip(model) if "+" not in name}
    table = {p.name for p in MODELS[model].profiles if p.source == NVIDIA_SMI}
    assert listed == table


@pytest.mark.parametrize("model", MODELS.values(), ids=list(MODELS))
def test_the_device_ids_are_the_models(model: GpuModel) -> None:
    device, comment = DEVICE_IDS[model.name]
    text = (UPSTREAM / "mig-parted-v0.15.0-config-default.yaml").read_text()
    balanced = text.split("  all-balanced:", 1)[1]
    after_comment = balanced.split(f"    {comment}\n", 1)[1]
    assert device in after_comment.split("\n", 1)[0]


def _real_names_text() -> str:
    files = [UPSTREAM / "gpu-names.txt", UPSTREAM / "h200-sxm-capture" / "nvidia-smi-mig.txt"]
    files += [UPSTREAM / name for name in LGIP.values()]
    return "\n".join(path.read_text() for path in files)


@pytest.mark.parametrize("model", MODELS.values(), ids=list(MODELS))
def test_the_names_are_what_real_boards_report(model: GpuModel) -> None:
    assert model.products == tuple(dict.fromkeys(sanitise(name) for name in model.nvml_names))
    real = _real_names_text()
    mock = {name.removeprefix("Mock ") for gpu, _ in MOCKS.values() for name in nvml_names(gpu)}
    for name in model.nvml_names:
        if name in model.mock_names:
            assert name in mock, name
        else:
            # The NVML name as nvidia-smi prints it, or its GPU Feature Discovery label.
            assert re.search(rf"(^|\s){re.escape(name)}[\s,]", real, re.M) or re.search(
                rf"gpu\.product[=:]\s*{re.escape(sanitise(name))}\b|^{re.escape(sanitise(name))} ",
                real,
                re.M,
            ), name


@pytest.mark.parametrize(
    "name", ["NVIDIA A100-SXM4-80GB", "NVIDIA  H100 80GB HBM3", "Tesla T4 (rev 1)", "GH200/144G"]
)
def test_the_product_label_is_gfds_sanitise(name: str) -> None:
    assert gfd_product(name) == sanitise(name)


@pytest.mark.parametrize("model", MODELS.values(), ids=list(MODELS))
def test_an_instance_of_k_memory_slices_holds_k_of_them(model: GpuModel) -> None:
    """What MIG makes usable, a share's measure: every memory slice at what a one-slice
    instance gets. Each instance has at least its slices' worth of it, in MiB."""
    for profile in model.profiles:
        assert model.memory_share(profile) >= model.memory(profile), profile


def test_what_an_instance_is_is_said_in_mib_and_sms() -> None:
    h200 = MODELS["H200"]
    assert describe(h200, h200.profiles[0]) == "1g.18gb: 16 GiB, 16 of 132 SMs"
    assert describe(h200, h200.full()) == "7g.141gb: 140 GiB, 132 of 132 SMs"
    h100 = MODELS["H100-80GB"]
    assert describe(h100, h100.profile("1g.20gb")) == (  # type: ignore[arg-type]
        "1g.20gb: 19.62 GiB, 26 of 132 SMs"
    )
    a30 = MODELS["A30"]
    assert describe(a30, a30.full()) == "4g.24gb: 23.5 GiB, 56 of 56 SMs"
