"""Prometheus metrics for a cluster's own Prometheus, on with `CASTSLICE_METRICS=true`.

Every answer is counted from its log record, so the counts and the log lines
cannot disagree: decided reviews, and the answers that carry no decision (failed
open, refused, an internal error; castslice/serve/core.py lists their reasons).
prometheus_client serves them over plain HTTP on CASTSLICE_METRICS_PORT (9090 by
default), a port of their own: the webhook's port answers every path itself, `/metrics`
included. Cloud Run and Knative refuse the
setting at start (castslice/settings/config.py): their URL is public, and the log-based
metrics are the ones to use there.

One process counts. Both ways CastSlice is served, `functions-framework` and
gunicorn with castslice/serve/tls.py, import main.py in gunicorn's arbiter and then fork
one worker, which answers every review on its threads. The counts live in that
worker's memory, so their HTTP server has to run there too: it is started in the
worker, right after the fork. Started in the arbiter, it would serve the arbiter's
counts, which stay at zero.

A second worker would count on its own, and only one process can listen on the
port: a worker that cannot listen logs why and exits with gunicorn's boot-error
status, which stops gunicorn, rather than answer reviews that no scrape would
count. The same goes for gunicorn's HUP reload, which starts new workers before
it stops the old ones; nothing sends it to a Pod. One worker per Pod is what the
in-cluster Deployment runs (it scales by replicas); prometheus_client's
multiprocess mode, a shared directory of per-worker files, would be needed for more.

This module is imported only when metrics are on (see main.py): with them off,
nothing of prometheus_client is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from gunicorn.arbiter import Arbiter
from prometheus_client import Counter, Histogram, start_http_server

from castslice.serve.core import AnswerRecord, AnyRecord
from castslice.serve.log import write_log, write_record

# Every address of the Pod, as the webhook's own port (castslice/serve/tls.py).
ADDRESS = "0.0.0.0"
# A review takes tens of microseconds (a 250 KiB Pod a few hundred); the API server
# gives up on the webhook after its timeoutSeconds, 5 s.
DURATION_BUCKETS = (
    *(0.000025, 0.00005, 0.0001, 0.00025, 0.0005),
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
    *(1.0, 2.5, 5.0),
)

REQUESTS = Counter(
    "castslice_admission_requests",
    "Requests answered, by decision (failed-open, refused and error for those not decided), "
    "reason, slice source and backend.",
    ("decision", "reason", "source", "backend"),
)
REVIEW_DURATION = Histogram(
    "castslice_admission_review_duration_seconds",
    "Time to decide on one AdmissionReview, from decoding its body to its answer.",
    buckets=DURATION_BUCKETS,
)

ReviewLog = Callable[[AnyRecord], None]


def serve_metrics(port: int, write: ReviewLog = write_record) -> ReviewLog:
    """Serve the metrics on `port` from the worker gunicorn forks next.

    Returns the review log for the Webhook: it counts each review, then writes its line.
    """
    arbiter = os.getpid()

    def start_in_worker() -> None:
        # Only in the arbiter's own children: not in a process a worker might fork.
        if os.getppid() == arbiter:
            _listen(port)

    os.register_at_fork(after_in_child=start_in_worker)

    def count_and_write(record: AnyRecord) -> None:
        try:
            count_review(record)
        finally:
            # A count that raised still leaves the line, and the core hears of it.
            write(record)

    return count_and_write


def count_review(record: AnyRecord) -> None:
    """Count one answer; labels left as None in the record are empty. Only a decided review
    has a duration, and a slice source and backend."""
    if isinstance(record, AnswerRecord):
        REQUESTS.labels(record.decision, record.reason, "", "").inc()
        return
    REQUESTS.labels(
        record.decision, record.reason or "", record.source or "", record.backend or ""
    ).inc()
    REVIEW_DURATION.observe(record.latency_ms / 1000)


def _listen(port: int) -> None:
    try:
        start_http_server(port, addr=ADDRESS)
    except OSError as error:
        write_log(
            "ERROR",
            f"cannot serve metrics on port {port} (CASTSLICE_METRICS_PORT): {error}; "
            "CASTSLICE_METRICS=true needs one worker process (gunicorn's --workers, "
            "functions-framework's WORKERS) and a port nothing else listens on",
        )
        # An exception would be ignored here, in the fork's hook; this status stops gunicorn.
        os._exit(Arbiter.WORKER_BOOT_ERROR)
