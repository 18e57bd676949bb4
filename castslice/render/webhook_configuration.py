"""CastSlice's MutatingWebhookConfiguration, generated from the configuration and its policy.

Two webhooks, one endpoint: `pods.castslice.castops.io` rewrites Pods, and
`workloads.castslice.castops.io` only warns about annotated workloads. Which
requests reach the function at all (rules, namespaces, matchConditions) is
castslice.render.selection; this module puts the client, the safety settings and the
recorded policy around it. Every shipped configuration and `castslice webhook`
are this module's output.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Sequence
from urllib.parse import urlsplit

from castslice.contract import Manifest
from castslice.contract.definitions import DEFAULT_NAMESPACE, POLICY_ANNOTATION
from castslice.render.selection import (
    RegistrationError,
    namespace_selector,
    pod_match_conditions,
    pod_rules,
    workload_kinds,
    workload_match_conditions,
    workload_rules,
)
from castslice.render.yaml_text import dump_yaml
from castslice.settings.config import Config
from castslice.settings.names import (
    MIN_PATH_TOKEN_LENGTH,
    is_dns_label,
    is_dns_subdomain,
    is_path_token,
)

POD_WEBHOOK = "pods.castslice.castops.io"
WORKLOAD_WEBHOOK = "workloads.castslice.castops.io"
DEFAULT_NAME = "castslice"

__all__ = ["DEFAULT_NAME", "POD_WEBHOOK", "WORKLOAD_WEBHOOK", "RegistrationError"]


def webhook_configuration(
    config: Config,
    *,
    url: str | None = None,
    service: tuple[str, str, str] | None = None,
    token: str | None = None,
    name: str = DEFAULT_NAME,
    ca_bundle: bytes | None = None,
    own_namespace: str = DEFAULT_NAMESPACE,
) -> Manifest:
    """The MutatingWebhookConfiguration for `config`, calling `url` or `service`
    (namespace, name, path), with `token` as the last path segment."""
    if not is_dns_subdomain(name):
        raise RegistrationError(f"the name {name!r} is not a valid Kubernetes object name")
    if not is_dns_label(own_namespace):
        raise RegistrationError(f"the namespace {own_namespace!r} is not a valid namespace name")
    client = client_config(url=url, service=service, token=token, ca_bundle=ca_bundle)
    namespaces = namespace_selector(own_namespace)
    # Each webhook gets its own copies: a consumer editing one must not change the other.
    metadata: Manifest = {"name": name, "labels": {"app.kubernetes.io/name": "castslice"}}
    if config.policy is not None and config.policy.document:
        metadata["annotations"] = {POLICY_ANNOTATION: config.policy.document}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": [
            pod_webhook(config, copy.deepcopy(client), copy.deepcopy(namespaces)),
            workload_webhook(client, namespaces),
        ],
    }


def pod_webhook(config: Config, client: Manifest, namespaces: Manifest) -> Manifest:
    return {
        "name": POD_WEBHOOK,
        **_common_settings(client),
        "rules": pod_rules(),
        "namespaceSelector": namespaces,
        "matchConditions": pod_match_conditions(config),
    }


def workload_webhook(client: Manifest, namespaces: Manifest) -> Manifest:
    """The workload webhook: Kubernetes' workload kinds, and the operators' resources."""
    kinds = workload_kinds(custom_resources=True)
    return {
        "name": WORKLOAD_WEBHOOK,
        **_common_settings(client),
        "rules": workload_rules(kinds),
        "namespaceSelector": namespaces,
        "matchConditions": workload_match_conditions(kinds),
    }


def _common_settings(client: Manifest) -> Manifest:
    return {
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        # CastSlice never blocks: if it cannot answer, the request goes on unchanged.
        "failurePolicy": "Ignore",
        "matchPolicy": "Equivalent",
        "reinvocationPolicy": "Never",
        "timeoutSeconds": 5,
        "clientConfig": client,
    }


def client_config(
    *,
    url: str | None = None,
    service: tuple[str, str, str] | None = None,
    token: str | None = None,
    ca_bundle: bytes | None = None,
) -> Manifest:
    """`clientConfig`: a URL or a Service, the path token appended, the CA if one is given."""
    if (url is None) == (service is None):
        raise RegistrationError("give either a URL or a Service, not both or neither")
    if token is not None and not is_path_token(token):
        raise RegistrationError(
            f"the path token must be at least {MIN_PATH_TOKEN_LENGTH} characters from "
            "A-Z a-z 0-9 . _ ~ -"
        )
    client: Manifest
    if url is not None:
        client = {"url": _with_token(_checked_url(url), token)}
    else:
        assert service is not None
        namespace, service_name, path = service
        if not is_dns_label(namespace) or not is_dns_label(service_name):
            raise RegistrationError(
                f"the Service {namespace}/{service_name} is not a valid namespace/name"
            )
        if not path.startswith("/"):
            raise RegistrationError(f"the Service path {path!r} must start with '/'")
        client = {
            "service": {
                "namespace": namespace,
                "name": service_name,
                "path": _with_token(path, token),
                "port": 443,
            }
        }
    if ca_bundle is not None:
        client["caBundle"] = base64.b64encode(ca_bundle).decode("ascii")
    return client


def _checked_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is what validates it
    except ValueError as error:
        raise RegistrationError(f"the URL {url!r} is not valid: {error}") from None
    if parts.scheme != "https" or not parts.hostname:
        raise RegistrationError(f"the URL {url!r} must be https://HOST[/PATH]")
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise RegistrationError(f"the URL {url!r} must have no query and no fragment")
    if parts.username or parts.password:
        raise RegistrationError(f"the URL {url!r} must not carry a user or password")
    return url


def _with_token(path_or_url: str, token: str | None) -> str:
    if token is None:
        return path_or_url
    return path_or_url.rstrip("/") + "/" + token


# Rendering -----------------------------------------------------------------------------


def to_yaml(document: Manifest, header: Sequence[str] = ()) -> str:
    """`document` as YAML, multi-line expressions as literal blocks, after `header` comments."""
    comments = "".join(f"# {line}\n" if line else "#\n" for line in header)
    return comments + dump_yaml(document)
