"""`castslice report --serve PORT`: the report's saving as Prometheus gauges.

Computed on each scrape, from the cluster as it is then: nothing runs between scrapes, so
the exporter needs no CPU when nobody asks. The labels are namespaces, never Pods, so the
series stay as many as the namespaces with rewritten Pods. A scrape that cannot read the
cluster answers `castslice_report_up 0` and no saving, and says why on stderr.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator

from prometheus_client import start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from castslice.contract.cluster import ApiError, Unreachable
from castslice.inspect.report import Report, Saving

# (name, help, the figure it is) for each gauge; the names the dashboard may use.
FIGURES: tuple[tuple[str, str, Callable[[Saving], int]], ...] = (
    ("gpus_asked", "GPUs the Pods CastSlice rewrote asked for, of those on nodes.",
     lambda saving: saving.asked),
    ("gpus_occupied", "GPUs with at least one Pod CastSlice rewrote on them, counted once.",
     lambda saving: saving.occupied),
    ("gpus_saved", "GPUs asked minus GPUs occupied.", lambda saving: saving.saved),
    ("pods_pending", "Pods CastSlice rewrote that wait for a node.",
     lambda saving: saving.pending),
)  # fmt: skip
PREFIX = "castslice_"
CLUSTER_PREFIX = "castslice_cluster_"
UP = "castslice_report_up"


def metric_names() -> list[str]:
    """Every metric the exporter serves."""
    return [UP] + [f"{prefix}{name}" for prefix in (PREFIX, CLUSTER_PREFIX) for name, *_ in FIGURES]


class SavingCollector(Collector):
    def __init__(self, read: Callable[[], Report]) -> None:
        self._read = read
        # One reading of the cluster at a time, however many scrapers come at once.
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(UP, "1 when this scrape could read the cluster, else 0.")
        try:
            with self._lock:
                report = self._read()
        except (Unreachable, ApiError) as error:
            print(f"castslice report: cannot read the cluster: {error}", file=sys.stderr)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        for name, help_text, figure in FIGURES:
            by_namespace = GaugeMetricFamily(
                PREFIX + name, help_text + " By namespace.", labels=("namespace",)
            )
            for namespace, saving in report.namespaces.items():
                by_namespace.add_metric([namespace], figure(saving))
            yield by_namespace
            # Not the namespaces' sum: one GPU shared by two namespaces is occupied once.
            yield GaugeMetricFamily(CLUSTER_PREFIX + name, help_text, value=figure(report.total))


def serve(port: int, address: str, read: Callable[[], Report]) -> None:
    """Serve /metrics on `address`:`port` until interrupted."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SavingCollector(read))
    server, thread = start_http_server(port, addr=address, registry=registry)
    host = f"[{address}]" if ":" in address else address
    # Said once bound, flushed: in a container stdout is a pipe, which holds what it buffers.
    print(
        f"castslice report: serving the saving as Prometheus metrics on "
        f"http://{host}:{server.server_port}/metrics, read from the cluster on each scrape",
        flush=True,
    )
    try:
        thread.join()
    finally:
        server.shutdown()
