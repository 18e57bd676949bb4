"""The toolkit's own hook takes what CastSlice writes: nvidia-container-toolkit's
`nvidia-cdi-hook apply-cuda-memory-limits` (built from its Go module, tests/toolkit/) run on
the OCI spec of a container CastSlice rewrote, its env as the kubelet and the runtime pass it.

There is no NVIDIA driver here: a run that gets past reading, parsing and checking the two
variables stops where the hook looks for libnvidia-ml.so.1, which is the step before NVML
`SetMemoryLimits_v1` (what a 615 driver then does with the numbers is not shown here). The
values CastSlice must never write are refused by the hook itself before that step.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from castslice.contract.gpu_memory import LIMIT_ENV, REQUEST_ENV
from castslice.decision.admission import Admission
from castslice.environment import load_config
from tests.deploy.conftest import ci_or_skip
from tests.factories import apply_response, gpu_container, make_pod, make_review, opted_in
from tests.toolkit import (
    IMAGE_ENV,
    HookRun,
    HookUnavailable,
    hook_binary,
    kubelet_env,
    oci_env,
    run_hook,
)

# Where the hook stops without a driver: after the variables, before NVML.
NO_DRIVER = "failed to locate libnvidia-ml.so.1"


@pytest.fixture(scope="module")
def hook() -> Path:
    try:
        return hook_binary()
    except HookUnavailable as error:
        ci_or_skip(str(error))
        raise


def rewritten_container(container: dict, annotations: dict[str, str] | None = None) -> dict:
    """`container` as the API server stores it after CastSlice's patch (nvidia backend, a
    quarter of an H200 on 4-way time-slicing nodes)."""
    config = load_config({"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_GPU_MEMORY": "143771Mi"})
    pod = make_pod(opted_in(**(annotations or {})), [container])
    response = Admission(config).review(make_review(pod)["request"]).response
    stored = apply_response(pod, {**response, "patch": base64.b64encode(response["patch"])})
    result: dict = stored["spec"]["containers"][0]
    return result


def spec_env(container: dict, config_maps: dict | None = None) -> list[str]:
    return oci_env(IMAGE_ENV, kubelet_env(container, config_maps or {}))


def run(hook: Path, tmp_path: Path, env: list[str], cgroup: str = "cgroup2") -> HookRun:
    try:
        return run_hook(hook, tmp_path / "bundle", env, cgroup=cgroup)
    except HookUnavailable as error:
        ci_or_skip(str(error))
        raise


def test_what_castslice_writes_gets_past_the_hooks_checks_to_nvml(
    hook: Path, tmp_path: Path
) -> None:
    container = rewritten_container(gpu_container("vllm"))
    env = spec_env(container)
    assert f"{REQUEST_ENV}=35942" in env and f"{LIMIT_ENV}=35942" in env

    result = run(hook, tmp_path, env)

    assert result.returncode != 0
    assert NO_DRIVER in result.stderr, result.stderr
    assert "failed to parse" not in result.stderr and "exceeds" not in result.stderr


def test_a_burst_and_values_the_pod_tried_to_set_reach_nvml_as_castslice_wrote_them(
    hook: Path, tmp_path: Path
) -> None:
    config_maps = {"gpu": {LIMIT_ENV: "999999", REQUEST_ENV: "abc"}}
    container = {
        **gpu_container("vllm"),
        "envFrom": [{"configMapRef": {"name": "gpu"}}],
        "env": [{"name": LIMIT_ENV, "value": "999999"}],
    }
    rewritten = rewritten_container(container, {"castops.io/gpu-memory-burst": "2"})
    env = spec_env(rewritten, config_maps)
    assert f"{REQUEST_ENV}=35942" in env and f"{LIMIT_ENV}=71885" in env

    result = run(hook, tmp_path, env)

    assert NO_DRIVER in result.stderr, result.stderr
    # Without CastSlice the same container's env would not even get that far.
    unchanged = run(hook, tmp_path, spec_env(container, config_maps))
    assert f"failed to parse {REQUEST_ENV}" in unchanged.stderr


@pytest.mark.parametrize(
    ("request_mib", "limit_mib", "refusal"),
    [
        ("71885", "35942", "memory request (71885 MiB) exceeds memory limit (35942 MiB)"),
        ("35942", "35942.5", f"failed to parse {LIMIT_ENV}: strconv.ParseUint"),
        ("35942Mi", "35942", f"failed to parse {REQUEST_ENV}"),
        ("-1", "35942", f"failed to parse {REQUEST_ENV}"),
        (" 35942", "35942", f"failed to parse {REQUEST_ENV}"),
    ],
)
def test_values_castslice_never_writes_are_refused_by_the_hook(
    hook: Path, tmp_path: Path, request_mib: str, limit_mib: str, refusal: str
) -> None:
    env = [*IMAGE_ENV, f"{REQUEST_ENV}={request_mib}", f"{LIMIT_ENV}={limit_mib}"]

    result = run(hook, tmp_path, env)

    assert result.returncode != 0
    assert refusal in result.stderr, result.stderr
    assert NO_DRIVER not in result.stderr


def test_on_a_cgroup_v1_node_the_hook_fails_the_container(hook: Path, tmp_path: Path) -> None:
    # Why CastSlice must keep the variables off nodes that cannot enforce them: the hook is
    # a createRuntime hook, and its failure is the container's.
    container = rewritten_container(gpu_container("vllm"))

    result = run(hook, tmp_path, spec_env(container), cgroup="tmpfs")

    assert result.returncode != 0
    assert "setting GPU memory limits is only supported in cgroup v2" in result.stderr


def test_a_container_without_the_variables_is_left_to_start(hook: Path, tmp_path: Path) -> None:
    result = run(hook, tmp_path, list(IMAGE_ENV), cgroup="tmpfs")

    assert result.returncode == 0, result.stderr


def test_an_images_own_env_is_read_before_castslices_which_admission_cannot_see(
    hook: Path, tmp_path: Path
) -> None:
    # containerd puts the image's ENV before the container's and keeps both; the hook reads
    # the first entry of each name. An image built with its own value therefore decides:
    # a limit CastSlice cannot replace (docs/backends.md#gpu-memory-limits says so).
    container = rewritten_container(gpu_container("vllm"))
    image_env = [*IMAGE_ENV, f"{LIMIT_ENV}=35942.5"]
    env = oci_env(image_env, kubelet_env(container, {}))
    assert env.index(f"{LIMIT_ENV}=35942.5") < env.index(f"{LIMIT_ENV}=35942")

    result = run(hook, tmp_path, env)

    assert f"failed to parse {LIMIT_ENV}" in result.stderr, result.stderr
