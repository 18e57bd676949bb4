"""Pods made by controllers: the annotations count on the pod template only."""

from __future__ import annotations

from typing import Any

import kubernetes.client

from ..procs import wait_until
from .castslice_server import CastSliceServer
from .pods import GPU, Manifest, gpu_container, list_pods, opted_in, resources_of, shared

REPLICAS = 2


def deployment(
    name: str,
    *,
    top_level_annotations: dict[str, str] | None = None,
    template_annotations: dict[str, str] | None = None,
) -> Manifest:
    # The template keeps the default token automount: these Pods look like real ones.
    template: dict[str, Any] = {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [gpu_container()]},
    }
    if template_annotations is not None:
        template["metadata"]["annotations"] = template_annotations
    metadata: dict[str, Any] = {"name": name}
    if top_level_annotations is not None:
        metadata["annotations"] = top_level_annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        },
    }


def deploy_and_wait_for_pods(
    api: kubernetes.client.ApiClient, namespace: str, manifest: Manifest
) -> list[Manifest]:
    kubernetes.client.AppsV1Api(api).create_namespaced_deployment(namespace, manifest)
    selector = f"app={manifest['metadata']['name']}"
    pods = wait_until(
        lambda: (found := list_pods(api, namespace, selector)) and len(found) == REPLICAS and found,
        timeout=60,
        what=f"the ReplicaSet controller to create {REPLICAS} Pods",
    )
    for stored in pods:
        [owner] = stored["metadata"]["ownerReferences"]
        assert owner["kind"] == "ReplicaSet", "the Pods must come from the ReplicaSet controller"
    return pods


def test_pods_of_annotated_template_are_rewritten(
    api: kubernetes.client.ApiClient, namespace: str, castslice: CastSliceServer
) -> None:
    manifest = deployment("trainer", template_annotations=opted_in(workload_type="training"))

    pods = deploy_and_wait_for_pods(api, namespace, manifest)

    for stored in pods:
        assert resources_of(stored) == {"app": shared(4, cpu="100m")}
    # Controller-made Pods have no name yet at admission: the log names their generateName.
    generate_name = pods[0]["metadata"]["generateName"]
    reviews = castslice.reviews_of(namespace, generate_name)
    assert [(r["decision"], r["slices"]) for r in reviews] == [("mutated", 4)] * REPLICAS


def test_pods_of_deployment_annotated_only_on_top_level_are_not(
    api: kubernetes.client.ApiClient, namespace: str, castslice: CastSliceServer
) -> None:
    manifest = deployment("not-template", top_level_annotations=opted_in(workload_type="training"))

    pods = deploy_and_wait_for_pods(api, namespace, manifest)

    for stored in pods:
        assert resources_of(stored) == {
            "app": {"requests": {"cpu": "100m", GPU: "1"}, "limits": {GPU: "1"}}
        }
        assert "castops.io/optimize" not in stored["metadata"].get("annotations", {})
    assert castslice.reviews_of(namespace, pods[0]["metadata"]["generateName"]) == []
