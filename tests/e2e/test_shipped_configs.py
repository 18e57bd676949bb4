"""The shipped deployment files, submitted to the real API server (dry run).

Each variant's MutatingWebhookConfiguration (Cloud Run as infra/main.tf builds
it, Knative as kustomize renders it, in-cluster as `helm template` renders the
chart) must be accepted and stored with every setting as written, and the
chart's Deployment's Pod must pass the restricted Pod Security admission.
Knative objects are custom resources this API server does not serve; they are
checked offline in tests/deploy. The chart is installed for real in
test_chart_install.py.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.utils
import pytest

from tests.deploy.variants import (
    KUSTOMIZE_VARIANTS,
    cloud_run_configuration,
    copy_infra,
    only,
    render,
)
from tests.helm import template

Objects = list[dict[str, Any]]
# The label docs/deploy.md gives CastSlice's namespace before `helm install`.
RESTRICTED = "pod-security.kubernetes.io/enforce"


@pytest.fixture(scope="module")
def rendered(
    kubectl: Path, helm: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Objects]:
    infra = copy_infra(tmp_path_factory.mktemp("shipped"))
    variants = {variant: render(kubectl, infra, variant) for variant in KUSTOMIZE_VARIANTS}
    chart = template(helm, tmp_path_factory.mktemp("chart"), {})
    return {**variants, "in-cluster": chart, "cloud-run": [cloud_run_configuration()]}


def dry_run_create(api: kubernetes.client.ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    (created,) = kubernetes.utils.create_from_dict(api, obj, dry_run="All")
    return api.sanitize_for_serialization(created)


@pytest.mark.parametrize("variant", ["cloud-run", "knative", "in-cluster"])
def test_the_api_server_stores_each_webhook_configuration_as_written(
    api: kubernetes.client.ApiClient, rendered: dict[str, Objects], variant: str
) -> None:
    configuration = copy.deepcopy(only(rendered[variant], "MutatingWebhookConfiguration"))
    # Another name: the suite's own registration already holds the shipped one.
    configuration["metadata"]["name"] = f"castslice-shipped-{variant}"

    stored = dry_run_create(api, configuration)

    for written, kept in zip(configuration["webhooks"], stored["webhooks"], strict=True):
        assert {key: kept.get(key) for key in written} == written


@pytest.fixture
def scratch_namespace(
    api: kubernetes.client.ApiClient, rendered: dict[str, Objects]
) -> Iterator[str]:
    """A namespace labelled as docs/deploy.md labels CastSlice's (the restricted Pod Security
    Standard), created for real with the chart's ServiceAccount in it."""
    core = kubernetes.client.CoreV1Api(api)
    objects = rendered["in-cluster"]
    name = f"castslice-shipped-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name, "labels": {RESTRICTED: "restricted"}}})
    try:
        account = copy.deepcopy(only(objects, "ServiceAccount"))
        account["metadata"]["namespace"] = name
        core.create_namespaced_service_account(name, account)
        yield name
    finally:
        core.delete_namespace(name)


def deployment_pod(objects: Objects, namespace: str) -> dict[str, Any]:
    template = only(objects, "Deployment")["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**template["metadata"], "name": "castslice-shipped", "namespace": namespace},
        "spec": copy.deepcopy(template["spec"]),
    }


def test_the_deployment_pod_passes_the_restricted_pod_security_admission(
    api: kubernetes.client.ApiClient, rendered: dict[str, Objects], scratch_namespace: str
) -> None:
    pod = deployment_pod(rendered["in-cluster"], scratch_namespace)
    dry_run_create(api, pod)

    # The control: the same namespace refuses a Pod that may escalate privileges,
    # so the acceptance above is the restricted profile's doing.
    loose = copy.deepcopy(pod)
    loose["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    with pytest.raises(kubernetes.utils.FailToCreateError) as refused:
        dry_run_create(api, loose)
    (error,) = refused.value.api_exceptions
    assert error.status == 403
    assert "PodSecurity" in error.body
