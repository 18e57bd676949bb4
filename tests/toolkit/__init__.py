"""nvidia-container-toolkit's `nvidia-cdi-hook`, built from its Go module (build.sh), run the
way a container runtime runs its `apply-cuda-memory-limits` createRuntime hook: the OCI state
on standard input, the bundle's config.json beside it.

What cannot run here is said where it matters: there is no NVIDIA driver, so the hook gets
as far as looking for libnvidia-ml.so.1 and stops there, after it has read, parsed and
checked the two variables. The node's cgroup hierarchy is what the hook looks at first; this
machine's own may be either, so each run mounts the one it needs in mount and cgroup
namespaces of its own (`unshare`): cgroup2 as on a cgroup v2 node, a tmpfs as on a v1 or
hybrid node, where /sys/fs/cgroup is a tmpfs of per-controller hierarchies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

BUILD_SCRIPT = Path(__file__).with_name("build.sh")
VERSION_FILE = Path(__file__).with_name("nvidia-container-toolkit.version")
# The image's own ENV of NVIDIA's CUDA base images (nvidia/cuda *-base-*), which the runtime
# starts the container's env from.
IMAGE_ENV = (
    "PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "NVIDIA_VISIBLE_DEVICES=all",
    "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
)
# A GPU's UUID as the toolkit's CDI spec passes it to the hook (--gpu-id).
GPU_UUID = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"


class HookUnavailable(RuntimeError):
    """nvidia-cdi-hook could not be built or run here; the message says what is missing."""


class HookRun(NamedTuple):
    returncode: int
    stderr: str


def hook_binary() -> Path:
    """nvidia-cdi-hook, built on first use (a minute) and cached by version."""
    if shutil.which("go") is None:
        raise HookUnavailable(
            "go not found; nvidia-cdi-hook is built from its Go module "
            "github.com/NVIDIA/nvidia-container-toolkit: https://go.dev/dl/"
        )
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        raise HookUnavailable("no C compiler; nvidia-cdi-hook binds NVML through cgo")
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False, timeout=900
    )
    if result.returncode != 0:
        tail = "\n".join(result.stderr.splitlines()[-30:])
        raise HookUnavailable(f"{BUILD_SCRIPT} failed with status {result.returncode}:\n{tail}")
    return Path(result.stdout.strip().splitlines()[-1])


def kubelet_env(
    container: Mapping[str, Any], config_maps: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """The variables the kubelet gives the runtime for `container` (Kubernetes v1.37.2,
    pkg/kubelet/kubelet_pods.go, makeEnvironmentVariables, verbatim in
    tests/upstream/kubernetes-v1.37.2-kubelet-make-environment-variables.go.txt): every
    `envFrom` ConfigMap first (with its prefix), then each `env` entry in order, a later one
    replacing an earlier one of the same name, `valueFrom.configMapKeyRef` read from the
    ConfigMap."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or ():
        reference = source["configMapRef"]["name"]
        for key, value in config_maps[reference].items():
            env[f"{source.get('prefix', '')}{key}"] = value
    for entry in container.get("env") or ():
        if "valueFrom" in entry:
            reference = entry["valueFrom"]["configMapKeyRef"]
            env[entry["name"]] = config_maps[reference["name"]][reference["key"]]
        else:
            env[entry["name"]] = entry.get("value", "")
    return env


def oci_env(image_env: Sequence[str], container_env: Mapping[str, str]) -> list[str]:
    """The OCI spec's process.env as containerd v2.2.0's CRI plugin writes it
    (tests/upstream/containerd-v2.2.0-container-env.go.txt): HOSTNAME first, then the
    image's ENV and the variables the kubelet passes, in that order, each replacing only an
    earlier entry of the spec's own (replaceOrAppendEnvValues), so a name set both by the
    image and by the container appears twice, the image's first."""
    env = _replace_or_append([], ["HOSTNAME=gpu-pod"])
    overrides = [*image_env, *(f"{key}={value}" for key, value in container_env.items())]
    return _replace_or_append(env, overrides)


def _replace_or_append(defaults: Sequence[str], overrides: Sequence[str]) -> list[str]:
    """containerd's replaceOrAppendEnvValues, pkg/oci/spec_opts.go, line for line."""
    cache: dict[str, int] = {}
    results: list[str] = []
    for index, entry in enumerate(defaults):
        results.append(entry)
        cache[entry.partition("=")[0]] = index
    for value in overrides:
        key, separator, _ = value.partition("=")
        if not separator:
            if key in cache:
                results[cache[key]] = ""
            continue
        if key in cache:
            results[cache[key]] = value
        else:
            results.append(value)
    return [entry for entry in results if entry != ""]


def run_hook(hook: Path, bundle: Path, env: Sequence[str], *, cgroup: str = "cgroup2") -> HookRun:
    """`nvidia-cdi-hook apply-cuda-memory-limits` on a container whose OCI spec has `env`, as
    the runtime runs it for one GPU, with /sys/fs/cgroup mounted as `cgroup` ("cgroup2", or
    "tmpfs" for a cgroup v1 node). The state's pid is the hook's own, a live process whose
    /proc/<pid>/cgroup the hook resolves."""
    if shutil.which("unshare") is None:
        raise HookUnavailable("unshare (util-linux) not found; it gives the hook its cgroup mount")
    bundle.mkdir(parents=True, exist_ok=True)
    spec = {
        "ociVersion": "1.2.0",
        "process": {"cwd": "/", "args": ["sleep", "infinity"], "env": list(env)},
        "root": {"path": "rootfs"},
    }
    (bundle / "config.json").write_text(json.dumps(spec))
    state = '{"ociVersion":"1.2.0","id":"gpu","status":"creating","pid":%s,"bundle":"%s"}'
    script = (
        f'mount -t {cgroup} none /sys/fs/cgroup && printf \'{state}\' "$$" "$1" | '
        f'exec "$0" apply-cuda-memory-limits --driver-root / --gpu-id {GPU_UUID}'
    )
    namespaces = ["--mount", "--cgroup"]
    if os.geteuid() != 0:
        namespaces = ["--user", "--map-root-user", *namespaces]
    result = subprocess.run(
        ["unshare", *namespaces, "sh", "-c", script, str(hook), str(bundle)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if "mount" in result.stderr and result.returncode != 0 and "level=" not in result.stderr:
        raise HookUnavailable(f"could not give the hook its {cgroup} mount: {result.stderr}")
    return HookRun(result.returncode, result.stderr)
