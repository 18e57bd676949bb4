"""Server-side dry run, and the warnings a user sees in kubectl."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import kubernetes.client
import pytest

from .castslice_server import CastSliceServer
from .cluster import LocalControlPlane
from .pods import (
    SLICE_RATIO,
    WORKLOAD_TYPE,
    create_pod,
    gpu_container,
    list_pods,
    opted_in,
    pod,
    pod_exists,
    read_pod,
    resources_of,
    shared,
)


def test_dry_run_returns_the_rewritten_pod_and_stores_nothing(
    api: kubernetes.client.ApiClient, namespace: str, castslice: CastSliceServer
) -> None:
    manifest = pod("preview", [gpu_container()], annotations=opted_in(workload_type="training"))

    answered, _ = create_pod(api, namespace, manifest, dry_run=True)

    assert resources_of(answered) == {"app": shared(4, cpu="100m")}
    assert not pod_exists(api, namespace, "preview")
    assert list_pods(api, namespace, "") == []
    [review] = castslice.reviews_of(namespace, "preview")
    assert review["dryRun"] is True


def kubectl_create(kubectl: Path, plane: LocalControlPlane, manifest: dict) -> tuple[dict, str]:
    """`kubectl create -f -` as a user runs it: the created object and what went to stderr."""
    done = subprocess.run(
        [str(kubectl), "--kubeconfig", str(plane.kubeconfig), "create", "-f", "-", "-o", "json"],
        input=json.dumps(manifest),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


@pytest.mark.parametrize(
    ("annotations", "slices", "named", "value", "used"),
    [
        pytest.param(
            {SLICE_RATIO: "abc", WORKLOAD_TYPE: "inference"},
            2,
            SLICE_RATIO,
            "abc",
            "2 slices",
            id="bad-ratio-falls-back-to-type",
        ),
        pytest.param(
            {SLICE_RATIO: "0"},
            1,
            SLICE_RATIO,
            "0",
            "1 slice",
            id="zero-ratio-falls-back-to-default",
        ),
        pytest.param(
            {WORKLOAD_TYPE: "Training"},
            1,
            WORKLOAD_TYPE,
            "Training",
            "1 slice",
            id="unknown-type-falls-back-to-default",
        ),
    ],
)
def test_invalid_annotation_falls_back_and_kubectl_shows_the_warning(
    kubectl: Path,
    control_plane: LocalControlPlane,
    api: kubernetes.client.ApiClient,
    namespace: str,
    annotations: dict[str, str],
    slices: int,
    named: str,
    value: str,
    used: str,
) -> None:
    manifest = pod("fallback", [gpu_container()], annotations=opted_in() | annotations)
    manifest["metadata"]["namespace"] = namespace

    created, stderr = kubectl_create(kubectl, control_plane, manifest)

    # The contract fixes what a warning tells, not its wording: the annotation,
    # its bad value (quoted) and the slice count used instead.
    [warning] = [line for line in stderr.splitlines() if line.startswith("Warning: ")]
    assert named in warning, warning
    assert f'"{value}"' in warning, warning
    assert re.search(rf"\b{used}\b", warning), warning
    assert resources_of(created) == {"app": shared(slices, cpu="100m")}
    assert resources_of(read_pod(api, namespace, "fallback")) == {"app": shared(slices, cpu="100m")}
