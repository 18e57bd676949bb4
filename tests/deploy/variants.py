"""The three shipped variants as data: rendering, and the webhook contract they must keep.

Plain functions (no fixtures), shared by tests/deploy and the end-to-end check
that applies the rendered configurations to a real API server.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hcl2
import yaml
from hcl2.utils import SerializationOptions

from tests.helm import Objects

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
SHARED_WEBHOOK = INFRA / "webhook" / "mutatingwebhookconfiguration.yaml"
# The in-cluster variant is the Helm chart (charts/castslice, tests/deploy/test_chart.py).
KUSTOMIZE_VARIANTS = ("knative",)
# Custom resources: kubernetes-validate ships no schema for them.
CUSTOM_GROUPS = ("cert-manager.io/", "serving.knative.dev/", "monitoring.coreos.com/")

# What the sample settings files put into the variants.
SAMPLE_IMAGE = "europe-west1-docker.pkg.dev/sample-project/castslice/castslice:0123abc"
SAMPLE_HOST = "castslice.castslice.knative.example.com"
SAMPLE_TOKEN = "Zx8qP2vN5mR7tK1wY4bC6dF9"
SAMPLE_CLOUD_RUN_URI = "https://castslice-7q2x5c3kfa-ew.a.run.app"

# The settings file each kustomize variant reads (castslice.env, never committed).
VARIANT_SETTINGS = {
    "knative": f"IMAGE={SAMPLE_IMAGE}\nHOST={SAMPLE_HOST}\nCASTSLICE_PATH_TOKEN={SAMPLE_TOKEN}\n",
}

_HCL_OPTIONS = SerializationOptions(
    with_comments=False, strip_string_quotes=True, explicit_blocks=False
)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_hcl(path: Path) -> dict[str, Any]:
    return hcl2.loads(path.read_text(), serialization_options=_HCL_OPTIONS)


def blocks(document: dict[str, Any], kind: str) -> dict[str, Any]:
    """Merge the `kind` blocks of a parsed HCL file into one {label: body} mapping."""
    merged: dict[str, Any] = {}
    for block in document.get(kind, []):
        merged.update(block)
    return merged


def copy_infra(destination: Path) -> Path:
    """A copy of infra/ with sample castslice.env files and the shipped policy.yaml.example
    as policy.yaml, as a user would have it."""
    copy = destination / "infra"
    shutil.copytree(INFRA, copy, ignore=shutil.ignore_patterns(".terraform", "*.tfstate*"))
    for variant, settings in VARIANT_SETTINGS.items():
        (copy / variant / "castslice.env").write_text(settings)
        shutil.copyfile(copy / variant / "policy.yaml.example", copy / variant / "policy.yaml")
    return copy


def render(kubectl: str | Path, infra: Path, variant: str) -> list[dict[str, Any]]:
    """`kubectl kustomize` one variant directory; the objects it would apply."""
    result = subprocess.run(
        [str(kubectl), "kustomize", str(infra / variant)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize {variant} failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def cloud_run_configuration(service_uri: str = SAMPLE_CLOUD_RUN_URI) -> dict[str, Any]:
    """What infra/main.tf applies: the shared file, each clientConfig set to {url}."""
    settings = load_yaml(SHARED_WEBHOOK)
    url = f"{service_uri}/{SAMPLE_TOKEN}"
    webhooks = [{**webhook, "clientConfig": {"url": url}} for webhook in settings["webhooks"]]
    return {**settings, "webhooks": webhooks}


def built_in(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects of Kubernetes' own kinds, which have a schema to validate against."""
    return [obj for obj in objects if not obj["apiVersion"].startswith(CUSTOM_GROUPS)]


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def only(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    matches = of_kind(objects, kind)
    assert len(matches) == 1, f"expected one {kind}, found {len(matches)}"
    return matches[0]


def containers(pod_spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod_spec.get("initContainers", [])
    yield from pod_spec["containers"]


def config_map(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The rendered ConfigMap called `name` (its generated name, hash included)."""
    (found,) = [obj for obj in of_kind(objects, "ConfigMap") if obj["metadata"]["name"] == name]
    return found


def container_environment(
    objects: list[dict[str, Any]], container: dict[str, Any]
) -> dict[str, str]:
    """The environment the kubelet would give `container`: its envFrom ConfigMaps in order,
    then its env, which wins over them."""
    environment: dict[str, str] = {}
    for source in container.get("envFrom", []):
        data = config_map(objects, source["configMapRef"]["name"]).get("data", {})
        environment.update({source.get("prefix", "") + key: value for key, value in data.items()})
    environment.update({item["name"]: item["value"] for item in container.get("env", [])})
    return environment


def without_client_config(configuration: dict[str, Any]) -> dict[str, Any]:
    """The webhook settings a variant must share: everything except clientConfig and
    the annotations a variant may add (cert-manager's CA injection)."""
    metadata = {k: v for k, v in configuration["metadata"].items() if k != "annotations"}
    webhooks = [
        {k: v for k, v in webhook.items() if k != "clientConfig"}
        for webhook in configuration["webhooks"]
    ]
    return {**configuration, "metadata": metadata, "webhooks": webhooks}


def assert_webhook_contract(configuration: dict[str, Any]) -> None:
    """Every setting the contract requires of a shipped webhook registration."""
    assert configuration["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert configuration["kind"] == "MutatingWebhookConfiguration"
    names = [webhook["name"] for webhook in configuration["webhooks"]]
    assert names == ["pods.castslice.castops.io", "workloads.castslice.castops.io"]
    for webhook in configuration["webhooks"]:
        labels = webhook["name"].split(".")
        assert len(labels) >= 3, webhook["name"]
        assert all(_DNS_LABEL.fullmatch(label) for label in labels), webhook["name"]
        assert webhook["rules"] == _WEBHOOK_RULES[webhook["name"]]
        assert webhook["failurePolicy"] == "Ignore"
        assert webhook["sideEffects"] == "None"
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert webhook["matchPolicy"] == "Equivalent"
        assert webhook["reinvocationPolicy"] == "Never"
        assert webhook["timeoutSeconds"] == 5
        assert webhook["namespaceSelector"] == {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system", "kube-node-lease", "castslice"],
                }
            ]
        }
        assert "objectSelector" not in webhook
        expressions = " ".join(c["expression"] for c in webhook["matchConditions"])
        if webhook["name"].startswith("workloads."):
            assert "k.startsWith('castops.io/')" in expressions
            continue
        assert "object.metadata.annotations['castops.io/optimize'] == 'true'" in expressions
        assert "!('kubernetes.io/config.mirror' in object.metadata.annotations)" in expressions


# The Pod webhook rewrites Pods; the workload webhook only warns about annotated workloads.
_WEBHOOK_RULES = {
    "pods.castslice.castops.io": [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "*",
        }
    ],
    "workloads.castslice.castops.io": [
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["apps"],
            "apiVersions": ["v1"],
            "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"],
            "scope": "Namespaced",
        },
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["batch"],
            "apiVersions": ["v1"],
            "resources": ["jobs", "cronjobs"],
            "scope": "Namespaced",
        },
        # Operators' resources with Pod templates (docs/operators.md), whether or not
        # their CRDs are installed.
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["kubeflow.org"],
            "apiVersions": ["v1", "v2beta1"],
            "resources": [
                "pytorchjobs",
                "tfjobs",
                "mpijobs",
                "paddlejobs",
                "xgboostjobs",
                "jaxjobs",
                "mxjobs",
            ],
            "scope": "*",
        },
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["trainer.kubeflow.org"],
            "apiVersions": ["v1alpha1"],
            "resources": ["trainingruntimes", "clustertrainingruntimes", "trainjobs"],
            "scope": "*",
        },
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["ray.io"],
            "apiVersions": ["v1"],
            "resources": ["rayclusters", "rayjobs", "rayservices"],
            "scope": "*",
        },
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["leaderworkerset.x-k8s.io"],
            "apiVersions": ["v1"],
            "resources": ["leaderworkersets"],
            "scope": "*",
        },
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["jobset.x-k8s.io"],
            "apiVersions": ["v1alpha2"],
            "resources": ["jobsets"],
            "scope": "*",
        },
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["batch.volcano.sh"],
            "apiVersions": ["v1alpha1"],
            "resources": ["jobs"],
            "scope": "*",
        },
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["serving.kserve.io"],
            "apiVersions": ["v1beta1"],
            "resources": ["inferenceservices"],
            "scope": "*",
        },
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["serving.knative.dev"],
            "apiVersions": ["v1"],
            "resources": ["services"],
            "scope": "*",
        },
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["argoproj.io"],
            "apiVersions": ["v1alpha1"],
            "resources": [
                "workflows",
                "workflowtemplates",
                "clusterworkflowtemplates",
                "cronworkflows",
            ],
            "scope": "*",
        },
    ],
}


def assert_restricted(pod_spec: dict[str, Any], *, read_only_root: bool = True) -> None:
    """The restricted Pod Security Standard, as the manifests spell it out."""
    pod = pod_spec.get("securityContext", {})
    for container in containers(pod_spec):
        security = {**pod, **container.get("securityContext", {})}
        assert security["runAsNonRoot"] is True
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert security.get("readOnlyRootFilesystem", False) is read_only_root
        assert security.get("runAsUser", 10001) != 0


def only_named(objects: Objects, kind: str, name: str) -> dict[str, Any]:
    (found,) = [obj for obj in of_kind(objects, kind) if obj["metadata"]["name"] == name]
    return found


def container_environment_with_secrets(objects: Objects, container: dict[str, Any]) -> dict:
    """What the kubelet gives `container`: its envFrom ConfigMaps and Secrets, then env."""
    config_maps = [s for s in container["envFrom"] if "configMapRef" in s]
    environment = container_environment(objects, {**container, "envFrom": config_maps})
    for source in container["envFrom"]:
        if "secretRef" in source:
            secret = only_named(objects, "Secret", source["secretRef"]["name"])
            environment.update(secret.get("stringData", {}))
            for key, value in secret.get("data", {}).items():
                environment[key] = base64.b64decode(value).decode()
    environment.update({item["name"]: item["value"] for item in container.get("env", [])})
    return environment
