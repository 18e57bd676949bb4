"""The extender's process: watches that keep the cluster view, and the HTTP `prioritize`
verb kube-scheduler calls.

The request and answer are kube-scheduler's extender types (k8s.io/kube-scheduler
extender/v1, types.go, v0.37.2): `ExtenderArgs` {"Pod", "Nodes", "NodeNames"} (with
`nodeCacheCapable: true` only `NodeNames` is filled) and `HostPriorityList`
[{"Host", "Score"}]. The scheduler adds `Score x weight x (MaxNodeScore /
MaxExtenderPriority)` to its own plugins' sum without clamping it (pkg/scheduler
schedule_one.go, prioritizeNodes), and with `ignorable: true` an error or a timeout only
leaves the extender's score out. So every failure here answers an error and the
scheduler goes on with its own filters and scores.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kubernetes.client
import msgspec
from kubernetes.watch.watch import iter_resp_lines

from castslice.extender.cluster_view import ClusterView

LOG = logging.getLogger("castslice.extender")
PRIORITIZE = "/prioritize"
HEALTH = "/healthz"
VIEW = "/view"
# The longest body read: a Pod and up to five thousand node names.
_MAX_BODY = 4 << 20
_WATCH_SECONDS = 300
_RETRY_SECONDS = 1.0


class _Args(msgspec.Struct):
    """ExtenderArgs, only what is read: the Pod as plain JSON, and the node names."""

    Pod: dict[str, Any] | None = None
    NodeNames: list[str] | None = None
    Nodes: dict[str, Any] | None = None


_DECODER = msgspec.json.Decoder(_Args)


class Informers:
    """List, then watch, each kind into the view; on any error, list again."""

    def __init__(self, api: kubernetes.client.ApiClient, view: ClusterView) -> None:
        core = kubernetes.client.CoreV1Api(api)
        resource = kubernetes.client.ResourceV1Api(api)
        self.view = view
        self.kinds: dict[str, Callable[..., Any]] = {
            "nodes": core.list_node,
            "pods": core.list_pod_for_all_namespaces,
        }
        if view.pools is None:
            # Devices and their claims; a cluster sharing by node pools may serve no
            # resource.k8s.io at all, and its watch would never sync.
            self.kinds["resourceslices"] = resource.list_resource_slice
            self.kinds["resourceclaims"] = resource.list_resource_claim_for_all_namespaces
        self.synced = {kind: threading.Event() for kind in self.kinds}
        self._stop = threading.Event()

    def start(self) -> None:
        for kind in self.kinds:
            threading.Thread(target=self._run, args=(kind,), daemon=True, name=kind).start()

    def stop(self) -> None:
        self._stop.set()

    def ready(self) -> bool:
        return all(event.is_set() for event in self.synced.values())

    def _run(self, kind: str) -> None:
        while not self._stop.is_set():
            try:
                self._list_and_watch(kind)
            except Exception as error:  # noqa: BLE001 - any failure relists; the view stays
                LOG.warning("watch of %s ended (%s); listing again", kind, type(error).__name__)
                self._stop.wait(_RETRY_SECONDS)

    def _list_and_watch(self, kind: str) -> None:
        lister = self.kinds[kind]
        answer = lister(_preload_content=False)
        listing = json.loads(answer.data)
        answer.release_conn()
        self.view.replace(kind, listing.get("items") or [])
        self.synced[kind].set()
        version = (listing.get("metadata") or {}).get("resourceVersion") or ""
        while not self._stop.is_set():
            stream = lister(
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=_WATCH_SECONDS,
                _preload_content=False,
            )
            try:
                for event in _lines(stream):
                    kind_of_event = event.get("type")
                    item = event.get("object") or {}
                    if kind_of_event == "ERROR":
                        # 410 Gone: the version is too old; list again.
                        raise _Relist
                    version = (item.get("metadata") or {}).get("resourceVersion") or version
                    if isinstance(kind_of_event, str) and kind_of_event != "BOOKMARK":
                        self.view.apply(kind, kind_of_event, item)
            finally:
                stream.release_conn()


class _Relist(Exception):
    pass


def _lines(stream: Any) -> Iterator[dict[str, Any]]:
    for line in iter_resp_lines(stream):
        if line.strip():
            yield json.loads(line)


ClaimReader = Callable[[str, str], dict[str, Any] | None]


class Extender:
    """Scores Pods from the view; counts what it did, for its own cost.

    `read_claim`: a claim the Pod names that the watch has not delivered yet (made a
    moment before the scheduler took the Pod) is read from the API server instead.
    """

    def __init__(
        self,
        view: ClusterView,
        ready: Callable[[], bool],
        read_claim: ClaimReader | None = None,
    ) -> None:
        self.view = view
        self.ready = ready
        self.read_claim = read_claim
        self.calls = 0
        self.seconds = 0.0
        self._count = threading.Lock()

    def prioritize(self, body: bytes) -> tuple[HTTPStatus, bytes]:
        """The HostPriorityList for an ExtenderArgs body, or an error kube-scheduler ignores."""
        if not self.ready():
            return HTTPStatus.SERVICE_UNAVAILABLE, b'{"error":"the cluster view is not synced yet"}'
        try:
            args = _DECODER.decode(body)
        except msgspec.DecodeError as error:
            return HTTPStatus.BAD_REQUEST, _error(f"not an ExtenderArgs body: {error}")
        if args.Pod is None:
            return HTTPStatus.BAD_REQUEST, _error("ExtenderArgs has no Pod")
        if args.NodeNames is None:
            return HTTPStatus.BAD_REQUEST, _error(
                "ExtenderArgs has no NodeNames: configure the extender with nodeCacheCapable: true"
            )
        began = time.perf_counter()
        if self.read_claim is not None:
            for namespace, name in self.view.missing_claims(args.Pod):
                claim = self.read_claim(namespace, name)
                if claim is not None:
                    self.view.apply("resourceclaims", "ADDED", claim)
        scores = self.view.prioritize(args.Pod, args.NodeNames)
        with self._count:
            self.seconds += time.perf_counter() - began
            self.calls += 1
        return HTTPStatus.OK, msgspec.json.encode(
            [{"Host": name, "Score": score} for name, score in scores]
        )

    def account(self) -> bytes:
        """The view's summary and the extender's own cost so far."""
        with self._count:
            calls, seconds = self.calls, self.seconds
        return msgspec.json.encode({**self.view.summary(), "calls": calls, "seconds": seconds})


def _error(message: str) -> bytes:
    return msgspec.json.encode({"error": message})


def handler_for(extender: Extender) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            if self.path.rstrip("/") != PRIORITIZE:
                self._answer(HTTPStatus.NOT_FOUND, _error(f"no verb {self.path}: {PRIORITIZE}"))
                return
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= _MAX_BODY:
                self._answer(HTTPStatus.BAD_REQUEST, _error("a body of 1 byte to 4 MiB is needed"))
                return
            try:
                status, answer = extender.prioritize(self.rfile.read(length))
            except Exception as error:  # noqa: BLE001 - never a stack trace to the scheduler
                LOG.error("prioritize failed: %s", type(error).__name__)
                status, answer = HTTPStatus.INTERNAL_SERVER_ERROR, _error("scoring failed")
            self._answer(status, answer)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == HEALTH:
                ok = extender.ready()
                status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
                self._answer(status, b'{"ready":true}' if ok else b'{"ready":false}')
                return
            if self.path.rstrip("/") == VIEW:
                self._answer(HTTPStatus.OK, extender.account())
                return
            self._answer(HTTPStatus.NOT_FOUND, _error(f"no path {self.path}"))

        def _answer(self, status: HTTPStatus, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            # One line per scheduling attempt would be the scheduler's log again.
            return

    return Handler


def serve(
    api: kubernetes.client.ApiClient,
    view: ClusterView,
    host: str,
    port: int,
    on_ready: Callable[[int], None] | None = None,
) -> None:
    """Watch the cluster and answer kube-scheduler until the process is stopped."""
    informers = Informers(api, view)
    informers.start()
    resource = kubernetes.client.ResourceV1Api(api)

    def read_claim(namespace: str, name: str) -> dict[str, Any] | None:
        try:
            # With _preload_content=False the client returns the raw urllib3 response.
            answer: Any = resource.read_namespaced_resource_claim(
                name, namespace, _preload_content=False
            )
        except Exception:  # noqa: BLE001 - not readable now: no opinion on this Pod
            return None
        claim: dict[str, Any] = json.loads(answer.data)
        answer.release_conn()
        return claim

    extender = Extender(view, informers.ready, read_claim)
    server = ThreadingHTTPServer((host, port), handler_for(extender))
    server.daemon_threads = True
    if on_ready is not None:
        on_ready(server.server_address[1])
    try:
        server.serve_forever()
    finally:
        informers.stop()
        server.server_close()
