"""Policy mode and the webhook are the same contract: the API server stores the same Pods.

For every backend (and one run with an enrolment policy over two namespaces),
each Pod shape (hand-picked ones, Hypothesis-generated ones and one crowded
Pod) and a workload of every kind wrapping those Pods are created with a
server-side dry run twice: once with the webhook registered, once with
`castslice policy`'s admission policies applied instead. The answers must agree
field by field, warnings included. Three rules of the API server itself apply
to the policy's warnings, and nothing else may differ: it puts a fixed prefix
before each; it sends at most 4096 characters of warnings per response, so a
Pod with very many warnings gets fewer of them in policy mode; and validating
policies run after its own validation of the Pod, so a Pod it rejects as
invalid gets the rejection without CastSlice's warnings.

The policies run here with `failurePolicy: Fail`, so a CEL error or an exceeded
cost limit rejects the Pod and shows as a difference, instead of passing
silently as it would with the shipped `Ignore`.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import kubernetes.client
import pytest

from castslice.contract.definitions import APPLIED
from castslice.environment import load_config
from castslice.render.admission_policies import WARNING_PREFIX, render_yaml
from castslice.render.admission_policies.policies import WARNING_SLOTS
from castslice.render.admission_policies.policies import WORKLOAD_WARNING_PREFIX as WORKLOAD_PREFIX
from castslice.settings.config import Config
from tests.policy_shapes import (
    BACKENDS,
    crowd_for,
    crowded,
    generated,
    gpu,
    hand_picked,
    workload,
    workloads,
)

from ..procs import wait_until
from .castslice_server import StartServer
from .cluster import LocalControlPlane
from .kubectl import Kubectl
from .pods import Manifest, create_namespace, pod
from .registration import deregister_and_wait, register_and_wait
from .tools import REPO_ROOT

# MutatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1) from Kubernetes 1.36.
pytestmark = pytest.mark.kubernetes("1.36")

GENERATED_SHAPES = 40
# Workloads wrap the hand-picked Pods and this many generated ones, kinds in turn.
GENERATED_WORKLOADS = 12
_PARALLEL_CREATES = 8
_PLURALS = {
    "Pod": "pods",
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "ReplicaSet": "replicasets",
    "Job": "jobs",
    "CronJob": "cronjobs",
}
_PROPAGATION_TIMEOUT = 30.0


@dataclass(frozen=True)
class Answer:
    """What the API server answered a dry-run create: the status, the object or error, warnings."""

    status: int
    body: Any
    warnings: tuple[str, ...]


def dry_run_create(api: kubernetes.client.ApiClient, namespace: str, manifest: Manifest) -> Answer:
    """POST `manifest` (a Pod or a workload) with `dryRun=All`: the answer as it came back."""
    group_version = manifest["apiVersion"]
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    path = f"{prefix}/namespaces/{namespace}/{_PLURALS[manifest['kind']]}?dryRun=All"
    response = api.call_api(
        "POST",
        api.configuration.host + path,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=manifest,
    )
    body = json.loads(response.read())
    warnings = _warnings(response.headers.getlist("Warning"))
    if response.status == 201:
        body = _comparable(body)
    return Answer(response.status, body, warnings)


def answers(
    api: kubernetes.client.ApiClient, shapes: list[tuple[str, Manifest]]
) -> dict[str, Answer]:
    """Dry-run create every (namespace, Pod), a few at a time."""
    with ThreadPoolExecutor(_PARALLEL_CREATES) as pool:
        found = pool.map(lambda shape: dry_run_create(api, *shape), shapes)
        return {
            manifest["metadata"]["name"]: answer
            for (_, manifest), answer in zip(shapes, found, strict=True)
        }


def _comparable(stored: Manifest) -> Manifest:
    """The object without what differs on every create: its uid (a Job also puts it in
    labels and its selector) and timestamps."""
    metadata = stored["metadata"]
    metadata.pop("creationTimestamp", None)
    for entry in metadata.get("managedFields", []):
        entry.pop("time", None)
    uid = metadata.pop("uid", None)
    text = json.dumps(stored)
    return json.loads(text.replace(uid, "<uid>") if uid else text)


def _warnings(headers: list[str]) -> tuple[str, ...]:
    # `299 - "text"`, the text escaped as an HTTP quoted string.
    texts = []
    for header in headers:
        code, _, rest = header.partition(" ")
        _, _, quoted = rest.partition(" ")
        assert code == "299", header
        texts.append(quoted[1:-1].replace('\\"', '"').replace("\\\\", "\\"))
    return tuple(texts)


# k8s.io/apiserver/pkg/endpoints/filters/warning.go: the budget of one response's warnings.
_TRUNCATE_AT_TOTAL_RUNES = 4 * 1024
_TRUNCATE_ITEM_RUNES = 256


def delivered(texts: tuple[str, ...]) -> tuple[str, ...]:
    """The warnings a response carries when admission adds `texts` in order.

    The API server's recorder drops duplicates; past 4096 characters in all it
    cuts every warning to 256 characters and adds no more once that budget is spent.
    """
    ordered: list[str] = []
    sent: list[str] = []
    written, truncating = 0, False
    for text in texts:
        if not text or (truncating and written >= _TRUNCATE_AT_TOTAL_RUNES) or text in ordered:
            continue
        ordered.append(text)
        if truncating:
            text = text[:_TRUNCATE_ITEM_RUNES]
        if written + len(text) <= _TRUNCATE_AT_TOTAL_RUNES or truncating:
            written += len(text)
            sent.append(text)
            continue
        truncating, written = True, 0
        sent = [item[:_TRUNCATE_ITEM_RUNES] for item in ordered]
        written = sum(len(item) for item in sent)
    return tuple(sent)


def as_policy_gives(webhook: Answer, prefix: str = WARNING_PREFIX) -> Answer:
    """The webhook's answer as policy mode must give it: the same object or error,
    the same warnings behind the API server's prefix, within its budget, unless
    the API server's own validation rejected the Pod before any policy ran."""
    rejected_as_invalid = webhook.status == 422 and webhook.body.get("reason") == "Invalid"
    texts = () if rejected_as_invalid else webhook.warnings
    warnings = delivered(tuple(prefix + text for text in texts))
    return Answer(webhook.status, webhook.body, warnings)


def difference(
    name: str, webhook: Answer, policy: Answer, prefix: str = WARNING_PREFIX
) -> str | None:
    expected = as_policy_gives(webhook, prefix)
    if expected == policy:
        return None
    left = json.dumps(expected.__dict__, indent=1, sort_keys=True, ensure_ascii=False)
    right = json.dumps(policy.__dict__, indent=1, sort_keys=True, ensure_ascii=False)
    diff = difflib.unified_diff(
        left.splitlines(), right.splitlines(), "webhook", "policy", lineterm="", n=2
    )
    return f"{name}:\n" + "\n".join(diff)


def policy_yaml(env: dict[str, str]) -> str:
    """`castslice policy` as a user runs it, with only these CASTSLICE_* settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CASTSLICE_")}
    done = subprocess.run(
        [sys.executable, "-m", "castslice", "policy"],
        env={**clean, **env},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def _probe(api: kubernetes.client.ApiClient, namespace: str) -> Answer:
    manifest = pod(
        f"probe-{uuid.uuid4().hex[:10]}",
        [gpu("probe")],
        annotations={"castops.io/optimize": "true", "castops.io/slice-ratio": "x"},
    )
    return dry_run_create(api, namespace, manifest)


def _workload_probe(api: kubernetes.client.ApiClient, namespace: str) -> Answer:
    manifest = workload(
        ("apps/v1", "Deployment"),
        pod(f"probe-{uuid.uuid4().hex[:10]}", [gpu("probe")]),
        {"castops.io/optimize": "true"},
    )
    return dry_run_create(api, namespace, manifest)


def _policy_active(api: kubernetes.client.ApiClient, namespace: str) -> bool:
    answer = _probe(api, namespace)
    annotations = answer.body.get("metadata", {}).get("annotations", {})
    workload_warnings = _workload_probe(api, namespace).warnings
    return (
        APPLIED in annotations
        and any(w.startswith(WARNING_PREFIX) for w in answer.warnings)
        and any(w.startswith(WORKLOAD_PREFIX) for w in workload_warnings)
    )


def _nothing_active(api: kubernetes.client.ApiClient, namespace: str) -> bool:
    answer = _probe(api, namespace)
    annotations = answer.body.get("metadata", {}).get("annotations", {})
    return (
        APPLIED not in annotations
        and not answer.warnings
        and not _workload_probe(api, namespace).warnings
    )


@contextmanager
def policies_applied(
    api: kubernetes.client.ApiClient, kubectl: Kubectl, manifests: str, namespace: str
) -> Iterator[None]:
    """Apply the policies, wait until both act on Pods, and take them away again after."""
    kubectl.run("apply", "-f", "-", stdin=manifests)
    try:
        wait_until(
            lambda: _policy_active(api, namespace),
            timeout=_PROPAGATION_TIMEOUT,
            what="the admission policies to act on Pods",
        )
        yield
    finally:
        kubectl.run("delete", "-f", "-", stdin=manifests)
        wait_until(
            lambda: _nothing_active(api, namespace),
            timeout=_PROPAGATION_TIMEOUT,
            what="the admission policies to stop acting on Pods",
        )


@pytest.fixture(scope="module")
def kubectl_admin(kubectl: Any, control_plane: LocalControlPlane) -> Kubectl:
    return Kubectl(kubectl, control_plane.kubeconfig)


def corpus(config: Config) -> list[Manifest]:
    return [
        *hand_picked(config),
        *generated(config, GENERATED_SHAPES),
        crowded(crowd_for(config)),
    ]


def placed(shapes: list[Manifest], namespaces: list[str]) -> list[tuple[str, Manifest]]:
    """Each shape with the namespace it is created in, taking turns."""
    return [(namespaces[index % len(namespaces)], shape) for index, shape in enumerate(shapes)]


@pytest.fixture
def prod_namespace(api: kubernetes.client.ApiClient) -> Iterator[str]:
    """A second namespace, one the enrolment policy excludes by its `*-prod` glob."""
    name = create_namespace(api, f"pm-{uuid.uuid4().hex[:8]}-prod")
    yield name
    kubernetes.client.CoreV1Api(api).delete_namespace(name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_policy_mode_stores_the_same_pods_with_the_same_warnings(
    api: kubernetes.client.ApiClient,
    own_castslice: StartServer,
    namespace: str,
    prod_namespace: str,
    kubectl_admin: Kubectl,
    backend: str,
) -> None:
    env = BACKENDS[backend]
    config = load_config(env)
    namespaces = [namespace, prod_namespace] if config.policy else [namespace]
    shapes = placed(corpus(config), namespaces)
    shipped = policy_yaml(env)
    # The shipped rendering (failurePolicy Ignore) as a user applies it.
    assert shipped == render_yaml(config)
    kubectl_admin.run("apply", "--dry-run=server", "-f", "-", stdin=shipped)

    workload_shapes = placed(
        workloads([*hand_picked(config), *generated(config, GENERATED_WORKLOADS)]), namespaces
    )

    register_and_wait(api, own_castslice(env), namespace=namespace)
    by_webhook = answers(api, shapes)
    workloads_by_webhook = answers(api, workload_shapes)
    deregister_and_wait(api, namespace)
    with policies_applied(api, kubectl_admin, render_yaml(config, "Fail"), namespace):
        by_policy = answers(api, shapes)
        workloads_by_policy = answers(api, workload_shapes)

    differences = [
        found
        for name in by_webhook
        if (found := difference(name, by_webhook[name], by_policy[name]))
    ]
    differences += [
        found
        for name in workloads_by_webhook
        if (
            found := difference(
                name, workloads_by_webhook[name], workloads_by_policy[name], WORKLOAD_PREFIX
            )
        )
    ]
    compared = len(shapes) + len(workload_shapes)
    assert not differences, f"{len(differences)} of {compared} shapes differ:\n" + "\n".join(
        differences
    )
    # The corpus reached every outcome, so agreeing means something.
    stored = [a for a in by_webhook.values() if a.status == 201]
    mutated = [a for a in stored if APPLIED in a.body["metadata"].get("annotations", {})]
    assert len(mutated) >= len(stored) // 3
    assert any(a.warnings for a in stored if a not in mutated)
    assert any(a.status != 201 for a in by_webhook.values())
    assert sum(bool(a.warnings) for a in workloads_by_webhook.values()) > len(workload_shapes) // 2
    # The crowded Pod meets the API server's warning budget, the policy's sooner.
    crowded_webhook, crowded_policy = by_webhook["crowded"], by_policy["crowded"]
    assert crowded_webhook.status == 201
    assert 0 < len(crowded_policy.warnings) < len(crowded_webhook.warnings) < WARNING_SLOTS
