"""`castslice extender`: serve the fragmentation-aware scheduler extender (a process of its
own, beside the webhook, never on its path).

kube-scheduler calls its `prioritize` verb for each Pod with the names of the nodes that
passed its filters; the extender scores each node by FGD's fragmentation gradient for the
GPU the DRA allocator will pick, from what its watches of Nodes, Pods, ResourceSlices and
ResourceClaims say, or, on a backend that shares GPUs by node pools (nvidia, gke), for the
clients each node's Pods hold, spread over its GPUs as the device plugin spreads them. It
only scores: registered `ignorable: true` (infra/scheduler/fgd-extender.yaml), an extender
that is down, slow or wrong leaves kube-scheduler to its own filters and scores. Exit
status: 2 when the settings or the cluster cannot be used.
"""

from __future__ import annotations

import argparse
import logging

from castslice.backends.roles import POOLS
from castslice.backends.tools import extender_backends, extender_view_for
from castslice.cli import EXIT_OK, CommandError
from castslice.cli.doctor import add_cluster_arguments, cluster_from
from castslice.cli.flags import config_from


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument(
        "--port", type=int, default=8888, help="port to serve kube-scheduler on (default: 8888)"
    )
    parser.add_argument(
        "--address",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1; 0.0.0.0 in a Pod)",
    )


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise CommandError(f"--port must be from 0 to 65535, not {args.port}")
    config = config_from(args)
    backend = extender_view_for(config)
    if backend.extender_gpus is None:
        raise CommandError(
            f"the extender scores GPUs shared as DRA devices or by sharing node pools "
            f"(CASTSLICE_BACKEND={'|'.join(extender_backends())}); the {config.backend} "
            "backend's GPUs are not tracked per device or per pool"
        )
    cluster = cluster_from(args, "extender")
    from castslice.extender.cluster_view import ClusterView
    from castslice.extender.server import serve
    from castslice.extender.watching import Pools

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    view = ClusterView(
        config.dra_capacity,
        config.slices_per_gpu,
        config.gpu_resource,
        Pools(backend) if backend.extender_gpus == POOLS else None,
    )

    def announce(port: int) -> None:
        print(f"castslice extender: serving on {args.address}:{port}", flush=True)

    try:
        serve(cluster.api, view, args.address, args.port, announce)
    except OSError as error:
        raise CommandError(
            f"cannot serve on {args.address}:{args.port}: {error.strerror}"
        ) from None
    finally:
        cluster.api.close()
    return EXIT_OK
