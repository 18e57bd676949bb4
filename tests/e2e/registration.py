"""Registering CastSlice with the API server, as `castslice webhook` generates it.

The configuration is castslice.render.webhook_configuration's output for the server's own
settings (its policy included), with the server's URL and CA: the generator
that also wrote infra/webhook/mutatingwebhookconfiguration.yaml.
"""

from __future__ import annotations

import uuid
from typing import Any

import kubernetes.client

from castslice.environment import load_config
from castslice.render.webhook_configuration import DEFAULT_NAME, POD_WEBHOOK, webhook_configuration
from castslice.settings.config import Config

from ..procs import wait_until
from .castslice_server import CastSliceServer
from .pods import GPU, container, create_pod, opted_in, pod

# The decision record every rewritten Pod carries, whatever the backend.
APPLIED = "castslice.castops.io/applied"
# The API server watches webhook configurations; a change is live within moments.
_PROPAGATION_TIMEOUT = 30.0


def webhook_settings(config: Config | None = None) -> dict[str, Any]:
    """The Pod webhook of the generated configuration (timeoutSeconds, selectors...)."""
    document = configuration_for("https://castslice.invalid/", b"", config)
    return next(hook for hook in document["webhooks"] if hook["name"] == POD_WEBHOOK)


def configuration_for(url: str, ca_pem: bytes, config: Config | None = None) -> dict[str, Any]:
    """The generated configuration for `config` (the defaults without one): both webhooks
    call `url` and trust `ca_pem`."""
    settings = config if config is not None else load_config({})
    return webhook_configuration(settings, url=url, ca_bundle=ca_pem or None)


def config_of(server: CastSliceServer) -> Config:
    """The configuration `server` runs with, from the same CASTSLICE_* settings."""
    return load_config(server.settings)


def register(
    api: kubernetes.client.ApiClient, url: str, ca_pem: bytes, config: Config | None = None
) -> None:
    """Create the configuration for `config`, or replace the one already there, calling `url`."""
    admission = kubernetes.client.AdmissionregistrationV1Api(api)
    document = configuration_for(url, ca_pem, config)
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
        admission.delete_mutating_webhook_configuration(DEFAULT_NAME)
    except kubernetes.client.ApiException as error:
        if error.status != 404:
            raise


def probe_is_mutated(api: kubernetes.client.ApiClient, name: str, namespace: str) -> bool:
    """Dry-run create an opted-in GPU Pod and tell whether it comes back rewritten."""
    probe = pod(
        name, [container("probe", limits={GPU: "1"})], annotations=opted_in(workload_type="dev")
    )
    answered, _ = create_pod(api, namespace, probe, dry_run=True)
    # Every backend's rewrite carries the decision record; the resources differ per backend.
    return APPLIED in answered["metadata"].get("annotations", {})


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
    register(api, server.url(path), server.ca_pem, config_of(server))
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
    try:
        mutated = probe_is_mutated(api, name, namespace)
    except kubernetes.client.ApiException as error:
        # A previous registration with failurePolicy Fail, still in the API server's cache,
        # refuses the probe: not switched over yet.
        if "failed calling webhook" in str(error.body):
            return False
        raise
    return mutated and bool(server.reviews_of(namespace, name))


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
