"""The Kubernetes manifests of the Knative variant (the in-cluster one is the chart: test_chart).

Built-in kinds are validated offline against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict: unknown fields fail). Knative kinds are custom
resources whose schemas it does not ship; they are checked by the assertions below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest

from .variants import (
    SAMPLE_IMAGE,
    SHARED_WEBHOOK,
    assert_restricted,
    built_in,
    load_yaml,
    only,
)

Build = Callable[[str], list[dict[str, Any]]]

# matchConditions are GA from 1.30; 1.37 is what the end-to-end suite runs.
KUBERNETES_VERSIONS = ("1.30", "1.37")
NAMESPACE = "castslice"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("variant", ["knative"])
def test_built_in_kinds_match_the_kubernetes_schemas(
    kustomize: Build, variant: str, version: str
) -> None:
    objects = kustomize(variant)
    for obj in built_in(objects):
        kubernetes_validate.validate(obj, version, strict=True)
    custom = {obj["kind"] for obj in objects} - {obj["kind"] for obj in built_in(objects)}
    assert custom <= {"Service"}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_shared_webhook_file_matches_the_kubernetes_schema(version: str) -> None:
    kubernetes_validate.validate(load_yaml(SHARED_WEBHOOK), version, strict=True)


def test_everything_namespaced_lives_in_the_namespace_the_webhook_skips(kustomize: Build) -> None:
    excluded = load_yaml(SHARED_WEBHOOK)["webhooks"][0]["namespaceSelector"]
    assert NAMESPACE in excluded["matchExpressions"][0]["values"]
    for variant in ("knative",):
        objects = kustomize(variant)
        assert only(objects, "Namespace")["metadata"]["name"] == NAMESPACE
        for obj in objects:
            if obj["kind"] not in ("Namespace", "MutatingWebhookConfiguration"):
                assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]


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
