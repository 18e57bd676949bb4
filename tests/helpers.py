"""Helpers the test modules share: the one module they import them from, so that no test
module imports another."""

from __future__ import annotations

import copy
import datetime
import io
import json
import math
import os
import re
import shutil
import ssl
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from castslice import cli
from castslice.backends.mig.profiles import MODELS, GpuModel
from castslice.cli import main
from castslice.environment import load_config
from tests.conftest import ROOT
from tests.factories import (
    GPU,
    gpu_container,
)
from tests.mig_nodes import layout as mig_parted_layout


def run_cli(
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    environment: Mapping[str, str] | None = None,
) -> tuple[int, str, str]:
    import os

    for name in list(os.environ):
        if name.startswith("CASTSLICE_"):
            monkeypatch.delenv(name)
    for name, value in (environment or {}).items():
        monkeypatch.setenv(name, value)
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# kind -> (apiVersion, where its Pod template sits)
WORKLOAD_KINDS = {
    "Deployment": ("apps/v1", "spec.template"),
    "StatefulSet": ("apps/v1", "spec.template"),
    "DaemonSet": ("apps/v1", "spec.template"),
    "ReplicaSet": ("apps/v1", "spec.template"),
    "Job": ("batch/v1", "spec.template"),
    "CronJob": ("batch/v1", "spec.jobTemplate.spec.template"),
}


def workload(
    kind: str,
    template_annotations: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    containers: list[dict] | None = None,
    node_selector: dict[str, str] | None = None,
    name: str = "vllm",
) -> dict:
    """A workload as users write it, its Pod template built from the arguments."""
    template: dict[str, Any] = {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": containers if containers is not None else [gpu_container()]},
    }
    if template_annotations is not None:
        template["metadata"]["annotations"] = template_annotations
    if node_selector is not None:
        template["spec"]["nodeSelector"] = node_selector
    api_version, _ = WORKLOAD_KINDS[kind]
    metadata: dict[str, Any] = {"name": name, "namespace": "ml"}
    if annotations is not None:
        metadata["annotations"] = annotations
    if kind == "CronJob":
        template["spec"]["restartPolicy"] = "OnFailure"
        spec: dict[str, Any] = {
            "schedule": "0 3 * * *",
            "jobTemplate": {"spec": {"template": template}},
        }
    elif kind == "Job":
        template["spec"]["restartPolicy"] = "Never"
        spec = {"backoffLimit": 2, "template": template}
    else:
        spec = {"selector": {"matchLabels": {"app": name}}, "template": template}
        if kind != "DaemonSet":
            spec["replicas"] = 2
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def template_of(manifest: dict) -> dict:
    spec = manifest["spec"]
    return spec["jobTemplate"]["spec"]["template"] if "jobTemplate" in spec else spec["template"]


def pod_of(manifest: dict) -> dict:
    """The Pod the workload's controller would create from its template."""
    template = copy.deepcopy(template_of(manifest))
    return {"apiVersion": "v1", "kind": "Pod", **template}


def claimed(pod: dict, templates: list[str], lists: tuple[str, ...] = ("containers",)) -> dict:
    """`pod` with the GPU taken out of each GPU container, which claims the next template."""
    result = copy.deepcopy(pod)
    index = 0
    entries = []
    for list_name in lists:
        for item in result["spec"].get(list_name) or ():
            resources = item.get("resources") or {}
            if not any(GPU in (resources.get(f) or {}) for f in ("requests", "limits")):
                continue
            for field in ("requests", "limits"):
                (resources.get(field) or {}).pop(GPU, None)
            resources["claims"] = [{"name": f"castslice-gpu-{index}"}]
            entries.append(
                {"name": f"castslice-gpu-{index}", "resourceClaimTemplateName": templates[index]}
            )
            index += 1
    result["spec"].setdefault("resourceClaims", []).extend(entries)
    return result


TRACE = ROOT / "bench" / "packing" / "data" / "openb_pod_list_default.csv"


HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def run_plan(*argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "castslice", "plan", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )


def plan_in_process(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    environment: dict[str, str],
    *argv: str,
    stdin: str = "",
) -> str:
    """`castslice ARGV` in this process with exactly these CASTSLICE_* settings."""
    for name in [name for name in os.environ if name.startswith("CASTSLICE_")]:
        monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    capsys.readouterr()
    assert cli.main(list(argv)) == 0
    return capsys.readouterr().out


def applied_as_printed(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    today: dict[str, str],
    promised: dict,
    manifests: str,
) -> None:
    environment = {**today, **promised["environment"]}
    text = with_ratios(manifests, dict(promised["sliceRatios"]))
    again = json.loads(plan_in_process(monkeypatch, capsys, environment, "plan", "-f", "-", "-o",
                                 "json", stdin=text))  # fmt: skip
    # Today's MIG GPUs are counted as the mix of the profiles the settings offer: that the
    # nodes are laid out as all-balanced is no setting.
    if promised["settings"].get("layout") != "all-balanced":
        assert again["today"]["gpus"] == promised["gpus"], promised["name"]
    previewed = json.loads(plan_in_process(monkeypatch, capsys, environment, "preview", "-f", "-",
                                     "-o", "json", stdin=text))  # fmt: skip
    assert gpus_given(previewed, environment, promised) == promised["gpus"], promised["name"]


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
    "H100-NVL": ("0x232110DE", "# H100 NVL, H800 NVL"),
    "H100-96GB": ("0x234210DE", "# H100-96GB, PG506-96GB, GH200, H20"),
    "H200": ("0x233510DE", "# H200 141GB, H200 NVL"),
    "B200": ("0x290110DE", "# B200"),
    "A30": ("0x20B710DE", "# A30-24GB"),
}


class GpuInstanceProfile(NamedTuple):
    id: str
    slices: int
    instances: int
    memory_mb: int
    sms: int


def nvml_mock(gpu: str) -> str:
    return (UPSTREAM / f"go-nvml-2f9e261-mock-gpus-{gpu}.go.txt").read_text()


def gpu_instance_profiles(gpu: str, variable: str) -> list[GpuInstanceProfile]:
    """The GpuInstanceProfileInfo entries of one map in a go-nvml mock, as NVML reports them."""
    text = nvml_mock(gpu)
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
                int(fields["MultiprocessorCount"]),
            )
        )
    return found


def mig_parted_filters(entry: dict[str, Any]) -> list[str]:
    found = entry.get("device-filter") or []
    return [found] if isinstance(found, str) else list(found)


def nvml_allows(model: GpuModel, instances: Mapping[str, int]) -> bool:
    """Whether one GPU of `model` holds these instances: some choice of NVML placements that
    do not overlap, and no more compute slices than the GPU has (every choice tried)."""
    placements = nvml_placements(model)
    wanted = [name for name, count in instances.items() for _ in range(count)]
    compute = sum(int(name.split("g.")[0]) for name in wanted)
    if compute > model.compute_total:
        return False

    def place(index: int, taken: frozenset[int]) -> bool:
        if index == len(wanted):
            return True
        for start, size in placements[wanted[index]]:
            slots = frozenset(range(start, start + size))
            if not slots & taken and place(index + 1, taken | slots):
                return True
        return False

    return place(0, frozenset())


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, arguments = line.partition(" ")
            pairs.append((keyword.upper(), arguments.strip()))
    return pairs


ALL_INSTRUCTIONS = instructions(ROOT / "Dockerfile")


def stages() -> dict[str, list[tuple[str, str]]]:
    """Each stage by name, with the instructions of the stages it is built FROM first."""
    built: dict[str, list[tuple[str, str]]] = {}
    name = ""
    for instruction, arguments in ALL_INSTRUCTIONS:
        if instruction == "FROM":
            parent, _, name = arguments.partition(" AS ")
            built[name] = [*built.get(parent, [(instruction, parent)])]
        else:
            built[name].append((instruction, arguments))
    return built


STAGES = stages()


# `docker build .` builds the last stage: the webhook, as Cloud Run and the chart run it.
DOCKERFILE = STAGES[list(STAGES)[-1]]


REPORT = STAGES["report"]


def arguments_of(keyword: str, stage: list[tuple[str, str]] = DOCKERFILE) -> list[str]:
    return [arguments for instruction, arguments in stage if instruction == keyword]


HOST = "castslice.castslice.svc"


@dataclass(frozen=True)
class Pair:
    """A self-signed certificate and its key, PEM encoded."""

    cert: bytes
    key: bytes

    @property
    def der(self) -> bytes:
        return x509.load_pem_x509_certificate(self.cert).public_bytes(serialization.Encoding.DER)


def new_pair(serial: int) -> Pair:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(HOST)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Pair(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def client_context(version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    """A client that accepts any certificate (the test reads it) and, if given, one version."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if version is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.1, on purpose
            context.minimum_version = context.maximum_version = version
        if version < ssl.TLSVersion.TLSv1_2:
            # Let this client offer old protocols at all (OpenSSL 3 refuses by default).
            context.set_ciphers("DEFAULT:@SECLEVEL=0")
    return context


def image_app(directory: Path) -> Path:
    """What the image holds in /app (the Dockerfile copies main.py and castslice/)."""
    app = directory / "app"
    app.mkdir()
    shutil.copy(ROOT / "main.py", app)
    shutil.copytree(
        ROOT / "castslice", app / "castslice", ignore=shutil.ignore_patterns("__pycache__")
    )
    return app


def with_ratios(text: str, ratios: dict[str, int]) -> str:
    """The manifests with each Pod's castops.io/slice-ratio set as plan printed it."""
    items = [item for item in yaml.safe_load_all(text) if item]
    for item in items:
        for name, template, _ in templates_of(item):
            if name in ratios:
                template["metadata"]["annotations"][SLICE_RATIO] = str(ratios.pop(name))
    assert not ratios, f"plan named Pods the manifests do not have: {ratios}"
    return yaml.safe_dump_all(items)


def gpus_given(previewed: dict, environment: dict[str, str], promised: dict) -> int:
    """GPUs the Pods preview shows need, counted from what each container was given: whole
    GPUs, a share of a pool of M clients per GPU (its node label), a count of the shared
    resource or (dra) of the record's slices, each pool's shares packed onto whole GPUs; or
    a MIG instance (mig_gpus)."""
    config = load_config(environment)
    per_gpu = config.slices_per_gpu
    whole, pools = 0, Counter[object]()
    instances = Counter[str]()
    for item in previewed["items"]:
        for _, template, copies in templates_of(item):
            spec = template["spec"]
            record = (template["metadata"].get("annotations") or {}).get(
                "castslice.castops.io/applied"
            )
            degree = next(
                (int(value) for key, value in (spec.get("nodeSelector") or {}).items()
                 if key in DEGREE_LABELS), None,
            )  # fmt: skip
            instance = instance_on_node(spec)
            for container in spec["containers"]:
                limits = (container.get("resources") or {}).get("limits") or {}
                mig = [key for key in limits if key.startswith(MIG_RESOURCE)]
                if mig:
                    (key,) = mig
                    instances[key.removeprefix(MIG_RESOURCE)] += int(limits[key]) * copies
                elif instance and "nvidia.com/gpu" in limits:
                    instances[instance] += int(limits["nvidia.com/gpu"]) * copies
                elif degree:
                    pools[degree] += Fraction(copies, degree)
                elif config.shared_resource in limits:
                    pools["shared"] += Fraction(
                        int(limits[config.shared_resource]) * copies, per_gpu
                    )
                elif "nvidia.com/gpu" in limits:
                    whole += int(limits["nvidia.com/gpu"]) * copies
                elif record and container.get("resources", {}).get("claims"):
                    slices = json.loads(record)["slices"]
                    if slices < per_gpu:
                        pools["claims"] += Fraction(slices * copies, per_gpu)
                    else:
                        whole += -(-slices // per_gpu) * copies
    mig = mig_gpus(instances, MODELS[config.mig_gpu_models[0]], promised)
    return whole + sum(math.ceil(shares) for shares in pools.values()) + mig


def nvml_placements(model: GpuModel) -> dict[str, list[tuple[int, int]]]:
    """Each profile's (start, size) placements, as the go-nvml mock's NVML reports them."""
    text = nvml_mock(ORACLE_MOCKS[model.name])
    body = text.split("_GpuInstancePlacements = map[int][]nvml.GpuInstancePlacement{", 1)[1]
    body = body.split("\n}\n", 1)[0]
    by_id = {
        match.group(1): [
            (int(start), int(size))
            for start, size in re.findall(r"Start: (\d+), Size: (\d+)", match.group(2))
        ]
        for match in re.finditer(r"nvml\.GPU_INSTANCE_PROFILE_(\w+): \{(.*?)\n\t\},", body, re.S)
    }
    return {name: by_id[id_] for name, id_ in nvml_profile_ids(model).items()}


SLICE_RATIO = "castops.io/slice-ratio"


def templates_of(item: dict) -> list[tuple[str, dict, int]]:
    """(how plan names its Pods, the Pod template, how many Pods) of a Pod, a Deployment or
    a PyTorchJob, the kinds these tests use."""
    if item["kind"] == "Pod":
        return [(reference(item), item, 1)]
    if item["kind"] == "Deployment":
        return [(reference(item), item["spec"]["template"], item["spec"].get("replicas", 1))]
    specs = item["spec"]["pytorchReplicaSpecs"]
    return [
        (f"{reference(item)}: {kind}", spec["template"], spec.get("replicas", 1))
        for kind, spec in specs.items()
    ]


MIG_RESOURCE = "nvidia.com/mig-"


# The node labels each sharing backend places a share with: clients per GPU.
DEGREE_LABELS = ("nvidia.com/gpu.replicas", "cloud.google.com/gke-max-shared-clients-per-gpu")


def instance_on_node(spec: dict) -> str | None:
    """The MIG profile a Pod asking for `nvidia.com/gpu` gets from its node: GKE's partition
    size in its nodeSelector, or the `single` strategy's product label `<product>-MIG-<p>`
    its node affinity requires."""
    partition = (spec.get("nodeSelector") or {}).get("cloud.google.com/gke-gpu-partition-size")
    if partition:
        return str(partition)
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or ():
        for expression in term.get("matchExpressions") or ():
            values = expression.get("values") or []
            if expression["key"] == "nvidia.com/gpu.product" and "-MIG-" in "".join(values):
                return str(values[0]).rsplit("-MIG-", 1)[1]
    return None


def mig_gpus(instances: Counter[str], model: GpuModel, promised: dict) -> int:
    """GPUs holding the MIG instances preview gave, cut as plan printed: on GPUs laid out as
    mig-parted's all-balanced or all-<profile>, as many as the scarcest instance needs; in a
    mix, the layouts plan printed, each mig-parted's all-<profile> (with as many GPUs as
    its instances need) or one NVML's placements allow (the oracle of
    tests/test_mig_layouts.py), holding exactly these instances."""
    if not instances:
        return 0
    layout = promised["settings"]["layout"]
    if layout != "mix":
        per_gpu = mig_parted_layout(model.name, layout)
        return max(math.ceil(count / per_gpu[name]) for name, count in instances.items())
    cut = [pool for pool in promised["pools"] if "instancesPerGpu" in pool]
    # GKE's partition pools and the single strategy's nodes offer one profile each.
    one_profile = promised["environment"]["CASTSLICE_MIG_STACK"] in ("gke", "single")
    held, left = Counter[str](), Counter(instances)
    for pool in cut:
        per_gpu = pool["instancesPerGpu"]
        assert pool["pool"].startswith("all-") or not one_profile, pool
        if pool["pool"].startswith("all-"):
            assert per_gpu == mig_parted_layout(model.name, pool["pool"]), pool
            ((name, count),) = per_gpu.items()
            assert pool["gpus"] == math.ceil(left.pop(name) / count), pool
            continue
        assert nvml_allows(model, per_gpu), pool
        for name, count in per_gpu.items():
            held[name] += count * pool["gpus"]
    assert held == left, promised["name"]
    return sum(pool["gpus"] for pool in cut)


# The models whose go-nvml mock lists the placements the hardware has (the H100, H200 and
# B200 mocks list sizes of their own, not NVML's: 3 memory slices for a 3g instance).
PLACEMENT_MOCKS = {"A100-80GB": "a100", "A100-40GB": "a100", "A30": "a30"}


# NVIDIA's MIG User Guide ("H100 MIG Profiles") gives the H100-80GB the A100-80GB's
# placements: the oracle reads them from the A100's.
ORACLE_MOCKS = {**PLACEMENT_MOCKS, "H100-80GB": "a100"}


def nvml_profile_ids(model: GpuModel) -> dict[str, str]:
    """Each profile's NVML GPU instance profile id, matched by compute slices and share of
    the memory, as tests/test_mig_profiles.py matches them."""
    reported = [p for p in gpu_instance_profiles(*MOCKS[model.name]) if "REV1" not in p.id]
    full = max(reported, key=lambda p: p.slices)
    ids = {}
    for profile in model.profiles:
        (match,) = [
            p
            for p in reported
            if p.slices == profile.compute_slices
            and round(Fraction(p.memory_mb, full.memory_mb) * model.memory_total)
            == profile.memory_slices
        ]
        ids[profile.name] = match.id
    return ids


def reference(item: dict) -> str:
    metadata = item["metadata"]
    return f"{item['kind']} {metadata.get('namespace') or 'default'}/{metadata['name']}"
