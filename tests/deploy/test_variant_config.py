"""Every setting and the enrolment policy reach the Knative variant (the chart: test_chart).

Each variant is rendered with `kubectl kustomize` from a copy of infra/ whose
castslice.env sets every configuration variable to a value other than its default
and whose policy.yaml holds a rule. The container's environment is resolved as the
kubelet does (the envFrom ConfigMaps, then env) and must hold every value; the
policy must be mounted, read-only, where CASTSLICE_POLICY_FILE points.
"""

from __future__ import annotations

import copy
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from castslice.environment import load_config
from castslice.settings.config import Config

from .conftest import kubectl
from .variants import (
    INFRA,
    KUSTOMIZE_VARIANTS,
    SAMPLE_HOST,
    SAMPLE_IMAGE,
    SAMPLE_TOKEN,
    built_in,
    config_map,
    container_environment,
    copy_infra,
    only,
    render,
)

Objects = list[dict[str, Any]]
Render = Callable[..., Objects]

# A value other than the default for every variable both variants take.
SETTINGS = {
    "CASTSLICE_SHARED_RESOURCE": "example.com/gpu-slice",
    "CASTSLICE_GPU_RESOURCE": "example.com/gpu",
    "CASTSLICE_PRESETS": "training=8,inference=4,batch=4,dev=2",
    "CASTSLICE_DEFAULT_SLICES": "2",
    "CASTSLICE_MAX_SLICE_RATIO": "64",
    "CASTSLICE_BACKEND": "nvidia",
    "CASTSLICE_SLICES_PER_GPU": "8",
    "CASTSLICE_SHARING_DEGREES": "2,4,8",
    "CASTSLICE_SHARING_STRATEGY": "mps",
    "CASTSLICE_DRA_DEVICE_CLASS": "gpu.example.com",
    "CASTSLICE_DRA_CAPACITY": "example.com/slices",
    "CASTSLICE_DRA_GPU_MEMORY": "80Gi",
    "CASTSLICE_GPU_MEMORY": "143771Mi",
    "CASTSLICE_GPU_MEMORY_ENFORCED_ONLY": "false",
    "CASTSLICE_MIG_GPU_MODELS": "H100-80GB,B200",
    "CASTSLICE_MIG_PROFILES": "1g.10gb,1g.23gb",
    "CASTSLICE_MIG_STACK": "single",
    "CASTSLICE_MIG_FIT": "strict",
    "CASTSLICE_MIG_WHOLE_GPU": "7g",
    "CASTSLICE_MIG_TIME_SHARED_CLIENTS": "4",
    "CASTSLICE_MIG_PRODUCT_NAMES": "H100-80GB=NVIDIA H100 PCIe",
}
# The path token is for the public URL only; metrics for the chart only.
VARIANT_SETTINGS = {
    "knative": {**SETTINGS, "CASTSLICE_PATH_TOKEN": SAMPLE_TOKEN},
}
# Read by kustomize itself, never by the application.
KUSTOMIZE_SETTINGS = {
    "knative": {"IMAGE": SAMPLE_IMAGE, "HOST": SAMPLE_HOST},
}
POLICY = """\
rules:
  - name: research shares by default
    namespaces: [research, "team-*"]
    podSelector: {matchLabels: {tier: dev}}
    optimize: true
    workloadType: dev
"""
KUBERNETES_VERSIONS = ("1.30", "1.37")
_OPTIONAL_SETTING = re.compile(r"^# (CASTSLICE_[A-Z_]+)=", re.MULTILINE)


def settings_file(settings: Mapping[str, str]) -> str:
    return "".join(f"{name}={value}\n" for name, value in settings.items())


def pod_spec(objects: Objects) -> dict[str, Any]:
    """The Pod template of the variant's workload: a Deployment or a Knative Service."""
    workloads = [
        obj
        for obj in objects
        if obj["kind"] == "Deployment" or obj["apiVersion"].startswith("serving.knative.dev/")
    ]
    (workload,) = workloads
    return workload["spec"]["template"]["spec"]


def castslice_container(objects: Objects) -> dict[str, Any]:
    (container,) = [c for c in pod_spec(objects)["containers"] if c["name"] == "castslice"]
    return container


@pytest.fixture(scope="module")
def infra(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_infra(tmp_path_factory.mktemp("configured"))


@pytest.fixture(scope="module")
def render_with(infra: Path) -> Render:
    """Render a variant with the given castslice.env settings and policy.yaml, once each."""
    built: dict[tuple[str, str, str], Objects] = {}

    def build(
        variant: str,
        settings: Mapping[str, str] | None = None,
        policy: str = POLICY,
    ) -> Objects:
        chosen = settings if settings is not None else VARIANT_SETTINGS[variant]
        env_file = settings_file({**KUSTOMIZE_SETTINGS[variant], **chosen})
        key = (variant, env_file, policy)
        if key not in built:
            (infra / variant / "castslice.env").write_text(env_file)
            (infra / variant / "policy.yaml").write_text(policy)
            built[key] = render(kubectl(), infra, variant)
        return copy.deepcopy(built[key])

    return build


@pytest.mark.parametrize("variant", KUSTOMIZE_VARIANTS)
def test_every_setting_reaches_the_container(render_with: Render, variant: str) -> None:
    objects = render_with(variant)
    container = castslice_container(objects)
    environment = container_environment(objects, container)

    assert {name: environment.get(name) for name in VARIANT_SETTINGS[variant]} == (
        VARIANT_SETTINGS[variant]
    )
    assert container["image"] == SAMPLE_IMAGE


@pytest.mark.parametrize("variant", KUSTOMIZE_VARIANTS)
def test_castslice_reads_every_value_from_what_the_container_gets(
    render_with: Render, variant: str, tmp_path: Path
) -> None:
    objects = render_with(variant)
    container = castslice_container(objects)
    environment = container_environment(objects, container)
    # The mounted policy, at a path this process can read.
    (mount,) = [m for m in container["volumeMounts"] if m.get("subPath") == "policy.yaml"]
    (volume,) = [v for v in pod_spec(objects)["volumes"] if v["name"] == mount["name"]]
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(config_map(objects, volume["configMap"]["name"])["data"]["policy.yaml"])

    loaded = load_config({**environment, "CASTSLICE_POLICY_FILE": str(policy_file)})

    assert loaded == load_config({**VARIANT_SETTINGS[variant], "CASTSLICE_POLICY": POLICY})
    default = load_config({})
    # The scheduler name is refused with this variant's backend (nvidia): dra only.
    unset = {"knative": {"metrics", "metrics_port", "scheduler_name"}}[variant]
    for setting in fields(Config):
        if setting.name not in unset:
            assert getattr(loaded, setting.name) != getattr(default, setting.name), setting.name


@pytest.mark.parametrize("variant", KUSTOMIZE_VARIANTS)
def test_kustomize_settings_stay_out_of_the_container(render_with: Render, variant: str) -> None:
    objects = render_with(variant)
    environment = container_environment(objects, castslice_container(objects))

    # HOST in particular: functions-framework would listen on it.
    for name in KUSTOMIZE_SETTINGS[variant]:
        assert name not in environment
    assert all(name.startswith("CASTSLICE_") for name in environment)
    # The copy that feeds the replacements is local to kustomize, never applied.
    names = {obj["metadata"]["name"] for obj in objects if obj["kind"] == "ConfigMap"}
    assert not any(name.startswith("castslice-settings") for name in names)


@pytest.mark.parametrize("variant", KUSTOMIZE_VARIANTS)
def test_the_policy_is_mounted_read_only_where_the_variable_points(
    render_with: Render, variant: str
) -> None:
    objects = render_with(variant)
    spec = pod_spec(objects)
    container = castslice_container(objects)
    path = container_environment(objects, container)["CASTSLICE_POLICY_FILE"]

    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == path]
    assert mount["readOnly"] is True
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    policy = config_map(objects, volume["configMap"]["name"])
    assert policy["metadata"]["name"].startswith("castslice-policy-")
    assert policy["data"][mount["subPath"]] == POLICY
    assert "CASTSLICE_POLICY" not in container_environment(objects, container)


@pytest.mark.parametrize("variant", KUSTOMIZE_VARIANTS)
def test_a_changed_setting_or_policy_rolls_the_pods(
    infra: Path, render_with: Render, variant: str
) -> None:
    base = pod_spec(render_with(variant))
    # Rendering again from the same files gives the same template: nothing rolls.
    (infra / variant / "castslice.env").write_text(
        settings_file({**KUSTOMIZE_SETTINGS[variant], **VARIANT_SETTINGS[variant]})
    )
    (infra / variant / "policy.yaml").write_text(POLICY)
    assert pod_spec(render(kubectl(), infra, variant)) == base

    # The Pod template names the ConfigMaps by a hash of their content: a new
    # template is what makes the Deployment roll and Knative cut a revision.
    changed = {**VARIANT_SETTINGS[variant], "CASTSLICE_DEFAULT_SLICES": "3"}
    assert pod_spec(render_with(variant, settings=changed)) != base
    assert pod_spec(render_with(variant, policy=POLICY.replace("dev}", "test}"))) != base


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("variant", KUSTOMIZE_VARIANTS)
def test_the_configured_built_in_objects_match_the_kubernetes_schemas(
    render_with: Render, variant: str, version: str
) -> None:
    for obj in built_in(render_with(variant)):
        kubernetes_validate.validate(obj, version, strict=True)


def test_knative_keeps_the_token_of_the_url_in_the_container(render_with: Render) -> None:
    objects = render_with("knative")
    environment = container_environment(objects, castslice_container(objects))
    for webhook in only(objects, "MutatingWebhookConfiguration")["webhooks"]:
        assert webhook["clientConfig"]["url"] == (
            f"https://{SAMPLE_HOST}/{environment['CASTSLICE_PATH_TOKEN']}"
        )


@pytest.mark.parametrize("variant", KUSTOMIZE_VARIANTS)
def test_the_shipped_examples_render_and_validate(infra: Path, variant: str) -> None:
    directory = infra / variant
    for name in ("castslice.env", "policy.yaml"):
        shutil.copyfile(directory / f"{name}.example", directory / name)
    objects = render(kubectl(), infra, variant)
    for version in KUBERNETES_VERSIONS:
        for obj in built_in(objects):
            kubernetes_validate.validate(obj, version, strict=True)
    environment = container_environment(objects, castslice_container(objects))
    # The commented settings stay comments: only the required ones are set.
    required = {"knative": {"CASTSLICE_PATH_TOKEN"}}[variant]
    assert {name for name in environment if name.startswith("CASTSLICE_")} == required | {
        "CASTSLICE_POLICY_FILE"
    }


@pytest.mark.parametrize("variant", KUSTOMIZE_VARIANTS)
def test_the_shipped_policy_enrols_no_one(variant: str) -> None:
    example = (INFRA / variant / "policy.yaml.example").read_text()
    assert yaml.safe_load(example) == {"rules": []}
    # The commented example, uncommented, is a policy of the documented shape.
    commented = example.partition("\n# rules:")[2]
    uncommented = re.sub(r"^# ?", "", "# rules:" + commented, flags=re.MULTILINE)
    rules = yaml.safe_load(uncommented)["rules"]
    assert rules and all({"name", "namespaces", "optimize"} <= rule.keys() for rule in rules)
