"""The chart's reportExporter (`castslice report --serve`), rendered by the real helm: its
objects valid for the Kubernetes schemas and its PodMonitor for prometheus-operator's own
CRD; a ClusterRole of exactly what docs/operate.md says the report reads; the image's
`report` target; never reached by the webhook's Service. The end-to-end suite runs it
against an API server with these rights (tests/e2e/test_chart_install.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from castslice import __version__
from castslice.environment import load_config
from tests.helm import (
    SAMPLE_REPOSITORY,
    GoModuleUnavailable,
    Objects,
    pod_monitor_crd,
    template,
    template_error,
)
from tests.helpers import REPORT, arguments_of

from .conftest import ci_or_skip
from .variants import ROOT, assert_restricted, built_in, container_environment

NAME = "castslice-report"
ON = {"reportExporter": {"enabled": True}}
KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service"}


def exporter_objects(objects: Objects) -> Objects:
    return [obj for obj in objects if obj["metadata"]["name"] == NAME]


def named(objects: Objects, kind: str, name: str = NAME) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


@pytest.fixture(scope="module")
def rendered(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Objects:
    values = {**ON, "reportExporter": {"enabled": True, "podMonitor": {"enabled": True}}}
    return template(helm, tmp_path_factory.mktemp("report"), values)


def test_off_by_default(helm: Path, tmp_path: Path) -> None:
    assert exporter_objects(template(helm, tmp_path, {})) == []


def test_on_it_is_its_own_deployment_account_role_service_and_pod_monitor(
    rendered: Objects,
) -> None:
    kinds = {obj["kind"] for obj in exporter_objects(rendered)}
    assert kinds == KINDS | {"PodMonitor"}


@pytest.mark.parametrize("version", ["1.30", "1.37"])
def test_its_built_in_objects_match_the_kubernetes_schemas(rendered: Objects, version: str) -> None:
    for obj in built_in(exporter_objects(rendered)):
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.fixture(scope="module")
def pod_monitor_schema(helm: Path) -> dict[str, Any]:
    """The PodMonitor's schema from prometheus-operator's CRD (after helm: without Go, the
    chart tests skip for helm's reason first)."""
    try:
        crd = pod_monitor_crd()
    except GoModuleUnavailable as error:
        ci_or_skip(str(error))
        raise
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def test_the_pod_monitor_is_valid_for_prometheus_operators_crd_and_scrapes_the_exporter(
    rendered: Objects, pod_monitor_schema: dict[str, Any]
) -> None:
    monitor = named(rendered, "PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    jsonschema.validate(monitor, pod_monitor_schema)
    deployment = named(rendered, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert endpoint == {"port": "metrics", "path": "/metrics", "scheme": "http"}
    assert [port["name"] for port in container["ports"]] == [endpoint["port"]]
    # A scrape the CRD's schema would refuse fails here too.
    broken = {**monitor, "spec": {**monitor["spec"], "podMetricsEndpoints": [{"port": 9100}]}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, pod_monitor_schema)


def operate_cluster_role() -> dict[str, Any]:
    """The ClusterRole docs/operate.md gives the exporter."""
    text = (ROOT / "docs" / "operate.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    (role,) = [yaml.safe_load(b) for b in blocks if "kind: ClusterRole\n" in b]
    return role


@pytest.mark.parametrize("backend", ["resource", "nvidia", "gke", "dra"])
def test_the_role_is_exactly_what_docs_operate_says_the_report_reads(
    helm: Path, tmp_path: Path, backend: str
) -> None:
    objects = template(helm, tmp_path, {**ON, "backend": backend})
    rules = named(objects, "ClusterRole")["rules"]
    documented = operate_cluster_role()["rules"]
    dra_only = [rule for rule in documented if rule["apiGroups"] == ["resource.k8s.io"]]
    expected = documented if backend == "dra" else [r for r in documented if r not in dra_only]
    assert rules == expected
    assert all(set(rule["verbs"]) <= {"get", "list"} for rule in rules)
    binding = named(objects, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME,
    }  # fmt: skip
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": NAME, "namespace": "castslice"}
    ]


def test_only_the_exporter_gets_a_token_and_the_webhook_service_never_reaches_it(
    rendered: Objects,
) -> None:
    exporter = named(rendered, "Deployment")["spec"]["template"]
    webhook = named(rendered, "Deployment", "castslice")["spec"]["template"]
    assert exporter["spec"]["serviceAccountName"] == NAME
    assert exporter["spec"]["automountServiceAccountToken"] is True
    assert webhook["spec"]["automountServiceAccountToken"] is False
    assert_restricted(exporter["spec"])
    exporter_labels = exporter["metadata"]["labels"]
    webhook_service = named(rendered, "Service", "castslice")["spec"]["selector"]
    assert not webhook_service.items() <= exporter_labels.items()
    own_service = named(rendered, "Service")["spec"]
    assert own_service["selector"].items() <= exporter_labels.items()
    assert not own_service["selector"].items() <= webhook["metadata"]["labels"].items()
    assert own_service["ports"] == [
        {"name": "metrics", "port": 9100, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_it_runs_the_images_report_command_with_the_webhooks_settings(
    helm: Path, tmp_path: Path
) -> None:
    values = {"reportExporter": {"enabled": True, "port": 9300}, "backend": "gke",
              "slicesPerGpu": 8, "sharingDegrees": [2, 8]}  # fmt: skip
    objects = template(helm, tmp_path, values)
    (container,) = named(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{SAMPLE_REPOSITORY}-report:{__version__}"
    # The image's command (Dockerfile, target report), on the chosen port.
    (image_command,) = arguments_of("CMD", REPORT)
    expected = [word if word != "9100" else "9300" for word in json.loads(image_command)]
    assert container["command"] == expected
    assert container["ports"] == [{"name": "metrics", "containerPort": 9300, "protocol": "TCP"}]
    (webhook,) = named(objects, "Deployment", "castslice")["spec"]["template"]["spec"]["containers"]
    webhook_environment = container_environment(objects, webhook)
    del webhook_environment["CASTSLICE_POLICY_FILE"]
    assert container_environment(objects, container) == webhook_environment
    assert load_config(container_environment(objects, container)).backend == "gke"


def test_its_image_follows_the_webhooks_unless_set(helm: Path, tmp_path: Path) -> None:
    values = {"image": {"repository": "registry.example/castslice", "tag": "v9"}, **ON}
    (container,) = named(template(helm, tmp_path, values), "Deployment")["spec"]["template"][
        "spec"
    ]["containers"]
    assert container["image"] == "registry.example/castslice-report:v9"
    chosen = {"enabled": True, "image": {"repository": "mirror.example/report", "tag": "r1"}}
    objects = template(helm, tmp_path, {"reportExporter": chosen})
    (container,) = named(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "mirror.example/report:r1"


def test_a_bad_value_is_refused_with_its_name(helm: Path, tmp_path: Path) -> None:
    error = template_error(helm, tmp_path, {"reportExporter": {"enabled": True, "port": 0}})
    assert "/reportExporter/port" in error
    error = template_error(helm, tmp_path, {"reportExporter": {"enabled": "yes"}})
    assert "/reportExporter/enabled" in error
