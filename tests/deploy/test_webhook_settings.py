"""One source of truth: every variant's webhook registration is the shared file
(infra/webhook/mutatingwebhookconfiguration.yaml) with only clientConfig replaced."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from .variants import (
    INFRA,
    SAMPLE_HOST,
    SAMPLE_IMAGE,
    SAMPLE_TOKEN,
    SHARED_WEBHOOK,
    assert_webhook_contract,
    blocks,
    cloud_run_configuration,
    container_environment,
    load_hcl,
    load_yaml,
    only,
    without_client_config,
)

Build = Callable[[str], list[dict[str, Any]]]


def normalized(expression: str) -> str:
    return re.sub(r"\s+", "", expression)


def test_the_shared_settings_meet_the_contract() -> None:
    assert_webhook_contract(load_yaml(SHARED_WEBHOOK))


def test_the_shared_settings_are_the_kustomize_base_of_the_knative_variant() -> None:
    # A directory base inside infra/: no --load-restrictor needed.
    assert load_yaml(INFRA / "webhook" / "kustomization.yaml")["resources"] == [
        "mutatingwebhookconfiguration.yaml"
    ]
    for variant in ("knative",):
        assert "../webhook" in load_yaml(INFRA / variant / "kustomization.yaml")["resources"]


def test_knative_differs_from_the_shared_settings_only_in_client_config(kustomize: Build) -> None:
    configuration = only(kustomize("knative"), "MutatingWebhookConfiguration")
    assert without_client_config(configuration) == without_client_config(load_yaml(SHARED_WEBHOOK))
    assert "annotations" not in configuration["metadata"]
    assert_webhook_contract(configuration)


def test_knative_calls_the_service_url_with_the_token_the_service_expects(
    kustomize: Build,
) -> None:
    objects = kustomize("knative")
    configuration = only(objects, "MutatingWebhookConfiguration")
    knative_service = only(objects, "Service")
    container = knative_service["spec"]["template"]["spec"]["containers"][0]
    env = container_environment(objects, container)

    assert container["image"] == SAMPLE_IMAGE
    assert env["CASTSLICE_PATH_TOKEN"] == SAMPLE_TOKEN
    for webhook in configuration["webhooks"]:
        assert webhook["clientConfig"] == {"url": f"https://{SAMPLE_HOST}/{SAMPLE_TOKEN}"}
        url = urlsplit(webhook["clientConfig"]["url"])
        assert (url.scheme, url.query, url.fragment) == ("https", "", "")
        assert url.path.rstrip("/").rpartition("/")[2] == env["CASTSLICE_PATH_TOKEN"]


def test_terraform_applies_the_shared_file_with_only_the_url_replaced() -> None:
    main = load_hcl(INFRA / "main.tf")
    local = {key: value for block in main["locals"] for key, value in block.items()}

    assert local["webhook_settings"] == (
        "${yamldecode(file(coalesce(var.webhook_configuration_file, "
        '"${path.module}/webhook/mutatingwebhookconfiguration.yaml")))}'
    )
    assert (INFRA / "webhook" / "mutatingwebhookconfiguration.yaml") == SHARED_WEBHOOK
    # Each webhook of the shared file, with clientConfig set to {url} and nothing else;
    # the configuration's name is var.webhook_name (default: the file's, castslice).
    assert normalized(local["webhook_manifest"]) == normalized(
        "${merge(local.webhook_settings, {metadata = merge(local.webhook_settings.metadata, "
        "{name = var.webhook_name}), webhooks = [for webhook in "
        "local.webhook_settings.webhooks : merge(webhook, "
        "{clientConfig = {url = local.webhook_url}})]})}"
    )
    # The service URI, then the token as the last path segment; no caBundle anywhere.
    assert local["webhook_url"] == (
        "${google_cloud_run_v2_service.castslice.uri}/${random_password.path_token.result}"
    )
    manifest = blocks(main, "resource")["kubernetes_manifest"]["webhook"]["manifest"]
    assert manifest == "${local.webhook_manifest}"
    assert "caBundle" not in (INFRA / "main.tf").read_text()


def test_terraform_rendering_keeps_every_contract_setting() -> None:
    # What `merge(webhook, {clientConfig = {url = ...}})` produces from the shared file.
    rendered = cloud_run_configuration()
    assert without_client_config(rendered) == without_client_config(load_yaml(SHARED_WEBHOOK))
    assert_webhook_contract(rendered)
    for webhook in rendered["webhooks"]:
        url = urlsplit(webhook["clientConfig"]["url"])
        assert (url.scheme, url.query, url.fragment) == ("https", "", "")
