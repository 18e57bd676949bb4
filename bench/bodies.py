"""The AdmissionReview bodies the benchmark sends, built deterministically.

Each is a v1 CREATE review of a Pod as the API server sends it: defaulted
fields, a projected service-account volume, managedFields. Three shapes:

- typical: an opted-in Pod with one GPU container and one init container (~3 KB);
- not-opted-in: the same Pod without the opt-in annotation;
- large: an opted-in Pod with twelve GPU containers and long env lists (~250 KB),
  the size real data-science Pods reach.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu-shared"
POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}
POD_RESOURCE = {"group": "", "version": "v1", "resource": "pods"}
UID = "0f6f3a52-0c41-4c7e-9a51-6d1f5b0c2e11"

# Name -> what a correct answer carries: the number of patch operations.
# The typical Pod's GPU container has a request and a limit (remove+add each); a
# mutated Pod also gets its decision record annotation (one add).
EXPECTED_OPERATIONS = {"typical": 5, "not-opted-in": 0, "large": 49}
LARGE_CONTAINERS = 12
# Env entries per large-Pod container; with the value length below this puts
# the body near 250 KB, the size the benchmark is specified for.
LARGE_ENV_ENTRIES = 150
LARGE_ENV_VALUE_LENGTH = 96


def typical_pod(opted_in: bool = True) -> dict[str, Any]:
    annotations = {"castops.io/workload-type": "inference", "team": "vision"}
    if opted_in:
        annotations["castops.io/optimize"] = "true"
    metadata = {
        "generateName": "resnet-serving-7d9f8c6b5-",
        "namespace": "ml-serving",
        "labels": {"app": "resnet-serving", "pod-template-hash": "7d9f8c6b5"},
        "annotations": annotations,
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "resnet-serving-7d9f8c6b5",
                "uid": "b8c0e1d2-5a4f-4c3b-8e7d-1f2a3b4c5d6e",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    init = _container(
        "fetch-model",
        "registry.example/tools/model-fetch:2.4.1",
        env={"MODEL_URI": "gs://models-example/resnet50/v7", "TARGET": "/models/resnet50"},
        resources={"requests": {"cpu": "250m", "memory": "256Mi"}},
    )
    main = _container(
        "server",
        "registry.example/ml/resnet-serving:1.19.0",
        env=_env(4, 32, "SERVING"),
        resources={
            "requests": {"cpu": "2", "memory": "8Gi", GPU: "1"},
            "limits": {"memory": "8Gi", GPU: "1"},
        },
    )
    main["ports"] = [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    return _pod(metadata, [init], [main])


def large_pod() -> dict[str, Any]:
    pod = typical_pod()
    pod["metadata"]["generateName"] = "feature-pipeline-"
    pod["metadata"]["annotations"]["castops.io/workload-type"] = "training"
    pod["spec"]["containers"] = [
        _container(
            f"stage-{index:02d}",
            f"registry.example/ml/pipeline-stage:{index}.0.3",
            env=_env(LARGE_ENV_ENTRIES, LARGE_ENV_VALUE_LENGTH, f"STAGE{index:02d}"),
            resources={
                "requests": {"cpu": "4", "memory": "16Gi", GPU: "1"},
                "limits": {"cpu": "8", "memory": "16Gi", GPU: "1"},
            },
        )
        for index in range(LARGE_CONTAINERS)
    ]
    return pod


def review(pod: dict[str, Any]) -> dict[str, Any]:
    """A v1 CREATE AdmissionReview of `pod`, with the fields the API server fills in."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": POD_KIND,
            "resource": POD_RESOURCE,
            "requestKind": POD_KIND,
            "requestResource": POD_RESOURCE,
            "namespace": pod["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "3c1b7e0a-9d2f-4e6a-b5c8-7f0e1d2c3b4a",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def bodies() -> dict[str, bytes]:
    """Every benchmark body by name, serialized compactly as the API server does."""
    pods = {
        "typical": typical_pod(),
        "not-opted-in": typical_pod(opted_in=False),
        "large": large_pod(),
    }
    return {name: _serialize(review(pod)) for name, pod in pods.items()}


def write_bodies(directory: Path) -> dict[str, Path]:
    """Write every body to `directory` (for the load generator) and return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, body in bodies().items():
        path = directory / f"{name}.json"
        path.write_bytes(body)
        paths[name] = path
    return paths


def _serialize(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _env(count: int, value_length: int, prefix: str) -> list[dict[str, str]]:
    # Values look like connection strings and paths: long, varied, no escapes needed.
    entries = []
    for index in range(count):
        seed = f"{prefix.lower()}-{index:03d}-"
        value = (seed + "s3://datasets-example/features/partition=" * 4)[:value_length]
        entries.append({"name": f"{prefix}_SETTING_{index:03d}", "value": value})
    return entries


def _container(
    name: str, image: str, env: dict[str, str] | list[dict[str, str]], resources: dict
) -> dict[str, Any]:
    if isinstance(env, dict):
        env = [{"name": key, "value": value} for key, value in env.items()]
    return {
        "name": name,
        "image": image,
        "env": env,
        "resources": copy.deepcopy(resources),
        "volumeMounts": [
            {
                "name": "kube-api-access-x7k2p",
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }


def _pod(
    metadata: dict[str, Any], init_containers: list[dict], containers: list[dict]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "volumes": [_service_account_volume()],
            "initContainers": init_containers,
            "containers": containers,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
                _not_ready_toleration("not-ready"),
                _not_ready_toleration("unreachable"),
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {},
    }


def _service_account_volume() -> dict[str, Any]:
    return {
        "name": "kube-api-access-x7k2p",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {
                                    "apiVersion": "v1",
                                    "fieldPath": "metadata.namespace",
                                },
                            }
                        ]
                    }
                },
            ],
            "defaultMode": 420,
        },
    }


def _not_ready_toleration(condition: str) -> dict[str, Any]:
    return {
        "key": f"node.kubernetes.io/{condition}",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
