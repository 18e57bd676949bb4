"""Check: the address the API server calls answers CastSlice's health check.

A URL is called directly, trusting the configuration's caBundle (or the
system's CAs without one), as the API server would. A Service is reached
through the API server's service proxy, since its address is only routable
inside the cluster.
"""

from __future__ import annotations

import base64
import binascii
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence

from castslice.contract import Manifest
from castslice.contract.cluster import ApiError, Cluster, connection_problem
from castslice.contract.findings import Result, failed, passed, unknown

CHECK = "endpoint"
_TIMEOUT = 10.0
# The health document is tiny; anything longer is not CastSlice.
_MAX_BODY = 64 * 1024


class Unhealthy(Exception):
    """The endpoint did not give the health answer; the message says what it did instead."""


class ProxyForbidden(Exception):
    """Our credentials may not use the API server's service proxy."""


def check_endpoint(cluster: Cluster, live: Manifest | None, webhook_names: Sequence[str]) -> Result:
    client_configs = castslice_client_configs(live, webhook_names)
    if not client_configs:
        return unknown(CHECK, "endpoint not checked: no CastSlice webhook registered to call")
    results = [_check_one(cluster, client_config) for client_config in client_configs]
    return next((result for result in results if not result.ok), results[0])


def castslice_client_configs(live: Manifest | None, webhook_names: Sequence[str]) -> list[Manifest]:
    """The distinct clientConfigs of CastSlice's webhooks (usually one, shared)."""
    found: list[Manifest] = []
    for webhook in (live or {}).get("webhooks") or []:
        client_config = webhook.get("clientConfig") or {}
        if webhook.get("name") in webhook_names and client_config not in found:
            found.append(client_config)
    return found


def display_url(url: str) -> str:
    """`url` without its path: with CASTSLICE_PATH_TOKEN the last segment is a secret."""
    parts = urllib.parse.urlsplit(url)
    hidden = "…" if parts.path.strip("/") else ""
    return f"{parts.scheme}://{parts.netloc}/{hidden}"


def health_version(status: int, body: bytes) -> str:
    """The version in a health answer; Unhealthy when it is not CastSlice's `status: ok`."""
    if status != 200:
        raise Unhealthy(f"it answered HTTP {status}")
    try:
        document = json.loads(body)
    except ValueError:
        raise Unhealthy("its answer is not JSON (is this CastSlice?)") from None
    if not isinstance(document, dict) or document.get("status") != "ok":
        raise Unhealthy("its answer does not say status ok (is this CastSlice?)")
    return str(document.get("version") or "unknown version")


def _check_one(cluster: Cluster, client_config: Manifest) -> Result:
    service = client_config.get("service") or {}
    if service:
        where = f"Service {service.get('namespace')}/{service.get('name')}"
        fix = (
            f"check that the Service has ready endpoints: kubectl -n {service.get('namespace')}"
            f" get endpointslices -l kubernetes.io/service-name={service.get('name')}"
        )
    else:
        where = display_url(str(client_config.get("url", "")))
        fix = "deploy CastSlice there, or point clientConfig.url at it and re-apply"
    started = time.monotonic()
    try:
        if service:
            _trust(client_config, required=True)
            version = _through_proxy(cluster, service)
        else:
            version = _direct(str(client_config.get("url", "")), _trust(client_config))
    except ProxyForbidden:
        return unknown(
            CHECK,
            f"endpoint {where} not checked: these credentials may not use the service proxy",
            f"grant get on services/proxy in namespace {service.get('namespace')}",
        )
    except Unhealthy as error:
        return failed(
            CHECK,
            f"endpoint {where} fails its health check: {error}; "
            "the API server admits opted-in Pods unchanged",
            fix,
        )
    milliseconds = round((time.monotonic() - started) * 1000)
    return passed(
        CHECK, f"endpoint {where} answers its health check (castslice {version}, {milliseconds} ms)"
    )


def _trust(client_config: Manifest, *, required: bool = False) -> ssl.SSLContext:
    """A TLS context trusting the caBundle, or the system's CAs when there is none."""
    bundle = client_config.get("caBundle")
    if not bundle:
        if required:
            raise Unhealthy(
                "caBundle is empty, so the API server cannot trust the webhook's certificate "
                "(cert-manager's CA injector fills it from the cert-manager.io/inject-ca-from "
                "annotation)"
            )
        return ssl.create_default_context()
    try:
        pem = base64.b64decode(bundle, validate=True).decode("ascii")
        return ssl.create_default_context(cadata=pem)
    except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError):
        raise Unhealthy("caBundle is not a base64 PEM certificate") from None


def _direct(url: str, context: ssl.SSLContext) -> str:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT, context=context) as response:
            return health_version(response.status, response.read(_MAX_BODY))
    except urllib.error.HTTPError as error:
        return health_version(error.code, b"")
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise Unhealthy(f"cannot connect: {connection_problem(reason)}") from None


def _through_proxy(cluster: Cluster, service: Manifest) -> str:
    path = str(service.get("path") or "/")
    proxy = (
        f"/api/v1/namespaces/{service.get('namespace')}/services/"
        f"https:{service.get('name')}:{service.get('port') or 443}/proxy{path}"
    )
    try:
        body = cluster.request("GET", proxy)
    except ApiError as error:
        if error.status == 403:
            raise ProxyForbidden() from None
        raise Unhealthy(
            f"the API server's service proxy answered {error.status}: {error.message}"
        ) from None
    return health_version(200, body)
