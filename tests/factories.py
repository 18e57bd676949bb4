"""Builders for Pods and AdmissionReviews, and helpers that apply CastSlice's answers."""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from starlette.testclient import TestClient

from castslice.contract.definitions import TemplateLocation, WorkloadKind
from castslice.decision.slices import MAX_WARNING_LENGTH

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu-shared"
POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}


def opted_in(**extra: str) -> dict[str, str]:
    return {"castops.io/optimize": "true", **extra}


def container(name: str = "main", requests: Any = None, limits: Any = None, **extra: Any) -> dict:
    """A container; `requests`/`limits` of None leave the map out, "null" sets it to null."""
    resources: dict[str, Any] = {}
    for key, value in (("requests", requests), ("limits", limits)):
        if value == "null":
            resources[key] = None
        elif value is not None:
            resources[key] = value
    spec = {"name": name, "image": "registry.example/app:1", **extra}
    if resources:
        spec["resources"] = resources
    return spec


def gpu_container(name: str = "main", count: str = "1", **extra: Any) -> dict:
    return container(name, requests={GPU: count, "cpu": "1"}, limits={GPU: count}, **extra)


def make_pod(
    annotations: dict[str, str] | None = None,
    containers: list[dict] | None = None,
    init_containers: list[dict] | None = None,
    ephemeral_containers: list[dict] | None = None,
    name: str = "trainer",
) -> dict:
    metadata: dict[str, Any] = {"name": name, "namespace": "ml", "labels": {"app": "trainer"}}
    if annotations is not None:
        metadata["annotations"] = annotations
    spec: dict[str, Any] = {
        "containers": containers if containers is not None else [gpu_container()],
        "restartPolicy": "Never",
    }
    if init_containers is not None:
        spec["initContainers"] = init_containers
    if ephemeral_containers is not None:
        spec["ephemeralContainers"] = ephemeral_containers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def make_review(
    pod: dict | None,
    operation: str = "CREATE",
    kind: dict | None = None,
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
    dry_run: bool = False,
    sub_resource: str | None = None,
) -> dict:
    request: dict[str, Any] = {
        "uid": uid,
        "kind": kind or POD_KIND,
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": kind or POD_KIND,
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": operation,
        "namespace": "ml",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": pod,
        "oldObject": None,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def decode_patch(response: dict) -> list[dict]:
    return json.loads(base64.b64decode(response["patch"])) if "patch" in response else []


def apply_response(pod: dict, response: dict) -> dict:
    """The Pod as the API server would persist it after applying the response's patch."""
    if "patch" not in response:
        assert "patchType" not in response
        return copy.deepcopy(pod)
    assert response["patchType"] == "JSONPatch"
    return jsonpatch.JsonPatch(decode_patch(response)).apply(pod)


def with_resources(pod: dict, list_name: str, index: int, **maps: Any) -> dict:
    """A copy of `pod` whose container has exactly the given resource maps."""
    expected = copy.deepcopy(pod)
    expected["spec"][list_name][index]["resources"] = maps
    return expected


APPLIED = "castslice.castops.io/applied"


def applied(
    pod: dict,
    slices: int,
    source: str,
    original: dict[str, str],
    backend: str = "resource",
    instance: str | None = None,
) -> dict:
    """`pod` with the decision record CastSlice writes on every Pod it mutates (`instance`:
    what the Pod really gets, where the backend says it)."""
    record = {"slices": slices, "source": source, "backend": backend, "original": original}
    if instance is not None:
        record["instance"] = instance
    marked = copy.deepcopy(pod)
    annotations = marked["metadata"].setdefault("annotations", {})
    annotations[APPLIED] = json.dumps(record, separators=(",", ":"))
    return marked


# What the API server sends with every review.
JSON_HEADERS = {"Content-Type": "application/json"}


def media_type(answer) -> str:
    """An HTTP answer's Content-Type without its parameters."""
    return answer.headers.get("content-type", "").partition(";")[0]


# A kind with Pod templates in a map and in a list, as operators' kinds have them; tests add
# it to the workload table themselves.
TRAINER = WorkloadKind(
    "example.com",
    ("v1",),
    "Trainer",
    "trainers",
    (
        TemplateLocation("spec.replicaSpecs.*.template"),
        TemplateLocation("spec.groups[name].template.spec.template"),
    ),
)


ROOT = Path(__file__).resolve().parents[1]


def run_castslice(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m castslice ARGS` as a user runs it, with only `env` of CastSlice's settings
    and no kubeconfig of the machine's (HOME is `home`)."""
    return subprocess.run(
        [sys.executable, "-m", "castslice", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), **env},
        timeout=60,
        check=False,
    )


def unreachable_kubeconfig(directory: Path, server: str = "https://127.0.0.1:1") -> Path:
    """A kubeconfig whose one context names `server`, where nothing listens."""
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return kubeconfig


def post(client: TestClient, review: dict, path: str = "/?timeout=5s"):
    return client.post(path, content=json.dumps(review), headers=JSON_HEADERS)


def review_response(client: TestClient, review: dict, path: str = "/?timeout=5s") -> dict:
    answer = post(client, review, path)
    assert answer.status_code == 200
    assert media_type(answer) == "application/json"
    body = answer.json()
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == review["request"]["uid"]
    assert body["response"]["allowed"] is True
    return body["response"]


def log_lines(capsys: pytest.CaptureFixture) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def workload_review(manifest: dict, operation: str = "CREATE") -> dict:
    group, _, version = manifest["apiVersion"].rpartition("/")
    kind = {"group": group, "version": version, "kind": manifest["kind"]}
    return make_review(manifest, operation=operation, kind=kind)


def assert_warned_only(response: dict) -> list[str]:
    """The answer to a workload: allowed, never a patch; its warnings."""
    assert response["allowed"] is True
    assert "patch" not in response
    assert "patchType" not in response
    assert "auditAnnotations" not in response
    warnings = response.get("warnings", [])
    for warning in warnings:
        assert len(warning) <= MAX_WARNING_LENGTH, warning
        assert warning.isprintable(), warning
    return warnings


class Ran:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    @property
    def warnings(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("Warning: ")]
