"""CastSlice killed, slow, broken or re-certified under load: Pods keep coming, nothing hangs.

Every fault here makes the API server's call fail in a different way. With
`failurePolicy: Ignore` each such Pod must be admitted unchanged, within the
registration's timeoutSeconds, and counted by the API server's
`apiserver_admission_webhook_fail_open_count`; and once the fault is gone, Pods
are rewritten again without anyone doing anything.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import struct
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import kubernetes.client
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from castslice.render.webhook_configuration import POD_WEBHOOK

from ..procs import free_port, wait_until
from ..secret_volume import SecretVolume
from ..served import environment, serving, tls_command
from .apiserver_metrics import (
    DURATION,
    FAIL_OPEN,
    REJECTION,
    REQUESTS,
    fail_open_count,
    series_of,
    total,
    webhook_samples,
)
from .burst import APPLIED, pods_in, remove_burst, start_burst, wait_for_pods
from .castslice_server import CastSliceServer, StartServer
from .certs import CertificateAuthority
from .pods import GPU, create_pod, gpu_container, opted_in, pod, read_pod, resources_of
from .registration import (
    configuration_for,
    probe_is_mutated,
    register,
    register_and_wait,
    webhook_settings,
)

TIMEOUT_SECONDS = webhook_settings()["timeoutSeconds"]
# A registration of the slow front end with a shorter timeout keeps that test quick;
# test_fail_open.py checks the generated configuration's own value the same way.
SHORT_TIMEOUT = 2
# Beyond the timeout: the API server's own work and a loaded 2-core machine.
MARGIN = 2.0
CREATES = 3
UNMUTATED = {"app": {"requests": {"cpu": "100m", GPU: "1"}, "limits": {GPU: "1"}}}
KILL_BURST = 300
# The certificate renewal test sends waves of Pods at once, apart by more than the time
# the server keeps an idle connection open, so each wave makes the API server open new
# connections: new TLS handshakes. The Deployment keeps them 120 s (longer than the API
# server's 90 s); the test shortens that to see several renewals within a minute.
WAVES = 4
WAVE_PODS = 6
KEEPALIVE = 2
WAVE_GAP = KEEPALIVE + 1.5


def timed_create(api: kubernetes.client.ApiClient, namespace: str) -> tuple[str, float]:
    name = f"fault-{uuid.uuid4().hex[:8]}"
    manifest = pod(name, [gpu_container()], annotations=opted_in(workload_type="training"))
    started = time.monotonic()
    try:
        create_pod(api, namespace, manifest)
    except kubernetes.client.ApiException as error:
        # The name is this call's alone: AlreadyExists means an earlier send of this same
        # create was stored and its answer lost (seen once on a loaded machine). The Pod
        # went through admission all the same, which is what the callers check.
        if error.status != 409:
            raise
    return name, time.monotonic() - started


def settle_on_failing(api: kubernetes.client.ApiClient, namespace: str) -> None:
    """Return once dry-run probes come back unchanged: the faulty registration is live."""
    wait_until(
        lambda: not probe_is_mutated(api, f"probe-{uuid.uuid4().hex[:10]}", namespace),
        timeout=60,
        what="the API server to call the faulty front end",
    )


def assert_admitted_unchanged_within(
    api: kubernetes.client.ApiClient, namespace: str, timeout: float
) -> list[float]:
    """Create Pods one by one; each is stored unchanged, none waits past `timeout`."""
    before = fail_open_count(api)
    timings = []
    for _ in range(CREATES):
        name, elapsed = timed_create(api, namespace)
        assert resources_of(read_pod(api, namespace, name)) == UNMUTATED
        timings.append(elapsed)
    assert max(timings) < timeout + MARGIN, timings
    assert fail_open_count(api) - before == CREATES
    return timings


def register_changed(
    api: kubernetes.client.ApiClient, url: str, ca_pem: bytes, **settings: object
) -> None:
    """The generated configuration, with other `settings` on the Pod webhook."""
    document = configuration_for(url, ca_pem)
    for hook in document["webhooks"]:
        if hook["name"] == POD_WEBHOOK:
            hook.update(settings)
    admission = kubernetes.client.AdmissionregistrationV1Api(api)
    name = document["metadata"]["name"]
    current = admission.read_mutating_webhook_configuration(name)
    document["metadata"]["resourceVersion"] = current.metadata.resource_version
    admission.replace_mutating_webhook_configuration(name, document)


def test_a_front_end_slower_than_the_timeout_is_given_up_at_the_timeout(
    api: kubernetes.client.ApiClient, namespace: str, own_castslice: StartServer
) -> None:
    server = own_castslice({})
    register_and_wait(api, server)
    server.pause()  # nginx accepts and waits; the function behind it never answers
    try:
        register_changed(api, server.url(), server.ca_pem, timeoutSeconds=SHORT_TIMEOUT)
        # A probe that waits the full 5 s still went by the old registration.
        wait_until(
            lambda: _probe_seconds(api, namespace) < SHORT_TIMEOUT + MARGIN,
            timeout=60,
            what=f"the API server to give up after {SHORT_TIMEOUT} s",
        )
        timings = assert_admitted_unchanged_within(api, namespace, SHORT_TIMEOUT)
    finally:
        server.resume()
    # It waited for the answer, up to the timeout: not a refused call.
    assert min(timings) >= SHORT_TIMEOUT - 0.5


def test_a_front_end_answering_502_with_an_html_page_is_ignored(
    api: kubernetes.client.ApiClient, namespace: str, own_castslice: StartServer
) -> None:
    server = own_castslice({})
    register_and_wait(api, server)
    server.stop_function()  # nginx stays up, with nothing behind it
    status, content_type, page = _post(server.url(), server.ca_pem)
    assert (status, content_type) == (502, "text/html")
    assert b"<html>" in page
    settle_on_failing(api, namespace)

    timings = assert_admitted_unchanged_within(api, namespace, TIMEOUT_SECONDS)

    # An error answer is final: the API server does not retry (one fail-open per create,
    # counted above) and does not wait for the timeout, which an unanswered call would
    # reach. Measured: a few tens of milliseconds per create; shown with -s.
    print(f"creates after a 502: {', '.join(f'{t:.3f} s' for t in timings)}")
    assert max(timings) < TIMEOUT_SECONDS, timings


def test_a_front_end_resetting_the_connection_is_ignored(
    api: kubernetes.client.ApiClient, namespace: str, castslice: CastSliceServer, tmp_path: Path
) -> None:
    with ResettingFront(tmp_path) as front:
        register(api, front.url, front.ca_pem)
        try:
            settle_on_failing(api, namespace)
            assert front.requests > 0  # the calls reached it, whole, before the reset

            assert_admitted_unchanged_within(api, namespace, TIMEOUT_SECONDS)
        finally:
            register_and_wait(api, castslice)


def test_castslice_killed_mid_burst_fails_open_and_is_back_with_no_manual_step(
    api: kubernetes.client.ApiClient, namespace: str, own_castslice: StartServer
) -> None:
    server = own_castslice({})
    register_and_wait(api, server)
    before = fail_open_count(api)
    start_burst(api, namespace, "burst", KILL_BURST)
    try:
        wait_for_pods(api, namespace, KILL_BURST // 5)
        server.kill_function()  # SIGKILL: master and worker gone, requests in flight lost
        wait_for_pods(api, namespace, KILL_BURST // 2)
        server.restart_function()  # the same port, as a restarted container
        pods = wait_for_pods(api, namespace, KILL_BURST)
        failed_open = fail_open_count(api) - before
        # Scaled further now, the burst's new Pods meet CastSlice back in service.
        _scale(api, namespace, "burst", KILL_BURST + 20)
        later = wait_for_pods(api, namespace, KILL_BURST + 20)
        failed_open_later = fail_open_count(api) - before
    finally:
        remove_burst(api, namespace, "burst")

    assert len(pods) == KILL_BURST
    unchanged = [p for p in pods if APPLIED not in (p["metadata"].get("annotations") or {})]
    # Rewritten before the kill, admitted unchanged while it was down: every Pod exists,
    # and the API server counted each unchanged one as a call that failed open.
    assert KILL_BURST // 5 <= KILL_BURST - len(unchanged) < KILL_BURST
    assert len(unchanged) == failed_open
    new = [p for p in later if p["metadata"]["name"] not in {q["metadata"]["name"] for q in pods}]
    assert len(new) == 20
    assert all(APPLIED in (p["metadata"].get("annotations") or {}) for p in new)
    assert failed_open_later == failed_open


def test_a_rotated_certificate_is_served_with_no_failed_call(
    api: kubernetes.client.ApiClient, namespace: str, castslice: CastSliceServer, tmp_path: Path
) -> None:
    """The in-cluster variant (gunicorn serving TLS itself) while its Secret is renewed."""
    ca = CertificateAuthority("castslice-e2e-in-cluster-ca")
    volume = SecretVolume(tmp_path / "tls")
    renew(volume, ca)
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())

    def command(port: int) -> list[str]:
        return [*tls_command(port, volume.certfile, volume.keyfile), f"--keep-alive={KEEPALIVE}"]

    env = environment(PYTHONUNBUFFERED="1")
    with serving("castslice-tls", command, tmp_path, env, context=context) as served:
        url = f"https://127.0.0.1:{served.port}/"
        register(api, url, ca.cert_pem)
        try:
            wait_until(
                lambda: _probe_reaches(api, namespace, served.request_log),
                timeout=60,
                what=f"the API server to call {url}",
            )
            before = fail_open_count(api)
            names = _stream_with_renewals(api, namespace, volume, ca)
            failed_open = fail_open_count(api) - before
            served_cert = _served_certificate(served.port)
        finally:
            register_and_wait(api, castslice)
        log = served.process.stderr_path.read_text()

    assert failed_open == 0
    stored = {p["metadata"]["name"]: p for p in pods_in(api, namespace, metadata_only=False)}
    assert all(APPLIED in (stored[name]["metadata"].get("annotations") or {}) for name in names)
    # A renewal is picked up by the next new connection; when the API server opens none
    # between the two (a busy machine stretches the waves), both are one reload. The
    # last certificate is what is served now either way.
    assert log.count("TLS certificate reloaded") in (1, 2)
    assert served_cert == _der(volume.certfile.read_bytes())


def test_the_api_server_counts_failed_calls_by_webhook_name(
    api: kubernetes.client.ApiClient, namespace: str, castslice: CastSliceServer
) -> None:
    """The series operators watch, with the labels this API server gives them. A failed
    call counts as failed open with the shipped `failurePolicy: Ignore`; registered with
    `Fail` it refuses the Pod and counts as a rejection instead, which is why CastSlice
    ships Ignore."""
    nowhere = f"https://127.0.0.1:{free_port()}/"  # nothing listens: every call is refused
    register(api, nowhere, castslice.ca_pem)
    try:
        settle_on_failing(api, namespace)
        first = webhook_samples(api)
        assert _refusal(api, namespace, dry_run=False) is None
        second = webhook_samples(api)
        register_changed(api, nowhere, castslice.ca_pem, failurePolicy="Fail")
        wait_until(
            lambda: _refusal(api, namespace, dry_run=True) is not None,
            timeout=60,
            what="the API server to refuse Pods",
        )
        third = webhook_samples(api)
        refusal = _refusal(api, namespace, dry_run=False)
        fourth = webhook_samples(api)
    finally:
        register_and_wait(api, castslice)

    assert (total(second, FAIL_OPEN) - total(first, FAIL_OPEN)) == 1
    assert total(second, REJECTION) == total(first, REJECTION)
    assert refusal is not None and refusal.status == 500
    assert f'failed calling webhook "{POD_WEBHOOK}"' in json.loads(refusal.body)["message"]
    assert (total(fourth, REJECTION) - total(third, REJECTION)) == 1
    assert total(fourth, FAIL_OPEN) == total(third, FAIL_OPEN)
    series = series_of(fourth, POD_WEBHOOK)
    assert series[FAIL_OPEN] == {("name", "type")}
    assert series[DURATION] == {("name", "operation", "rejected", "type")}
    assert series[REQUESTS] == {("code", "name", "operation", "rejected", "type")}
    assert series[REJECTION] == {("error_type", "name", "operation", "rejection_code", "type")}


def _stream_with_renewals(
    api: kubernetes.client.ApiClient,
    namespace: str,
    volume: SecretVolume,
    ca: CertificateAuthority,
) -> list[str]:
    """Pods created back to back throughout, plus waves of Pods at once on new
    connections; the files are renewed just before the 2nd and the 3rd wave."""
    names: list[str] = []
    done = threading.Event()

    def stream() -> None:
        while not done.is_set():
            names.append(timed_create(api, namespace)[0])

    streaming = threading.Thread(target=stream)
    streaming.start()
    try:
        with ThreadPoolExecutor(WAVE_PODS) as pool:
            for wave in range(WAVES):
                if wave:
                    time.sleep(WAVE_GAP)
                if wave in (1, 2):
                    renew(volume, ca)
                names.extend(pool.map(lambda _: timed_create(api, namespace)[0], range(WAVE_PODS)))
    finally:
        done.set()
        streaming.join()
    return names


def renew(volume: SecretVolume, ca: CertificateAuthority) -> None:
    """A new key and certificate from the same CA, as cert-manager renews them."""
    pair = ca.issue("127.0.0.1", ip_addresses=("127.0.0.1",))
    volume.update(pair.cert_pem, pair.key_pem)


class ResettingFront:
    """A TLS front end that reads each request whole, then resets the connection (RST)."""

    def __init__(self, workdir: Path) -> None:
        ca = CertificateAuthority("castslice-e2e-resetting-ca")
        cert, key = ca.issue("127.0.0.1", ip_addresses=("127.0.0.1",)).write(workdir, "front")
        self.ca_pem = ca.cert_pem
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(cert, key)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self._listener.getsockname()[1]}/"
        self._lock = threading.Lock()
        self.requests = 0

    def __enter__(self) -> ResettingFront:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._reset, args=(connection,), daemon=True).start()

    def _reset(self, connection: socket.socket) -> None:
        connection.settimeout(10)
        with contextlib.suppress(OSError):
            tls = self._context.wrap_socket(connection, server_side=True)
            received = b""
            while b"\r\n\r\n" not in received:
                chunk = tls.recv(65536)
                if not chunk:
                    return
                received += chunk
            with self._lock:
                self.requests += 1
            # A zero linger time makes close() send RST instead of an orderly FIN.
            tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            tls.close()


def _refusal(
    api: kubernetes.client.ApiClient, namespace: str, *, dry_run: bool
) -> kubernetes.client.ApiException | None:
    """Create an opted-in Pod; the API server's refusal, or None when it was admitted."""
    manifest = pod(f"fault-{uuid.uuid4().hex[:8]}", [gpu_container()], annotations=opted_in())
    try:
        create_pod(api, namespace, manifest, dry_run=dry_run)
    except kubernetes.client.ApiException as error:
        return error
    return None


def _probe_seconds(api: kubernetes.client.ApiClient, namespace: str) -> float:
    started = time.monotonic()
    probe_is_mutated(api, f"probe-{uuid.uuid4().hex[:10]}", namespace)
    return time.monotonic() - started


def _probe_reaches(api: kubernetes.client.ApiClient, namespace: str, request_log: Path) -> bool:
    name = f"probe-{uuid.uuid4().hex[:10]}"
    return probe_is_mutated(api, name, namespace) and f'"{name}"' in request_log.read_text()


def _post(url: str, ca_pem: bytes) -> tuple[int, str, bytes]:
    request = urllib.request.Request(
        url, data=b"{}", headers={"Content-Type": "application/json"}, method="POST"
    )
    context = ssl.create_default_context(cadata=ca_pem.decode())
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as reply:
            return reply.status, reply.headers.get_content_type(), reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get_content_type(), error.read()


def _served_certificate(port: int) -> bytes:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw) as tls,
    ):
        certificate = tls.getpeercert(binary_form=True)
    assert certificate is not None
    return certificate


def _der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


def _scale(api: kubernetes.client.ApiClient, namespace: str, name: str, replicas: int) -> None:
    kubernetes.client.AppsV1Api(api).patch_namespaced_deployment_scale(
        name, namespace, {"spec": {"replicas": replicas}}
    )
