"""The Kubernetes manifests of the Knative and in-cluster variants.

Built-in kinds are validated offline against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict: unknown fields fail). cert-manager, Knative and
Prometheus Operator kinds are custom resources whose schemas it does not ship;
they are checked by the assertions below instead.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

import castslice.tls

from .conftest import kubectl
from .variants import (
    SAMPLE_IMAGE,
    SHARED_WEBHOOK,
    built_in,
    container_environment,
    containers,
    copy_infra,
    load_yaml,
    of_kind,
    only,
    render,
)

Build = Callable[[str], list[dict[str, Any]]]

# matchConditions are GA from 1.30; 1.37 is what the end-to-end suite runs.
KUBERNETES_VERSIONS = ("1.30", "1.37")
NAMESPACE = "castslice"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("variant", ["in-cluster", "knative"])
def test_built_in_kinds_match_the_kubernetes_schemas(
    kustomize: Build, variant: str, version: str
) -> None:
    objects = kustomize(variant)
    for obj in built_in(objects):
        kubernetes_validate.validate(obj, version, strict=True)
    custom = {obj["kind"] for obj in objects} - {obj["kind"] for obj in built_in(objects)}
    assert custom <= {"Issuer", "Certificate", "Service"}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_shared_webhook_file_matches_the_kubernetes_schema(version: str) -> None:
    kubernetes_validate.validate(load_yaml(SHARED_WEBHOOK), version, strict=True)


def test_everything_namespaced_lives_in_the_namespace_the_webhook_skips(kustomize: Build) -> None:
    excluded = load_yaml(SHARED_WEBHOOK)["webhooks"][0]["namespaceSelector"]
    assert NAMESPACE in excluded["matchExpressions"][0]["values"]
    for variant in ("in-cluster", "knative"):
        objects = kustomize(variant)
        assert only(objects, "Namespace")["metadata"]["name"] == NAMESPACE
        for obj in objects:
            if obj["kind"] not in ("Namespace", "MutatingWebhookConfiguration"):
                assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]


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


class TestInCluster:
    @pytest.fixture
    def objects(self, kustomize: Build) -> list[dict[str, Any]]:
        return kustomize("in-cluster")

    @pytest.fixture
    def pod_spec(self, objects: list[dict[str, Any]]) -> dict[str, Any]:
        return only(objects, "Deployment")["spec"]["template"]["spec"]

    def test_namespace_enforces_the_restricted_pod_security_standard(
        self, objects: list[dict[str, Any]]
    ) -> None:
        labels = only(objects, "Namespace")["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"

    def test_two_replicas_and_a_disruption_budget_that_keeps_one(
        self, objects: list[dict[str, Any]]
    ) -> None:
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
        self, objects: list[dict[str, Any]], pod_spec: dict[str, Any]
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
        assert container["image"] == SAMPLE_IMAGE
        assert container["command"] == ["gunicorn", "--config=python:castslice.tls"]
        assert "args" not in container  # castslice/tls.py holds every setting
        (https,) = [port for port in container["ports"] if port["name"] == "https"]
        assert castslice.tls.bind == [f"0.0.0.0:{https['containerPort']}"]

    def test_the_cert_manager_secret_is_mounted_where_the_tls_server_reads_it(
        self, objects: list[dict[str, Any]], pod_spec: dict[str, Any]
    ) -> None:
        mounts = {m["name"]: m for m in pod_spec["containers"][0]["volumeMounts"]}
        volumes = {v["name"]: v for v in pod_spec["volumes"]}
        serving = next(
            cert for cert in of_kind(objects, "Certificate") if not cert["spec"].get("isCA")
        )
        (tls,) = [v for v in volumes.values() if "secret" in v]
        assert tls["secret"]["secretName"] == serving["spec"]["secretName"]
        directory = mounts[tls["name"]]["mountPath"]
        assert castslice.tls.certfile == f"{directory}/tls.crt"
        assert castslice.tls.keyfile == f"{directory}/tls.key"
        # The root filesystem is read-only; gunicorn writes its heartbeat files to /tmp.
        assert "emptyDir" in volumes[next(n for n, m in mounts.items() if m["mountPath"] == "/tmp")]

    def test_the_serving_certificate_is_signed_by_a_ca_that_survives_its_renewal(
        self, objects: list[dict[str, Any]]
    ) -> None:
        issuers = {issuer["metadata"]["name"]: issuer for issuer in of_kind(objects, "Issuer")}
        certificates = {cert["metadata"]["name"]: cert for cert in of_kind(objects, "Certificate")}
        serving = certificates["castslice-serving"]["spec"]
        ca_issuer = issuers[serving["issuerRef"]["name"]]["spec"]["ca"]
        ca = next(c["spec"] for c in certificates.values() if c["spec"].get("isCA"))
        assert ca_issuer["secretName"] == ca["secretName"]
        assert serving["privateKey"]["rotationPolicy"] == "Always"
        assert "server auth" in serving["usages"]


class TestKnative:
    @pytest.fixture
    def service(self, kustomize: Build) -> dict[str, Any]:
        return only(kustomize("knative"), "Service")

    def test_it_is_a_knative_service_of_the_same_image(self, service: dict[str, Any]) -> None:
        assert service["apiVersion"] == "serving.knative.dev/v1"
        container = service["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == SAMPLE_IMAGE
        assert "command" not in container and "args" not in container  # the image's CMD
        assert container["ports"] == [{"name": "http1", "containerPort": 8080}]
        assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
        assert {"cpu", "memory"} <= container["resources"]["requests"].keys()

    def test_one_instance_stays_warm_and_scale_is_capped(self, service: dict[str, Any]) -> None:
        annotations = service["spec"]["template"]["metadata"]["annotations"]
        assert int(annotations["autoscaling.knative.dev/min-scale"]) >= 1
        assert int(annotations["autoscaling.knative.dev/max-scale"]) >= int(
            annotations["autoscaling.knative.dev/min-scale"]
        )
        spec = service["spec"]["template"]["spec"]
        assert spec["containerConcurrency"] > 0
        assert spec["timeoutSeconds"] >= 5

    def test_pods_are_restricted_except_for_a_writable_root(self, service: dict[str, Any]) -> None:
        assert_restricted(service["spec"]["template"]["spec"], read_only_root=False)


def with_monitoring(infra: Path) -> list[dict[str, Any]]:
    """The in-cluster variant with the monitoring component enabled the way its
    kustomization.yaml says: by uncommenting `components`."""
    kustomization = infra / "in-cluster" / "kustomization.yaml"
    text = kustomization.read_text()
    commented = "# components:\n#   - monitoring\n"
    assert commented in text, "kustomization.yaml no longer offers the monitoring component"
    kustomization.write_text(text.replace(commented, "components:\n  - monitoring\n"))
    return render(kubectl(), infra, "in-cluster")


@pytest.fixture(scope="module")
def monitored(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return with_monitoring(copy_infra(tmp_path_factory.mktemp("monitoring")))


class TestMonitoringComponent:
    @pytest.fixture
    def objects(self, monitored: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return monitored

    @pytest.fixture
    def container(self, objects: list[dict[str, Any]]) -> dict[str, Any]:
        return only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]

    def test_off_by_default(self, kustomize: Build) -> None:
        objects = kustomize("in-cluster")
        container = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        assert "PodMonitor" not in {obj["kind"] for obj in objects}
        assert [port["name"] for port in container["ports"]] == ["https"]
        assert container_environment(objects, container).get("CASTSLICE_METRICS") != "true"

    def test_metrics_are_on_and_served_on_the_named_port(
        self, objects: list[dict[str, Any]], container: dict[str, Any]
    ) -> None:
        environment = container_environment(objects, container)
        assert environment["CASTSLICE_METRICS"] == "true"
        (metrics,) = [port for port in container["ports"] if port["name"] == "metrics"]
        assert metrics == {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}
        assert environment["CASTSLICE_METRICS_PORT"] == str(metrics["containerPort"])
        # The webhook port is untouched.
        assert {port["name"] for port in container["ports"]} == {"https", "metrics"}

    def test_the_pod_monitor_scrapes_that_port_of_the_castslice_pods(
        self, objects: list[dict[str, Any]]
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

    def test_no_service_exposes_the_metrics_port(self, objects: list[dict[str, Any]]) -> None:
        (service,) = [obj for obj in of_kind(objects, "Service") if obj["apiVersion"] == "v1"]
        assert [port["targetPort"] for port in service["spec"]["ports"]] == ["https"]

    @pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
    def test_built_in_kinds_still_match_the_kubernetes_schemas(
        self, objects: list[dict[str, Any]], version: str
    ) -> None:
        for obj in built_in(objects):
            kubernetes_validate.validate(obj, version, strict=True)
        assert_restricted(only(objects, "Deployment")["spec"]["template"]["spec"])
