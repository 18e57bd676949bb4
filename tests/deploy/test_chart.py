"""charts/castslice rendered by the real helm CLI (built from helm.sh/helm/v4; tests/helm).

`helm lint --strict`; `helm template` over a matrix of values (each backend, policy on
and off, metrics on and off, a provided TLS Secret), every built-in object validated
against the Kubernetes 1.30 and 1.37 schemas (kubernetes-validate, strict); the
registration equal to what `castslice webhook` renders for the same settings; every
setting reaching the container as the application reads it; bad values refused by
values.schema.json or the templates with their names.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

import castslice.serve.tls
from castslice import __version__
from castslice.backends import PLACERS as ALL_BACKENDS
from castslice.backends.tools import extender_backends
from castslice.cli import extender as extender_command
from castslice.cli.flags import add_settings, config_from
from castslice.environment import load_config
from castslice.settings.config import Config, ConfigError
from tests.helm import (
    CHART,
    ROOT,
    SAMPLE_REPOSITORY,
    Objects,
    castslice_output,
    generated_claim_templates,
    hook_events,
    run_helm,
    template,
    template_args,
    template_error,
    values_file,
)

from .variants import (
    SHARED_WEBHOOK,
    assert_restricted,
    assert_webhook_contract,
    built_in,
    container_environment,
    container_environment_with_secrets,
    containers,
    of_kind,
    only,
    only_named,
    without_client_config,
)

KUBERNETES_VERSIONS = ("1.30", "1.37")
BACKENDS = ("resource", "nvidia", "gke", "dra")
SAMPLE_TOKEN = "Zx8qP2vN5mR7tK1wY4bC6dF9"
# Every rule shape the policy language has: names and globs, matchLabels and each
# matchExpressions operator, enrolling and excluding rules in several groups.
POLICY = """\
rules:
  - name: never in production
    namespaces: [production, "*-prod"]
    optimize: false
  - name: research notebooks
    namespaces: [research, "team-?", "lab-[ab]*"]
    podSelector:
      matchLabels: {tier: dev}
    optimize: true
    workloadType: dev
  - name: not dedicated
    podSelector:
      matchExpressions:
        - {key: example.com/dedicated, operator: Exists}
        - {key: app, operator: NotIn, values: [batch]}
    optimize: false
  - name: inference
    podSelector:
      matchExpressions:
        - {key: app.kubernetes.io/component, operator: In, values: [inference, serving]}
        - {key: example.com/whole-gpu, operator: DoesNotExist}
    optimize: true
    slices: 2
"""
# A test CA: the API server only needs its PEM form in the registration.
CA_PEM = (
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBdzCCAR2gAwIBAgIUCastSliceChartTestCAxxxxxxxxwCgYIKoZIzj0EAwIw\n"
    "-----END CERTIFICATE-----\n"
)


@dataclasses.dataclass(frozen=True)
class Case:
    backend: str
    policy: bool
    metrics: bool
    secret: bool

    @property
    def id(self) -> str:
        return "-".join(
            [
                self.backend,
                "policy" if self.policy else "annotations",
                "metrics" if self.metrics else "no-metrics",
                "secret" if self.secret else "cert-manager",
            ]
        )


CASES = [Case(*combination) for combination in itertools.product(BACKENDS, *[(False, True)] * 3)]


def policy_values(tmp_path: Path, text: str = POLICY, env: dict[str, str] | None = None) -> dict:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(text)
    output = castslice_output(["webhook", "--helm-values", "--policy", str(policy_file)], env)
    return yaml.safe_load(output)


def case_values(case: Case, tmp_path: Path) -> dict[str, Any]:
    values: dict[str, Any] = {
        "backend": case.backend,
        "slicesPerGpu": 8,
        "sharingDegrees": [2, 8],
        "gpuResource": "example.com/gpu",
        "pathToken": SAMPLE_TOKEN,
    }
    # The settings above, for the commands that write values for them.
    env = {
        "CASTSLICE_BACKEND": case.backend,
        "CASTSLICE_SLICES_PER_GPU": "8",
        "CASTSLICE_SHARING_DEGREES": "2,8",
        "CASTSLICE_GPU_RESOURCE": "example.com/gpu",
    }
    if case.policy:
        values.update(policy_values(tmp_path, env=env))
    elif case.backend == "dra":
        values["claimTemplates"] = {"generated": generated_claim_templates(env)}
    if case.backend == "dra":
        values["claimTemplates"]["namespaces"] = ["research", "team-a"]
    if case.metrics:
        values["metrics"] = {"enabled": True, "port": 9191, "podMonitor": {"enabled": True}}
    if case.secret:
        values["tls"] = {"source": "secret", "secretName": "my-webhook-tls", "caBundle": CA_PEM}
    return values


@pytest.fixture(scope="module")
def defaults(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Objects:
    values = {"image": {"repository": SAMPLE_REPOSITORY}}
    return template(helm, tmp_path_factory.mktemp("defaults"), values)


@pytest.fixture(scope="module")
def rendered(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Objects]:
    """Every case of the matrix, rendered once for this module."""
    out: dict[str, Objects] = {}
    for case in CASES:
        directory = tmp_path_factory.mktemp(case.id)
        out[case.id] = template(helm, directory, case_values(case, directory), namespace="gpu-ops")
    return out


def test_helm_lint_strict_passes(helm: Path, tmp_path: Path) -> None:
    # With the one value the chart cannot default: the image.
    values = values_file(tmp_path, {})
    result = run_helm(helm, "lint", "--strict", str(CHART), "-f", str(values))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_the_chart_refuses_to_render_without_an_image(helm: Path, tmp_path: Path) -> None:
    """No placeholder image to roll onto: an install or upgrade without image.repository
    (docs/deploy.md's upgrade once had none) fails before anything is applied."""
    error = template_error(helm, tmp_path, {"image": {"repository": ""}})
    assert "image.repository: the image to run, REGISTRY/castslice" in error
    assert "--set image.repository=REGISTRY/castslice --set image.tag=TAG" in error
    unset = template_error(helm, tmp_path, {"image": {"repository": None}})
    assert "at '/image': missing property 'repository'" in unset


def test_the_chart_and_the_image_share_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == __version__
    assert chart["appVersion"] == __version__


def test_the_default_values_are_the_applications_defaults(helm: Path, tmp_path: Path) -> None:
    objects = template(helm, tmp_path, {})
    (deployment,) = of_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    environment = container_environment(objects, container)
    del environment["CASTSLICE_POLICY_FILE"]
    assert load_config(environment) == load_config({})


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_built_in_kinds_match_the_kubernetes_schemas(
    rendered: dict[str, Objects], case: Case, version: str
) -> None:
    objects = rendered[case.id]
    for obj in built_in(objects):
        # ResourceClaimTemplates are resource.k8s.io/v1, GA in 1.34: the dra backend needs it.
        if obj["kind"] == "ResourceClaimTemplate" and version == "1.30":
            continue
        kubernetes_validate.validate(obj, version, strict=True)
    kinds = {obj["kind"] for obj in objects}
    assert ("PodMonitor" in kinds) == case.metrics
    assert ("Certificate" in kinds) == (not case.secret)
    assert ("ResourceClaimTemplate" in kinds) == (case.backend == "dra")


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_the_registration_is_what_castslice_webhook_renders(
    rendered: dict[str, Objects], case: Case, tmp_path: Path
) -> None:
    chart = only(rendered[case.id], "MutatingWebhookConfiguration")
    args = ["webhook", "--service", "gpu-ops/castslice", "--namespace", "gpu-ops"]
    args += ["--token", SAMPLE_TOKEN]
    if case.policy:
        (tmp_path / "policy.yaml").write_text(POLICY)
        args += ["--policy", str(tmp_path / "policy.yaml")]
    if case.secret:
        (tmp_path / "ca.pem").write_text(CA_PEM)
        args += ["--ca-bundle", str(tmp_path / "ca.pem")]
    env = {"CASTSLICE_GPU_RESOURCE": "example.com/gpu", "CASTSLICE_PATH_TOKEN": SAMPLE_TOKEN}
    expected = yaml.safe_load(castslice_output(args, env))
    assert comparable(chart, secret=case.secret) == expected


def comparable(
    chart: dict[str, Any], *, secret: bool, namespace: str = "gpu-ops"
) -> dict[str, Any]:
    """The chart's registration less what only Helm and cert-manager add: the chart's
    own labels, the hook annotations that order it after the Deployment, and (with
    cert-manager) the annotation its cainjector reads."""
    metadata = copy_of(chart["metadata"])
    metadata["labels"] = {"app.kubernetes.io/name": metadata["labels"]["app.kubernetes.io/name"]}
    annotations = metadata.pop("annotations", {})
    assert annotations.pop("helm.sh/hook") == "post-install,post-upgrade"
    assert annotations.pop("helm.sh/hook-delete-policy") == "hook-failed"
    injected = annotations.pop("cert-manager.io/inject-ca-from", None)
    assert (injected is None) == secret
    if not secret:
        assert injected == f"{namespace}/castslice-serving"
    if annotations:
        metadata["annotations"] = annotations
    return {**chart, "metadata": metadata}


def copy_of(value: Any) -> Any:
    return json.loads(json.dumps(value))


def test_docs_deploy_names_every_hook_of_the_chart(helm: Path, tmp_path: Path) -> None:
    """docs/deploy.md once said the chart had no hooks; it names each one it has."""
    rendered = run_helm(helm, *template_args(values_file(tmp_path, {}))).stdout
    events = set().union(*(hook_events(obj) for obj in yaml.safe_load_all(rendered) if obj))
    assert events == {"post-install", "post-upgrade", "pre-delete"}
    deploy = (CHART.parent.parent / "docs" / "deploy.md").read_text()
    assert "no hooks" not in deploy
    for event in events:
        assert f"`{event}`" in deploy, event


def test_the_registration_is_applied_after_the_release_and_removed_first_at_uninstall(
    helm: Path, tmp_path: Path
) -> None:
    result = run_helm(helm, *template_args(values_file(tmp_path, {})))
    registrations = [
        obj for obj in yaml.safe_load_all(result.stdout)
        if obj and obj["kind"] == "MutatingWebhookConfiguration"
    ]  # fmt: skip
    assert [hook_events(obj) for obj in registrations] == [
        {"post-install", "post-upgrade"},
        {"pre-delete"},
    ]
    registration, remover = registrations
    assert registration["metadata"]["name"] == remover["metadata"]["name"] == "castslice"
    # The remover takes the registration's place (before-hook-creation), then goes itself.
    policies = remover["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
    assert set(policies.split(",")) == {"before-hook-creation", "hook-succeeded"}
    assert remover["webhooks"] == []


def test_the_chart_carries_the_generated_registration_file() -> None:
    # files/webhook.yaml is `castslice webhook`'s output, as infra/webhook's is.
    shipped = (CHART / "files" / "webhook.yaml").read_text()
    assert shipped == SHARED_WEBHOOK.read_text()
    assert shipped == castslice_output(["webhook", "--url", "https://castslice.invalid/"])


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_every_setting_reaches_the_container_as_the_application_reads_it(
    rendered: dict[str, Objects], case: Case
) -> None:
    objects = rendered[case.id]
    deployment = only(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    environment = container_environment_with_secrets(objects, container)
    assert environment["CASTSLICE_POLICY_FILE"] == "/etc/castslice/policy.yaml"
    policy = only_named(objects, "ConfigMap", "castslice-policy")["data"]["policy.yaml"]
    del environment["CASTSLICE_POLICY_FILE"]
    config = load_config(environment)
    assert config.backend == case.backend
    assert config.slices_per_gpu == 8
    assert config.sharing_degrees == (2, 8)
    assert config.gpu_resource == "example.com/gpu"
    assert config.path_token == SAMPLE_TOKEN
    assert config.metrics == case.metrics
    assert config.metrics_port == (9191 if case.metrics else 9090)
    assert policy == (POLICY if case.policy else "rules: []\n")
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == ({"https": 8443, "metrics": 9191} if case.metrics else {"https": 8443})
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == (
        "my-webhook-tls" if case.secret else "castslice-tls"
    )


def claim_spec(count: int, requests: dict[str, str]) -> dict[str, Any]:
    exactly = {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": count,
        "capacity": {"requests": requests},
        "tolerations": [{"key": "castslice.castops.io/shared", "operator": "Exists"}],
    }
    return {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.backend == "dra" and not c.metrics and not c.secret],
    ids=lambda c: c.id,
)
def test_dra_claim_templates_cover_every_share_and_every_configured_count_in_each_namespace(
    rendered: dict[str, Objects], case: Case
) -> None:
    templates = of_kind(rendered[case.id], "ResourceClaimTemplate")
    found = {(t["metadata"]["namespace"], t["metadata"]["name"]): t["spec"] for t in templates}
    # 8 per GPU and slice-ratio up to 1000 are 132 templates, too many: every share of one
    # GPU (1 to 7) and a whole one. The policy enrols `research` by name (its globs, none).
    expected = {
        **{f"castslice-{s}-of-8": claim_spec(1, {"shares": str(s)}) for s in range(1, 8)},
        "castslice-8-of-8": claim_spec(1, {"shares": "8"}),
    }
    namespaces = ["research", "team-a"]
    assert found == {(ns, name): spec for ns in namespaces for name, spec in expected.items()}
    for claim_template in templates:
        assert claim_template["metadata"]["labels"]["app.kubernetes.io/part-of"] == "castslice"


def with_generated(helm: Path, tmp_path: Path, values: dict[str, Any]) -> dict[str, Any]:
    """`values` with the claimTemplates.generated that `castslice claim-templates
    --helm-values` writes for the settings the chart gives the Deployment."""
    values = copy_of(values)
    templates = values.setdefault("claimTemplates", {})
    listed = templates.pop("namespaces", [])
    environment = chart_environment(template(helm, tmp_path, values))
    return {
        **values,
        "claimTemplates": {
            "namespaces": listed,
            **{"generated": generated_claim_templates(environment)},
        },
    }


def chart_environment(objects: Objects) -> dict[str, str]:
    """The CASTSLICE_* settings the chart gives castslice's container."""
    (container,) = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    environment = container_environment_with_secrets(objects, container)
    del environment["CASTSLICE_POLICY_FILE"]
    return environment


@pytest.mark.parametrize(
    ("memory", "per_gpu", "slices", "share"),
    [("80Gi", 8, 3, "30Gi"), ("80Gi", 3, 1, "27307Mi"), ("24Gi", 8, 1, "3Gi"),
     ("2Ti", 2, 1, "1Ti")],
)  # fmt: skip
def test_a_share_of_one_gpu_asks_for_its_share_of_the_memory_rounded_up_to_a_mebibyte(
    helm: Path, tmp_path: Path, memory: str, per_gpu: int, slices: int, share: str
) -> None:
    values = {"backend": "dra", "slicesPerGpu": per_gpu, "draGpuMemory": memory}
    values["claimTemplates"] = {"namespaces": ["research"]}
    objects = template(helm, tmp_path, with_generated(helm, tmp_path, values))
    specs = {t["metadata"]["name"]: t["spec"] for t in of_kind(objects, "ResourceClaimTemplate")}
    assert specs[f"castslice-{slices}-of-{per_gpu}"] == claim_spec(
        1, {"shares": str(slices), "memory": share}
    )
    # A whole GPU asks for every share and no memory.
    assert specs[f"castslice-{per_gpu}-of-{per_gpu}"] == claim_spec(1, {"shares": str(per_gpu)})


def claim_templates_from_castslice(namespaces: list[str], env: dict[str, str]) -> Objects:
    """`castslice claim-templates -n NAMESPACE...` with the CASTSLICE_* settings `env`.
    Compare with chart_claim_templates(); the chart adds only its labels."""
    args = ["claim-templates", *[word for namespace in namespaces for word in ("-n", namespace)]]
    return [doc for doc in yaml.safe_load_all(castslice_output(args, env)) if doc]


# The labels every object of the chart carries (castslice.labels), and only the chart's.
CHART_LABELS = {
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
}


def chart_claim_templates(objects: Objects) -> Objects:
    """The chart's ResourceClaimTemplates less the labels only the chart adds."""
    kept = []
    for claim in of_kind(objects, "ResourceClaimTemplate"):
        claim = copy_of(claim)
        labels = claim["metadata"]["labels"]
        assert labels.keys() >= CHART_LABELS
        claim["metadata"]["labels"] = {k: v for k, v in labels.items() if k not in CHART_LABELS}
        kept.append(claim)
    return kept


# (values, what they cover): every setting a claim template depends on, set and unset.
CLAIM_TEMPLATE_CASES = [
    ({}, "the defaults: 4 per GPU, slices 1 to 4, no memory"),
    ({"claimTemplates": {"namespaces": ["research", "team-a"]}, "slicesPerGpu": 8,
      "maxSliceRatio": 24}, "two namespaces; every count up to 24 of 8: 1-7, 8, 16, 24"),
    ({"slicesPerGpu": 3, "draGpuMemory": "80Gi"}, "memory rounded up to a MiB: 27307Mi"),
    ({"presets": {"training": 12, "dev": 3}, "defaultSlices": 6}, "presets and the default "
     "beyond a GPU, with too many reachable counts: 8 and 12 rendered"),
    ({"slicesPerGpu": 8, "draGpuMemory": "1024Ti", "maxSliceRatio": 64},
     "the largest memory, in Ti"),
    ({"slicesPerGpu": 4, "draGpuMemory": "7Mi"}, "a share below a MiB's multiple: 2Mi and 6Mi"),
    ({"slicesPerGpu": 1, "draGpuMemory": "40Gi", "maxSliceRatio": 4},
     "one slice per GPU: only whole devices, never memory"),
    ({"draDeviceClass": "gpu.example.com", "draCapacity": "example.com/slices",
      "slicesPerGpu": 10, "draGpuMemory": "1Ti", "claimTemplates": {"namespaces": ["ml"]}},
     "another device class and a qualified capacity name"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("values", "covers"), CLAIM_TEMPLATE_CASES, ids=[c for _, c in CLAIM_TEMPLATE_CASES]
)
def test_the_claim_templates_are_what_castslice_claim_templates_renders(
    helm: Path, tmp_path: Path, values: dict[str, Any], covers: str
) -> None:
    values = {"backend": "dra", **values}
    values["claimTemplates"] = {"namespaces": ["research"], **values.get("claimTemplates", {})}
    objects = template(helm, tmp_path, with_generated(helm, tmp_path, values))
    # castslice runs with the very settings the chart gives the Deployment.
    expected = claim_templates_from_castslice(
        values["claimTemplates"]["namespaces"], chart_environment(objects)
    )
    assert expected
    assert chart_claim_templates(objects) == expected
    config = load_config(chart_environment(objects))
    names = {t["metadata"]["name"] for t in expected}
    for count in (
        config.default_slices,
        *config.presets.values(),
        *range(1, config.slices_per_gpu),
    ):
        assert template_name_for(config, count) in names


def template_name_for(config: Config, slices: int) -> str:
    from castslice.backends.dra.claim_templates import template_name

    return template_name(config, slices)


def test_the_charts_default_templates_are_castslice_output_for_the_defaults() -> None:
    shipped = yaml.safe_load((CHART / "files/claim-templates.yaml").read_text())
    assert shipped == generated_claim_templates({"CASTSLICE_BACKEND": "dra"})


def test_with_the_default_values_dra_gets_every_template_it_needs(
    helm: Path, tmp_path: Path
) -> None:
    values = {"backend": "dra", "claimTemplates": {"namespaces": ["ml"]}}
    objects = template(helm, tmp_path, values)
    expected = claim_templates_from_castslice(["ml"], chart_environment(objects))
    assert chart_claim_templates(objects) == expected
    assert [t["metadata"]["name"] for t in expected] == [f"castslice-{s}-of-4" for s in range(1, 5)]


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        ({"presets": {"training": 8}}, 'presets {"batch":2,"dev":1,"inference":2,"training":4}'),
        ({"slicesPerGpu": 8}, "slicesPerGpu 4, not 8"),
        ({"maxSliceRatio": 4}, "maxSliceRatio 1000, not 4"),
        ({"defaultSlices": 3}, "defaultSlices 1, not 3"),
        ({"draGpuMemory": "80Gi"}, 'draGpuMemory null, not "80Gi"'),
        ({"draDeviceClass": "gpu.example.com"}, 'draDeviceClass "gpu.nvidia.com"'),
        ({"backend": "resource"}, 'backend "dra", not "resource"'),
        ({"policy": "rules: []\n"}, "claimTemplates.generated was not made for this policy"),
    ],
    ids=lambda v: json.dumps(v),
)
def test_templates_made_for_other_settings_are_refused_with_the_value_that_differs(
    helm: Path, tmp_path: Path, changed: dict[str, Any], named: str
) -> None:
    values = {"backend": "dra", "claimTemplates": {"namespaces": ["ml"]}, **changed}
    if "policy" in changed:
        values["policyRegistration"] = policy_values(tmp_path, changed["policy"])[
            "policyRegistration"
        ]
    error = template_error(helm, tmp_path, values)
    assert named in error
    assert "castslice claim-templates --helm-values" in error


def test_namespaces_the_policy_enrols_by_name_get_the_templates(helm: Path, tmp_path: Path) -> None:
    env = {"CASTSLICE_BACKEND": "dra"}
    values = {"backend": "dra", **policy_values(tmp_path, env=env)}
    objects = template(helm, tmp_path, values)
    found = {
        (t["metadata"]["namespace"], t["metadata"]["name"])
        for t in of_kind(objects, "ResourceClaimTemplate")
    }
    # POLICY enrols `research` by name; `team-?` and `lab-[ab]*` are globs.
    assert found == {("research", f"castslice-{s}-of-4") for s in range(1, 5)}
    listed = {
        **values,
        "claimTemplates": {**values["claimTemplates"], "namespaces": ["ml", "research"]},
    }
    names = {
        t["metadata"]["namespace"]
        for t in of_kind(template(helm, tmp_path, listed), "ResourceClaimTemplate")
    }
    assert names == {"ml", "research"}


# Every form of CASTSLICE_DRA_GPU_MEMORY near the edges of what the application accepts.
GPU_MEMORY_VALUES = [
    "80Gi", "24576Mi", "1Mi", "1Ti", "1024Ti", "1048576Gi", "1073741824Mi", "999Gi",
    "1025Ti", "1048577Gi", "1073741825Mi", "2000Ti", "0Mi", "0Gi", "080Gi", "80G", "80GB",
    "1.5Ti", "85899345920", "80gi", "1Ki", "1Pi", "-80Gi", "Gi", "8e10",
]  # fmt: skip


@pytest.mark.parametrize("memory", GPU_MEMORY_VALUES)
def test_the_schema_accepts_the_gpu_memory_the_application_accepts(
    helm: Path, tmp_path: Path, memory: str
) -> None:
    try:
        load_config({"CASTSLICE_BACKEND": "dra", "CASTSLICE_DRA_GPU_MEMORY": memory})
        accepted = True
    except ConfigError:
        accepted = False
    values = {"backend": "dra", "draGpuMemory": memory}
    if accepted:
        template(helm, tmp_path, values)
    else:
        assert "/draGpuMemory" in template_error(helm, tmp_path, values)


# A bad value and what the refusal must name; the schema checks what the environment would.
REFUSED = [
    ({"backend": "hami"}, "/backend"),
    ({"slicesPerGpu": 0}, "/slicesPerGpu"),
    ({"slicesPerGpu": "4"}, "/slicesPerGpu"),
    ({"sharingDegrees": [1]}, "/sharingDegrees/0"),
    ({"sharingDegrees": [4, 4]}, "/sharingDegrees"),
    ({"sharingStrategy": "mig"}, "/sharingStrategy"),
    ({"gpuResource": "gpu"}, "/gpuResource"),
    ({"gpuResource": "kubernetes.io/gpu"}, "/gpuResource"),
    ({"sharedResource": "Example.com/gpu"}, "/sharedResource"),
    ({"presets": {"dev": 0}}, "/presets/dev"),
    # The library reports the location of a bad property name oddly, but names the name.
    ({"presets": {"a=b": 1}}, "'a=b'"),
    ({"defaultSlices": 1_000_001}, "/defaultSlices"),
    ({"maxSliceRatio": 0}, "/maxSliceRatio"),
    ({"pathToken": "short"}, "/pathToken"),
    ({"draDeviceClass": "GPU Class"}, "/draDeviceClass"),
    ({"draGpuMemory": "lots"}, "/draGpuMemory"),
    ({"draCapacity": "9shares"}, "/draCapacity"),
    ({"claimTemplates": {"namespaces": ["Research"]}}, "/claimTemplates/namespaces/0"),
    ({"claimTemplates": {"slices": [1, 2, 4]}}, "slices"),
    ({"metrics": {"enabled": "yes"}}, "/metrics/enabled"),
    ({"metrics": {"port": 8443}}, "/metrics/port"),
    ({"replicas": 0}, "/replicas"),
    ({"slicesPerGPU": 4}, "slicesPerGPU"),
    ({"tls": {"source": "vault"}}, "/tls/source"),
    ({"tls": {"source": "secret"}}, "/tls/secretName"),
    ({"tls": {"source": "secret", "secretName": "x", "caBundle": "no"}}, "/tls/caBundle"),
    ({"tls": {"certManager": {"issuerRef": {"name": "corp"}}}}, "/tls/certManager/issuerRef"),
]


@pytest.mark.parametrize(("values", "named"), REFUSED, ids=lambda v: json.dumps(v))
def test_a_bad_value_is_refused_with_its_name(
    helm: Path, tmp_path: Path, values: dict[str, Any], named: str
) -> None:
    error = template_error(helm, tmp_path, values)
    assert "values don't meet the specifications of the schema" in error
    assert named in error


def test_a_policy_without_its_registration_is_refused(helm: Path, tmp_path: Path) -> None:
    error = template_error(helm, tmp_path, {"policy": POLICY})
    assert "policyRegistration was not written for this policy" in error
    assert "castslice webhook --helm-values --policy FILE" in error


def test_a_registration_written_for_another_policy_is_refused(helm: Path, tmp_path: Path) -> None:
    values = policy_values(tmp_path)
    values["policy"] = POLICY.replace("research", "science")
    error = template_error(helm, tmp_path, values)
    assert "policyRegistration was not written for this policy" in error


@pytest.mark.parametrize("source", ["-", "/dev/stdin"])
def test_a_policy_piped_in_is_read_once_and_installs_as_from_a_file(
    helm: Path, tmp_path: Path, source: str
) -> None:
    from_file = policy_values(tmp_path)
    piped = subprocess.run(
        [sys.executable, "-m", "castslice", "webhook", "--helm-values", "--policy", source],
        input=POLICY, capture_output=True, text=True, check=True, timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("CASTSLICE_")},
    )  # fmt: skip
    values = yaml.safe_load(piped.stdout)
    assert values["policy"] == POLICY
    assert values["policyRegistration"] == from_file["policyRegistration"]
    enrolled = template(helm, tmp_path, values)
    assert only_named(enrolled, "ConfigMap", "castslice-policy")["data"]["policy.yaml"] == POLICY


def test_a_registration_beside_no_policy_is_refused(helm: Path, tmp_path: Path) -> None:
    values = {**policy_values(tmp_path), "policy": ""}
    error = template_error(helm, tmp_path, values)
    assert "policyRegistration was not written for this policy" in error


def test_a_registration_written_for_another_gpu_resource_is_refused(
    helm: Path, tmp_path: Path
) -> None:
    values = {**policy_values(tmp_path), "gpuResource": "example.com/tpu"}
    error = template_error(helm, tmp_path, values)
    assert 'written for gpuResource "nvidia.com/gpu", not "example.com/tpu"' in error


def test_a_policy_changes_the_pods_and_the_registration(helm: Path, tmp_path: Path) -> None:
    plain = template(helm, tmp_path, {})
    enrolled = template(helm, tmp_path, policy_values(tmp_path))
    hashes = [
        only(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        for objects in (plain, enrolled)
    ]
    assert (
        hashes[0]["castslice.castops.io/policy-sha256"]
        != hashes[1]["castslice.castops.io/policy-sha256"]
    )
    names = [
        [
            c["name"]
            for c in only(o, "MutatingWebhookConfiguration")["webhooks"][0]["matchConditions"]
        ]
        for o in (plain, enrolled)
    ]
    assert names == [
        ["opted-in", "not-a-mirror-pod"],
        ["not-opted-out", "opted-in-or-enrolled", "not-a-mirror-pod"],
    ]


def test_an_existing_issuer_signs_the_serving_certificate(helm: Path, tmp_path: Path) -> None:
    issuer = {"kind": "ClusterIssuer", "name": "corporate-ca"}
    objects = template(helm, tmp_path, {"tls": {"certManager": {"issuerRef": issuer}}})
    assert of_kind(objects, "Issuer") == []
    (certificate,) = of_kind(objects, "Certificate")
    assert certificate["spec"]["issuerRef"] == issuer
    assert certificate["spec"]["dnsNames"] == [
        "castslice.castslice.svc",
        "castslice.castslice.svc.cluster.local",
    ]


NOTES_RELEASES = {
    "defaults": ("castslice", {}),
    "dra": (
        "castslice-b",
        {
            "backend": "dra", "slicesPerGpu": 8, "presets": {"dev": None, "notebook": 3},
            "draGpuMemory": "80Gi", "draCapacity": "example.com/slices",
            "defaultSlices": 2, "maxSliceRatio": 64,
        },
    ),
    "nvidia": (
        "gpu-sharing",
        {
            "backend": "nvidia", "sharingDegrees": [8, 2], "sharingStrategy": "mps",
            "gpuResource": "example.com/gpu", "sharedResource": "example.com/gpu-slice",
        },
    ),
}  # fmt: skip


@pytest.mark.parametrize("release", NOTES_RELEASES)
def test_notes_print_the_doctor_and_preview_commands_with_the_release_s_settings(
    helm: Path, tmp_path: Path, release: str
) -> None:
    name, values = NOTES_RELEASES[release]
    path = values_file(tmp_path, values)
    args = ["install", name, str(CHART), "-n", "gpu-ops", "--dry-run=client", "-f", str(path)]
    notes = run_helm(helm, *args).stdout.split("NOTES:", 1)[1]
    (doctor,) = [line for line in notes.splitlines() if "castslice doctor" in line]
    (preview,) = [line for line in notes.splitlines() if "castslice preview" in line]
    doctor_words = shlex.split(doctor)
    # Objects are named after a release that contains "castslice", else RELEASE-castslice.
    fullname = name if "castslice" in name else f"{name}-castslice"
    assert doctor_words[:4] == ["castslice", "doctor", "--name", fullname]
    preview_words = shlex.split(preview)
    assert preview_words[:4] == ["castslice", "preview", "-f", "my-pod.yaml"]
    assert doctor_words[4:] == preview_words[4:]
    # The commands, run as printed, configure themselves as the release's Pods are.
    parser = argparse.ArgumentParser()
    add_settings(parser)
    commands = config_from(parser.parse_args(doctor_words[4:]), environ={})
    objects = template(helm, tmp_path, values, release=name, namespace="gpu-ops")
    (container,) = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    environment = container_environment_with_secrets(objects, container)
    del environment["CASTSLICE_POLICY_FILE"]
    assert commands == load_config(environment)
    assert (doctor_words[4:] == []) == (release == "defaults")


class TestDefaults:
    """The chart with its default values, as `helm install` would apply it."""

    @pytest.fixture
    def objects(self, defaults: Objects) -> Objects:
        return defaults

    @pytest.fixture
    def pod_spec(self, objects: Objects) -> dict[str, Any]:
        return only(objects, "Deployment")["spec"]["template"]["spec"]

    def test_everything_namespaced_lives_in_the_namespace_the_webhook_skips(
        self, objects: Objects
    ) -> None:
        hook = only(objects, "MutatingWebhookConfiguration")
        for webhook in hook["webhooks"]:
            assert "castslice" in webhook["namespaceSelector"]["matchExpressions"][0]["values"]
        for obj in objects:
            if obj["kind"] != "MutatingWebhookConfiguration":
                assert obj["metadata"]["namespace"] == "castslice", obj["metadata"]["name"]

    def test_two_replicas_and_a_disruption_budget_that_keeps_one(self, objects: Objects) -> None:
        deployment = only(objects, "Deployment")
        budget = only(objects, "PodDisruptionBudget")
        assert deployment["spec"]["replicas"] >= 2
        assert budget["spec"]["minAvailable"] >= 1
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        assert only(objects, "Service")["spec"]["selector"].items() <= pod_labels.items()

    def test_pods_are_restricted(self, pod_spec: dict[str, Any]) -> None:
        assert_restricted(pod_spec)
        assert pod_spec["automountServiceAccountToken"] is False
        assert pod_spec["enableServiceLinks"] is False

    def test_runs_under_its_own_service_account(
        self, objects: Objects, pod_spec: dict[str, Any]
    ) -> None:
        account = only(objects, "ServiceAccount")
        assert pod_spec["serviceAccountName"] == account["metadata"]["name"]
        assert account["automountServiceAccountToken"] is False

    def test_resource_requests_are_set(self, pod_spec: dict[str, Any]) -> None:
        for container in containers(pod_spec):
            assert {"cpu", "memory"} <= container["resources"]["requests"].keys()
            assert "memory" in container["resources"]["limits"]

    def test_probes_ask_the_health_endpoint_over_https(self, pod_spec: dict[str, Any]) -> None:
        container = pod_spec["containers"][0]
        port_names = {port["name"] for port in container["ports"]}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            check = container[probe]["httpGet"]
            assert check["scheme"] == "HTTPS"
            assert check["path"] == "/healthz"
            assert check["port"] in port_names

    def test_the_container_runs_the_tls_server_on_the_image(self, pod_spec: dict[str, Any]) -> None:
        container = pod_spec["containers"][0]
        assert container["image"] == f"{SAMPLE_REPOSITORY}:{__version__}"
        assert container["command"] == ["gunicorn", "--config=python:castslice.serve.tls"]
        assert "args" not in container  # castslice/serve/tls.py holds every setting
        (https,) = [port for port in container["ports"] if port["name"] == "https"]
        assert castslice.serve.tls.bind == [f"0.0.0.0:{https['containerPort']}"]

    def test_the_cert_manager_secret_is_mounted_where_the_tls_server_reads_it(
        self, objects: Objects, pod_spec: dict[str, Any]
    ) -> None:
        mounts = {m["name"]: m for m in pod_spec["containers"][0]["volumeMounts"]}
        volumes = {v["name"]: v for v in pod_spec["volumes"]}
        serving = next(
            cert for cert in of_kind(objects, "Certificate") if not cert["spec"].get("isCA")
        )
        (tls,) = [v for v in volumes.values() if "secret" in v]
        assert tls["secret"]["secretName"] == serving["spec"]["secretName"]
        directory = mounts[tls["name"]]["mountPath"]
        assert castslice.serve.tls.certfile == f"{directory}/tls.crt"
        assert castslice.serve.tls.keyfile == f"{directory}/tls.key"
        # The root filesystem is read-only; gunicorn writes its heartbeat files to /tmp.
        assert "emptyDir" in volumes[next(n for n, m in mounts.items() if m["mountPath"] == "/tmp")]

    def test_the_serving_certificate_is_signed_by_a_ca_that_survives_its_renewal(
        self, objects: Objects
    ) -> None:
        issuers = {issuer["metadata"]["name"]: issuer for issuer in of_kind(objects, "Issuer")}
        certificates = {cert["metadata"]["name"]: cert for cert in of_kind(objects, "Certificate")}
        serving = certificates["castslice-serving"]["spec"]
        ca_issuer = issuers[serving["issuerRef"]["name"]]["spec"]["ca"]
        ca = next(c["spec"] for c in certificates.values() if c["spec"].get("isCA"))
        assert ca_issuer["secretName"] == ca["secretName"]
        assert serving["privateKey"]["rotationPolicy"] == "Always"
        assert "server auth" in serving["usages"]


class TestMetrics:
    """metrics.enabled and metrics.podMonitor.enabled, the port left at its default."""

    @pytest.fixture
    def objects(self, helm: Path, tmp_path: Path) -> Objects:
        metrics = {"enabled": True, "podMonitor": {"enabled": True}}
        return template(helm, tmp_path, {"metrics": metrics})

    @pytest.fixture
    def container(self, objects: Objects) -> dict[str, Any]:
        return only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]

    def test_off_by_default(self, defaults: Objects) -> None:
        objects = defaults
        container = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        assert "PodMonitor" not in {obj["kind"] for obj in objects}
        assert [port["name"] for port in container["ports"]] == ["https"]
        assert container_environment(objects, container)["CASTSLICE_METRICS"] == "false"

    def test_metrics_are_on_and_served_on_the_named_port(
        self, objects: Objects, container: dict[str, Any]
    ) -> None:
        environment = container_environment(objects, container)
        assert environment["CASTSLICE_METRICS"] == "true"
        (metrics,) = [port for port in container["ports"] if port["name"] == "metrics"]
        assert metrics == {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}
        assert environment["CASTSLICE_METRICS_PORT"] == str(metrics["containerPort"])
        # The webhook port is untouched.
        assert {port["name"] for port in container["ports"]} == {"https", "metrics"}

    def test_the_pod_monitor_scrapes_that_port_of_the_castslice_pods(
        self, objects: Objects
    ) -> None:
        monitor = only(objects, "PodMonitor")
        deployment = only(objects, "Deployment")
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        # No namespaceSelector: Prometheus looks in the PodMonitor's own namespace.
        assert monitor["metadata"]["namespace"] == deployment["metadata"]["namespace"]
        assert "namespaceSelector" not in monitor["spec"]
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        assert monitor["spec"]["podMetricsEndpoints"] == [
            {"port": "metrics", "path": "/metrics", "scheme": "http"}
        ]

    def test_no_service_exposes_the_metrics_port(self, objects: Objects) -> None:
        (service,) = [obj for obj in of_kind(objects, "Service") if obj["apiVersion"] == "v1"]
        assert [port["targetPort"] for port in service["spec"]["ports"]] == ["https"]

    @pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
    def test_built_in_kinds_still_match_the_kubernetes_schemas(
        self, objects: Objects, version: str
    ) -> None:
        for obj in built_in(objects):
            kubernetes_validate.validate(obj, version, strict=True)
        assert_restricted(only(objects, "Deployment")["spec"]["template"]["spec"])


def test_the_registration_differs_from_the_shared_settings_only_in_client_config(
    defaults: Objects,
) -> None:
    objects = defaults
    configuration = only(objects, "MutatingWebhookConfiguration")
    ours = comparable(configuration, secret=False, namespace="castslice")
    assert without_client_config(ours) == without_client_config(
        yaml.safe_load(SHARED_WEBHOOK.read_text())
    )
    assert_webhook_contract(configuration)


def test_the_registration_calls_the_service_and_gets_its_ca_from_cert_manager(
    defaults: Objects,
) -> None:
    objects = defaults
    configuration = only(objects, "MutatingWebhookConfiguration")
    service = only(objects, "Service")
    for webhook in configuration["webhooks"]:
        # caBundle is injected by cert-manager; url would bypass the Service.
        assert webhook["clientConfig"] == {
            "service": {
                "name": service["metadata"]["name"],
                "namespace": service["metadata"]["namespace"],
                "path": "/",
                "port": service["spec"]["ports"][0]["port"],
            }
        }

    source = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    namespace, _, name = source.partition("/")
    certificate = next(
        cert
        for cert in of_kind(objects, "Certificate")
        if (cert["metadata"]["namespace"], cert["metadata"]["name"]) == (namespace, name)
    )
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert host in certificate["spec"]["dnsNames"]


def test_every_setting_other_than_its_default_reaches_the_application(
    helm: Path, tmp_path: Path
) -> None:
    values = {
        "backend": "nvidia",
        "slicesPerGpu": 8,
        "sharingDegrees": [8, 2],
        "sharingStrategy": "mps",
        "sharedResource": "example.com/gpu-slice",
        "gpuResource": "example.com/gpu",
        "presets": {"training": 8, "inference": None, "notebook": 3},
        "defaultSlices": 2,
        "maxSliceRatio": 1_000_000,
        "pathToken": SAMPLE_TOKEN,
        "draDeviceClass": "gpu.example.com",
        "draCapacity": "example.com/slices",
        "draGpuMemory": "24576Mi",
        "gpuMemory": "143771Mi",
        "gpuMemoryEnforcedOnly": False,
        "metrics": {"enabled": True, "port": 9191},
        "mig": {
            "gpuModels": ["H200", "A100-80GB"],
            "profiles": ["1g.18gb", "3g.40gb"],
            "stack": "single",
            "fit": "strict",
            "wholeGpu": "7g",
            "timeSharedClients": 4,
            "productNames": {"H200": ["NVIDIA H200 NVL", "NVIDIA H200 SXM"]},
        },
    }
    objects = template(helm, tmp_path, values)
    (container,) = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    environment = container_environment_with_secrets(objects, container)
    del environment["CASTSLICE_POLICY_FILE"]
    loaded = load_config(environment)
    assert loaded == Config(
        shared_resource="example.com/gpu-slice",
        gpu_resource="example.com/gpu",
        presets={"training": 8, "batch": 2, "dev": 1, "notebook": 3},
        default_slices=2,
        max_slice_ratio=1_000_000,
        path_token=SAMPLE_TOKEN,
        backend="nvidia",
        slices_per_gpu=8,
        sharing_degrees=(2, 8),
        sharing_strategy="mps",
        metrics=True,
        metrics_port=9191,
        dra_device_class="gpu.example.com",
        dra_capacity="example.com/slices",
        dra_gpu_memory=24576 * 2**20,
        gpu_memory=143771 * 2**20,
        gpu_memory_enforced_only=False,
        mig_gpu_models=("H200", "A100-80GB"),
        mig_profiles=("1g.18gb", "3g.40gb"),
        mig_stack="single",
        mig_fit="strict",
        mig_whole_gpu="7g",
        mig_time_shared_clients=4,
        mig_product_names={"H200": ("NVIDIA H200 NVL", "NVIDIA H200 SXM")},
    )
    default = Config()
    # schedulerName is refused with nvidia: the second scheduler's own test carries it.
    for field in dataclasses.fields(Config):
        if field.name not in ("policy", "scheduler_name"):
            assert getattr(loaded, field.name) != getattr(default, field.name), field.name


def _extender_objects(objects: Objects) -> dict[str, dict[str, Any]]:
    return {obj["kind"]: obj for obj in objects if obj["metadata"]["name"].endswith("-extender")}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_extender_runs_when_asked_beside_the_webhook_with_what_its_watches_need(
    helm: Path, tmp_path: Path, version: str
) -> None:
    values = {"backend": "dra", "slicesPerGpu": 100, "extender": {"enabled": True}}
    objects = template(helm, tmp_path, values)
    made = _extender_objects(objects)
    assert set(made) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment",
                         "Service"}  # fmt: skip
    for obj in made.values():
        kubernetes_validate.validate(obj, version, strict=True)
    pod = made["Deployment"]["spec"]["template"]
    assert_restricted(pod["spec"])
    (container,) = pod["spec"]["containers"]
    # The command the image runs is the CLI's, its flags accepted by it.
    assert container["command"][:4] == ["python", "-m", "castslice", "extender"]
    parser = argparse.ArgumentParser()
    extender_command.add_arguments(parser)
    add_settings(parser)
    args = parser.parse_args(container["command"][4:])
    assert (args.address, args.port) == ("0.0.0.0", 8888)
    # The same settings as the webhook's, read the same way.
    environment = container_environment(objects, container)
    assert load_config(environment).backend == "dra"
    assert load_config(environment).slices_per_gpu == 100
    # The webhook's Service never sends a review to the extender, nor the extender's a
    # scheduler call to the webhook.
    labels = pod["metadata"]["labels"]
    webhook = next(obj for obj in of_kind(objects, "Service") if obj not in made.values())
    assert not webhook["spec"]["selector"].items() <= labels.items()
    assert made["Service"]["spec"]["selector"].items() <= labels.items()
    # Its watches: list and watch each kind, get for a claim not delivered yet.
    rights = {
        (group, resource): set(rule["verbs"])
        for rule in made["ClusterRole"]["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert rights == {
        ("", "nodes"): {"list", "watch"},
        ("", "pods"): {"list", "watch"},
        ("resource.k8s.io", "resourceslices"): {"list", "watch"},
        ("resource.k8s.io", "resourceclaims"): {"get", "list", "watch"},
    }
    # The shipped profile calls this Service for a release named castslice in castslice.
    profile = yaml.safe_load((ROOT / "infra" / "scheduler" / "fgd-extender.yaml").read_text())
    service = made["Service"]
    url = (
        f"http://{service['metadata']['name']}.castslice.svc:{service['spec']['ports'][0]['port']}"
    )
    assert profile["extenders"][0]["urlPrefix"] == url


def test_the_extender_is_refused_where_it_cannot_score_and_off_by_default(
    helm: Path, tmp_path: Path, defaults: Objects
) -> None:
    # The default backend (resource) and mig: neither devices with shares nor node pools.
    for backend in ("resource", "mig"):
        values = {"backend": backend, "extender": {"enabled": True}}
        error = template_error(helm, tmp_path, values)
        assert (
            "extender.enabled: the scheduler extender scores GPUs shared as DRA devices or by "
            f"sharing node pools; set backend to dra, gke, nvidia (backend is {backend})"
        ) in error
    assert _extender_objects(defaults) == {}


SECOND_SCHEDULER = {
    "backend": "dra",
    "schedulerName": "castslice-scheduler",
    "extender": {"enabled": True, "scheduler": {"enabled": True}},
}
BOOTSTRAP_ROLES = {
    role["metadata"]["name"]: role
    for role in yaml.safe_load(
        (ROOT / "tests/upstream/kubernetes-v1.37.2-bootstrap-scheduler-roles.yaml").read_text()
    )
}


def _scheduler_objects(objects: Objects) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (obj["kind"], obj["metadata"]["name"]): obj
        for obj in objects
        if obj["metadata"]["name"].startswith("castslice-scheduler")
    }


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_second_scheduler_is_the_stock_one_with_the_extender_profile_under_its_own_name(
    helm: Path, tmp_path: Path, version: str
) -> None:
    objects = template(helm, tmp_path, SECOND_SCHEDULER, kube_version=f"{version}.4")
    made = _scheduler_objects(objects)
    for obj in made.values():
        kubernetes_validate.validate(obj, version, strict=True)
    deployment = made[("Deployment", "castslice-scheduler")]
    pod = deployment["spec"]["template"]
    assert_restricted(pod["spec"])
    (container,) = pod["spec"]["containers"]
    # The stock image of the cluster's own release: never newer than its API server.
    assert container["image"] == f"registry.k8s.io/kube-scheduler:v{version}.4"
    assert container["command"][0] == "/usr/local/bin/kube-scheduler"
    # Its configuration is the shipped extender profile, under its own name and lease,
    # calling the extender's Service.
    config = yaml.safe_load(made[("ConfigMap", "castslice-scheduler")]["data"]["config.yaml"])
    shipped = yaml.safe_load((ROOT / "infra/scheduler/fgd-extender.yaml").read_text())
    assert config.pop("leaderElection") == {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceName": "castslice-scheduler",
        "resourceNamespace": "castslice",
    }
    (profile,) = config["profiles"]
    assert profile.pop("schedulerName") == "castslice-scheduler"
    shipped["profiles"][0].pop("schedulerName")
    assert config == shipped
    extender = next(obj for obj in objects if obj["kind"] == "Service" and "extender" in
                    obj["metadata"]["name"])  # fmt: skip
    assert config["extenders"][0]["urlPrefix"] == (
        f"http://{extender['metadata']['name']}.castslice.svc:{extender['spec']['ports'][0]['port']}"
    )
    # The webhook sends the Pods it rewrites to it.
    (webhook,) = [
        obj for obj in of_kind(objects, "Deployment") if obj["metadata"]["name"] == "castslice"
    ]
    (server,) = webhook["spec"]["template"]["spec"]["containers"]
    environment = container_environment(objects, server)
    assert environment["CASTSLICE_SCHEDULER_NAME"] == "castslice-scheduler"


def test_the_second_scheduler_has_the_clusters_scheduler_roles_and_its_own_lease(
    helm: Path, tmp_path: Path
) -> None:
    made = _scheduler_objects(template(helm, tmp_path, SECOND_SCHEDULER))
    account = {"kind": "ServiceAccount", "name": "castslice-scheduler", "namespace": "castslice"}
    bound = {
        (obj["kind"], obj["metadata"].get("namespace"), obj["roleRef"]["name"])
        for obj in made.values()
        if obj["kind"] in ("ClusterRoleBinding", "RoleBinding")
        if obj["subjects"] == [account]
    }
    assert bound == {
        ("ClusterRoleBinding", None, "system:kube-scheduler"),
        ("ClusterRoleBinding", None, "system:volume-scheduler"),
        ("RoleBinding", "kube-system", "extension-apiserver-authentication-reader"),
        ("RoleBinding", "castslice", "castslice-scheduler-lease"),
    }
    # The bound roles are the API server's own; only the lease rules of
    # system:kube-scheduler name a lease, kube-scheduler's, which the Role mirrors for its own.
    lease_rules = [
        rule
        for rule in BOOTSTRAP_ROLES["system:kube-scheduler"]["rules"]
        if rule.get("resources") == ["leases"]
    ]
    own = [
        {**rule, "resourceNames": ["castslice-scheduler"]} if "resourceNames" in rule else rule
        for rule in lease_rules
    ]
    role = made[("Role", "castslice-scheduler-lease")]
    assert role["metadata"]["namespace"] == "castslice"
    assert role["rules"] == own


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {**SECOND_SCHEDULER, "extender": {"enabled": False, "scheduler": {"enabled": True}}},
            "extender.scheduler.enabled: the second scheduler runs the extender's profile",
        ),
        (
            {**SECOND_SCHEDULER, "schedulerName": None},
            "extender.scheduler.enabled: set schedulerName",
        ),
        (
            {**SECOND_SCHEDULER, "schedulerName": "default-scheduler"},
            "schedulerName: default-scheduler is the cluster's own scheduler",
        ),
        (
            {"backend": "nvidia", "schedulerName": "castslice-scheduler"},
            "schedulerName is set, but with backend nvidia it cannot",
        ),
    ],
    ids=["without the extender", "without a name", "the default name", "a pool backend"],
)
def test_the_second_scheduler_is_refused_where_it_cannot_work_or_be_safe(
    helm: Path, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    assert message in template_error(helm, tmp_path, values)


def test_no_second_scheduler_and_no_scheduler_name_by_default(defaults: Objects) -> None:
    assert _scheduler_objects(defaults) == {}
    (webhook,) = [obj for obj in of_kind(defaults, "Deployment")]
    (server,) = webhook["spec"]["template"]["spec"]["containers"]
    assert "CASTSLICE_SCHEDULER_NAME" not in container_environment(defaults, server)


def test_the_chart_installs_the_extender_for_exactly_the_backends_the_command_serves(
    helm: Path, tmp_path: Path
) -> None:
    installs = set()
    for backend in ALL_BACKENDS:
        values = {"backend": backend, "slicesPerGpu": 8}
        # Each backend installs without the extender: a refusal below is the extender's.
        template(helm, tmp_path, values)
        with_extender = {**values, "extender": {"enabled": True}}
        result = run_helm(helm, *template_args(values_file(tmp_path, with_extender)), check=False)
        if result.returncode == 0:
            installs.add(backend)
        else:
            assert "extender.enabled: the scheduler extender scores" in result.stderr
    assert installs == set(extender_backends()) == {"dra", "gke", "nvidia"}


@pytest.mark.parametrize("backend", ["nvidia", "gke"])
def test_the_extender_installs_on_the_pool_backends_with_their_settings(
    helm: Path, tmp_path: Path, backend: str
) -> None:
    values = {"backend": backend, "sharingDegrees": [2, 4], "extender": {"enabled": True}}
    objects = template(helm, tmp_path, values)
    (container,) = _extender_objects(objects)["Deployment"]["spec"]["template"]["spec"][
        "containers"
    ]
    config = load_config(container_environment(objects, container))
    assert (config.backend, config.sharing_degrees) == (backend, (2, 4))
