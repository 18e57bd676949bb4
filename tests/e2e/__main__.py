"""Run the end-to-end environment by hand: `python -m tests.e2e up` (from the repo root).

Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK
on 127.0.0.1, creates fake GPU nodes shaped as the nodes of the backend
CastSlice runs with (CASTSLICE_BACKEND, `resource` by default), serves
CastSlice behind nginx TLS, registers the shipped webhook configuration, prints
a KUBECONFIG and waits until Ctrl-C, then stops everything. CASTSLICE_*
variables set in the calling shell configure the CastSlice it starts.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from types import FrameType

from castslice.backends.mig.profiles import MODELS
from castslice.environment import load_config

from ..mig_nodes import NVML_NAMES, gpu_node_side
from ..procs import HarnessError
from . import tools
from .castslice_server import CastSliceServer
from .cluster import LocalControlPlane
from .dra import create_dra_nodes, ensure_taint_rule
from .nodes import (
    BACKENDS,
    GKE_CLIENTS,
    GKE_STRATEGY,
    NVIDIA_REPLICAS,
    NVIDIA_STRATEGY,
    Manifest,
    create_nodes,
    create_shaped_nodes,
    shaped_node,
    standard_pools,
)
from .registration import register_and_wait

# The backends `up` can start nodes for: the device-plugin ones, DRA devices (dra.py), and
# MIG nodes of the device plugin's mixed and single strategies (tests/mig_nodes.py).
_UP_BACKENDS = (*BACKENDS, "dra", "mig")
_MIG_STACKS = ("mixed", "single")

_EXAMPLE = """\
kubectl get nodes -L {columns}
kubectl apply -f - <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: notebook
spec:
  replicas: 5
  selector:
    matchLabels: {{app: notebook}}
  template:
    metadata:
      labels: {{app: notebook}}
      annotations:
        castops.io/optimize: "true"
        castops.io/workload-type: dev
    spec:
      containers:
        - name: app
          image: registry.invalid/app:1
          resources:
            limits:
              nvidia.com/gpu: 1
EOF
kubectl get pods -o wide   # four Pods share one GPU and run, the fifth is Pending
kubectl get pods -o yaml | grep -m1 castslice.castops.io/applied   # what CastSlice did
kubectl describe pods | grep Insufficient"""
# The node labels that tell one backend's pools apart.
_COLUMNS = {
    "resource": "type",
    "nvidia": f"{NVIDIA_REPLICAS},{NVIDIA_STRATEGY}",
    "gke": f"{GKE_STRATEGY},{GKE_CLIENTS}",
    "dra": "type",
    "mig": "nvidia.com/gpu.product,nvidia.com/mig.config",
}
# On `dra` the scheduler's reason is its DynamicResources plugin's, not Insufficient.
_DRA_EXAMPLE = """\
kubectl get resourceclaimtemplates,resourceslices
kubectl get resourceclaims -o yaml | grep -E 'device:|shareID|shares:'   # one device, 4 shares
kubectl describe pods | grep 'cannot allocate all claims'
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e", description=__doc__)
    parser.add_argument("command", choices=["up"], help="start everything and wait for Ctrl-C")
    parser.parse_args(argv)
    # SIGTERM (from a process manager) must run the same cleanup as Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _up()
    except tools.MissingTool as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except HarnessError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def _up() -> int:
    nginx = tools.nginx()
    binaries = tools.kube_binaries(on_build=lambda message: print(message, flush=True))
    settings = {key: value for key, value in os.environ.items() if key.startswith("CASTSLICE_")}
    token = settings.get("CASTSLICE_PATH_TOKEN", "")
    backend = settings.get("CASTSLICE_BACKEND", "resource").strip()
    if backend not in _UP_BACKENDS:
        raise HarnessError(
            f"CASTSLICE_BACKEND={backend!r}: expected one of {', '.join(_UP_BACKENDS)}"
        )
    with LocalControlPlane(binaries) as plane, CastSliceServer(nginx, settings) as server:
        api = plane.api_client()
        register_and_wait(api, server, path=token)
        if backend == "dra":
            # One node with one shareable GPU, set up as documented, and the templates in
            # `default`.
            names = create_dra_nodes(api, [1])
            ensure_taint_rule(api)
            _apply_claim_templates(plane.kubeconfig, settings)
        elif backend == "mig":
            manifests = mig_nodes(settings)
            create_shaped_nodes(api, manifests)
            names = [manifest["metadata"]["name"] for manifest in manifests]
        else:
            names = [node.name for node in create_nodes(api, backend, standard_pools(backend))]
        print(
            f"\nAPI server:     {plane.server_url}\n"
            f"CastSlice:      {server.url(token)} (backend: {backend})\n"
            f"fake GPU nodes: {', '.join(names)}\n"
            f"request log:    {server.workdir}/logs/castslice.out\n"
            f"cluster logs:   {plane.logs}\n\n"
            f"export KUBECONFIG={plane.kubeconfig}\n\n"
            f"{_EXAMPLE.format(columns=_COLUMNS[backend])}\n"
            f"{_DRA_EXAMPLE if backend == 'dra' else ''}\n"
            "Ctrl-C stops everything.",
            flush=True,
        )
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            print("\nstopping…", flush=True)
    return 0


def mig_nodes(settings: dict[str, str]) -> list[Manifest]:
    """One node of one GPU per profile the settings offer, of the first model they name,
    cut as mig-parted's `all-<profile>`, and one without MIG: every Pod has a node."""
    config = load_config(settings)
    if config.mig_stack not in _MIG_STACKS:
        raise HarnessError(
            f"CASTSLICE_MIG_STACK={config.mig_stack}: `up` makes MIG nodes for the "
            f"{' and '.join(_MIG_STACKS)} stacks"
        )
    model = config.mig_gpu_models[0]
    if model not in NVML_NAMES:
        raise HarnessError(
            f"CASTSLICE_MIG_GPU_MODELS={model}: `up` makes MIG nodes of {', '.join(NVML_NAMES)}"
        )
    offered = [
        p.name
        for p in MODELS[model].profiles
        if config.mig_profiles is None or p.name in config.mig_profiles
    ]
    manifests = []
    for layout in [*(f"all-{name}" for name in offered), "all-disabled"]:
        name = f"mig-{model.lower()}-{layout.removeprefix('all-').replace('.', '')}"
        manifests.append(shaped_node(name, *gpu_node_side(config.mig_stack, model, layout)))
    return manifests


def _apply_claim_templates(kubeconfig: object, settings: dict[str, str]) -> None:
    """`castslice claim-templates -n default | kubectl apply -f -`, as a user would."""
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CASTSLICE_")},
        **settings,
    }
    rendered = subprocess.run(
        [sys.executable, "-m", "castslice", "claim-templates", "-n", "default"],
        capture_output=True,
        text=True,
        env=environ,
        check=True,
    ).stdout
    subprocess.run(
        [str(tools.kubectl()), f"--kubeconfig={kubeconfig}", "apply", "-f", "-"],
        input=rendered,
        capture_output=True,
        text=True,
        check=True,
    )


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
