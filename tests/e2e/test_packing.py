"""Packing on the real scheduler: `castslice plan` from a live cluster's Pods, and the
bin-packing scheduler profile CastSlice ships, run by kube-scheduler itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kubernetes.client
import pytest

from . import tools
from .castslice_server import StartServer
from .cluster import LocalControlPlane
from .nodes import SEED_SHARED, Pool, gpu_nodes
from .pods import container, create_namespace, create_pod, gpu_container, opted_in, pod, settle
from .registration import register_and_wait
from .tools import REPO_ROOT

BIN_PACKING = REPO_ROOT / "infra" / "scheduler" / "bin-packing.yaml"


def plan(kubeconfig: Path, namespace: str, settings: dict[str, str] | None = None) -> dict:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("CASTSLICE_")}
    environ.update(settings or {})
    done = subprocess.run(
        [sys.executable, "-m", "castslice", "plan", "--kubeconfig", str(kubeconfig),
         "-n", namespace, "-o", "json"],
        capture_output=True, text=True, env=environ, cwd=REPO_ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_plan_counts_the_pods_castslice_rewrote_and_those_it_left_alone(
    api: kubernetes.client.ApiClient, control_plane: LocalControlPlane, namespace: str
) -> None:
    # The session's CastSlice (resource, 4 slices per GPU) rewrites the four opted-in Pods
    # to 2 slices each: half a GPU; the trainer keeps its 2 GPUs.
    for index in range(4):
        create_pod(
            api,
            namespace,
            pod(f"half-{index}", [gpu_container()], annotations=opted_in(slice_ratio="2")),
        )
    create_pod(api, namespace, pod("trainer", [gpu_container(gpus="2")]))
    create_pod(api, namespace, pod("web", [container("web")]))
    result = plan(control_plane.kubeconfig, namespace)
    assert (result["tasks"], result["optedIn"]) == (6, 4)
    assert result["today"]["gpus"] == 2 + 2
    assert result["noSharing"]["gpus"] == 4 + 2
    assert result["perfectPacking"] == 4
    assert result["today"]["podsRoundedUp"] == 0


def _create_mix(api: kubernetes.client.ApiClient, namespace: str) -> None:
    """Two inference Pods (half a GPU each), four dev Pods (a quarter each), one Pod with
    slice-ratio 3 (three quarters) and a trainer left alone on 2 GPUs."""
    mix = [(f"infer-{index}", opted_in(workload_type="inference")) for index in range(2)]
    mix += [(f"dev-{index}", opted_in(workload_type="dev")) for index in range(4)]
    mix += [("three-quarters", opted_in(slice_ratio="3")), ("trainer", {})]
    for name, wanted in mix:
        gpus = "2" if name == "trainer" else "1"
        create_pod(api, namespace, pod(name, [gpu_container(gpus=gpus)], annotations=wanted))


def test_what_plan_recommends_from_a_live_cluster_applied_as_printed_gives_its_figure(
    api: kubernetes.client.ApiClient,
    control_plane: LocalControlPlane,
    own_castslice: StartServer,
    namespace: str,
) -> None:
    # Today: nvidia with 4-client pools only. A half or three quarters fits no 4-way share
    # and takes a whole GPU: 2 + 1 (the dev Pods' pool) + 1 + 2 (the trainer).
    today = {"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_SHARING_DEGREES": "4"}
    register_and_wait(api, own_castslice(today))
    _create_mix(api, namespace)
    result = plan(control_plane.kubeconfig, namespace, today)
    assert result["today"]["gpus"] == 2 + 1 + 1 + 2
    assert result["noSharing"]["gpus"] == 7 + 2
    promised = result["recommendation"]
    assert promised["gpus"] < result["today"]["gpus"] and not result["keep"]
    assert promised["settings"]["backend"] == "nvidia"
    assert promised["sliceRatios"] == {}
    # The printed settings, on a CastSlice that runs them, for the same Pods created anew.
    applied = {**today, **promised["environment"]}
    register_and_wait(api, own_castslice(applied))
    again = create_namespace(api, f"{namespace}-applied")
    try:
        _create_mix(api, again)
        assert plan(control_plane.kubeconfig, again, applied)["today"]["gpus"] == promised["gpus"]
    finally:
        kubernetes.client.CoreV1Api(api).delete_namespace(again)


def _placements(api: kubernetes.client.ApiClient, namespace: str, names: list[str]) -> list[str]:
    """Create two Pods of one slice each, one after the other; the node each lands on."""
    nodes = []
    for index in range(2):
        body = pod(
            f"slice-{index}",
            [container("app", requests={"cpu": "1"}, limits={SEED_SHARED: "1"})],
        )
        body["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": names}
                            ]
                        }
                    ]
                }
            }
        }
        create_pod(api, namespace, body)
        up, _ = settle(api, namespace, runs=index + 1, waits=0)
        (stored,) = [item for item in up if item["metadata"]["name"] == f"slice-{index}"]
        nodes.append(stored["spec"]["nodeName"])
    return nodes


def test_the_default_profile_spreads_two_slices_over_two_nodes(
    api: kubernetes.client.ApiClient, namespace: str
) -> None:
    with gpu_nodes(api, "resource", [Pool("shared-4", 4, nodes=2)], namespace) as made:
        first, second = _placements(api, namespace, [node.name for node in made])
    assert first != second


@pytest.mark.parametrize("profile", [BIN_PACKING])
def test_the_bin_packing_profile_puts_the_second_slice_beside_the_first(
    nginx: Path, profile: Path
) -> None:
    binaries = tools.kube_binaries()
    with LocalControlPlane(binaries, scheduler_config=profile) as plane:
        api = plane.api_client()
        namespace = create_namespace(api, "packing")
        with gpu_nodes(api, "resource", [Pool("shared-4", 4, nodes=2)], namespace) as made:
            first, second = _placements(api, namespace, [node.name for node in made])
    assert first == second


@pytest.mark.kubernetes("1.36")
def test_a_small_replay_of_the_trace_places_more_gpu_work_with_sharing_than_without(
    nginx: Path,
) -> None:
    from bench.packing.__main__ import configurations
    from bench.packing.replay import replay
    from bench.packing.trace import read_nodes, read_tasks, sample_nodes, workload

    nodes = sample_nodes(read_nodes(), 150)
    tasks = workload(read_tasks(), sum(node.gpus for node in nodes), seed=42)
    chosen = {item.name: item for item in configurations()}
    binaries = tools.kube_binaries()
    ratios = {}
    for name in ("no sharing", "dra-4"):
        result = replay(chosen[name], "default", 42, 150, nodes, tasks, binaries, nginx, log=print)
        arrived = [point[0] for point in result.curve]
        allocated = [point[1] for point in result.curve]
        assert arrived == sorted(arrived) and arrived[-1] == pytest.approx(1.3, abs=0.05)
        assert all(placed <= came + 1e-9 for came, placed in zip(arrived, allocated, strict=True))
        ratios[name] = allocated[-1]
    assert ratios["dra-4"] > ratios["no sharing"]
