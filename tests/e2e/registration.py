"""Registering CastSlice with the API server from the project's one webhook configuration.

The settings come from infra/webhook/mutatingwebhookconfiguration.yaml as
shipped; only `clientConfig` is replaced, exactly as every deployment does.
"""

from __future__ import annotations

import base64
import copy
import uuid
from functools import cache
from typing import Any

import kubernetes.client
import yaml

from ..procs import wait_until
from .castslice_server import CastSliceServer
from .pods import GPU, SHARED, container, create_pod, opted_in, pod, resources_of
from .tools import REPO_ROOT

CONFIGURATION_FILE = REPO_ROOT / "infra" / "webhook" / "mutatingwebhookconfiguration.yaml"
# The API server watches webhook configurations; a change is live within moments.
_PROPAGATION_TIMEOUT = 30.0


@cache
def shipped_configuration() -> dict[str, Any]:
    with open(CONFIGURATION_FILE) as stream:
        return yaml.safe_load(stream)


def webhook_settings() -> dict[str, Any]:
    """The one webhook entry of the shipped configuration (timeoutSeconds, selectors...)."""
    return copy.deepcopy(shipped_configuration()["webhooks"][0])


def configuration_for(url: str, ca_pem: bytes) -> dict[str, Any]:
    """The shipped configuration with `clientConfig` pointing at `url`, trusting `ca_pem`."""
    document = copy.deepcopy(shipped_configuration())
    document["webhooks"][0]["clientConfig"] = {
        "url": url,
        "caBundle": base64.b64encode(ca_pem).decode("ascii"),
    }
    return document


def register(api: kubernetes.client.ApiClient, url: str, ca_pem: bytes) -> None:
    """Create the configuration, or replace the one already there, pointing at `url`."""
    admission = kubernetes.client.AdmissionregistrationV1Api(api)
    document = configuration_for(url, ca_pem)
    name = document["metadata"]["name"]
    try:
        current = admission.read_mutating_webhook_configuration(name)
    except kubernetes.client.ApiException as error:
        if error.status != 404:
            raise
        admission.create_mutating_webhook_configuration(document)
        return
    document["metadata"]["resourceVersion"] = current.metadata.resource_version
    admission.replace_mutating_webhook_configuration(name, document)


def deregister(api: kubernetes.client.ApiClient) -> None:
    admission = kubernetes.client.AdmissionregistrationV1Api(api)
    try:
        admission.delete_mutating_webhook_configuration(shipped_configuration()["metadata"]["name"])
    except kubernetes.client.ApiException as error:
        if error.status != 404:
            raise


def probe_is_mutated(api: kubernetes.client.ApiClient, name: str, namespace: str) -> bool:
    """Dry-run create an opted-in GPU Pod and tell whether it comes back rewritten."""
    probe = pod(
        name, [container("probe", limits={GPU: "1"})], annotations=opted_in(workload_type="dev")
    )
    answered, _ = create_pod(api, namespace, probe, dry_run=True)
    return SHARED in resources_of(answered)["probe"].get("limits", {})


def register_and_wait(
    api: kubernetes.client.ApiClient,
    server: CastSliceServer,
    path: str = "",
    namespace: str = "default",
) -> None:
    """Register `server` and return once the API server demonstrably calls it.

    Proof: a dry-run probe Pod comes back rewritten and `server`'s own log names
    it, so the previous registration (another server, another path) is gone.
    """
    register(api, server.url(path), server.ca_pem)
    wait_until(
        lambda: serves_pods(api, server, namespace),
        timeout=_PROPAGATION_TIMEOUT,
        what=f"the API server to call {server.url()}",
    )


def serves_pods(
    api: kubernetes.client.ApiClient, server: CastSliceServer, namespace: str = "default"
) -> bool:
    """Whether an opted-in Pod created now in `namespace` is rewritten by `server`."""
    name = f"probe-{uuid.uuid4().hex[:10]}"
    return probe_is_mutated(api, name, namespace) and bool(server.reviews_of(namespace, name))


def deregister_and_wait(api: kubernetes.client.ApiClient, namespace: str = "default") -> None:
    """Delete the registration and return once Pods are no longer rewritten.

    Call it while a CastSlice server is still up, or the probe proves nothing.
    """
    deregister(api)
    wait_until(
        lambda: not probe_is_mutated(api, f"probe-{uuid.uuid4().hex[:10]}", namespace),
        timeout=_PROPAGATION_TIMEOUT,
        what="the API server to stop calling the webhook",
    )
