"""The in-cluster TLS server (gunicorn --config python:castslice.serve.tls), run for real
on 127.0.0.1: TLS 1.2+ only, and a replaced certificate is served to the next
connection without a restart."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gunicorn.config
import pytest

import castslice.serve.tls
from tests.helpers import HOST, client_context, image_app, new_pair
from tests.procs import free_port, serving
from tests.secret_volume import SecretVolume
from tests.served import environment as served_environment
from tests.served import serving as served_by
from tests.served import tls_command


def handshake(port: int, context: ssl.SSLContext) -> tuple[bytes, str]:
    """Connect, complete a TLS handshake and return the server's certificate and the version."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        return tls.getpeercert(binary_form=True), tls.version()


@dataclass
class Server:
    port: int
    volume: SecretVolume


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    volume = SecretVolume(tmp_path_factory.mktemp("tls"))
    first = new_pair(1)
    volume.update(first.cert, first.key)
    app = image_app(tmp_path_factory.mktemp("image"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CASTSLICE_", "GUNICORN_"))}
    # The Deployment's command, with the address and the files moved for the test.
    command = [
        str(Path(sys.executable).with_name("gunicorn")),
        "--config=python:castslice.serve.tls",
    ]
    with serving(
        "gunicorn-tls",
        [
            *command,
            f"--bind=127.0.0.1:{port}",
            f"--certfile={volume.certfile}",
            f"--keyfile={volume.keyfile}",
        ],
        tmp_path_factory.mktemp("tls-logs"),
        lambda: handshake(port, client_context()),
        env=env,
        cwd=app,
        timeout=20,
    ):
        yield Server(port, volume)


def test_it_serves_the_function_over_tls(server: Server) -> None:
    connection = http.client.HTTPSConnection(
        "127.0.0.1", server.port, context=client_context(), timeout=5
    )
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["status"] == "ok"
    finally:
        connection.close()


def test_an_idle_connection_is_kept_for_the_next_review(server: Server) -> None:
    # The API server reuses a connection after a pause; gunicorn's own default (2 s) would
    # have closed it, making the next call pay a new handshake or fail open.
    connection = http.client.HTTPSConnection(
        "127.0.0.1", server.port, context=client_context(), timeout=5
    )
    try:
        for pause in (0, 3):
            time.sleep(pause)
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            assert response.status == 200 and response.getheader("Connection") != "close"
            response.read()
        # Still the first TCP connection: http.client reconnects only after a close.
        assert connection.sock is not None
    finally:
        connection.close()


def test_a_renewed_certificate_is_served_to_the_next_connection(server: Server) -> None:
    first, second = new_pair(10), new_pair(11)
    server.volume.update(first.cert, first.key)
    assert handshake(server.port, client_context())[0] == first.der
    server.volume.update(second.cert, second.key)
    assert handshake(server.port, client_context())[0] == second.der


def test_files_replaced_in_place_are_picked_up_too(server: Server) -> None:
    pair = new_pair(20)
    server.volume.update(pair.cert, pair.key)
    assert handshake(server.port, client_context())[0] == pair.der

    # Overwritten through new files renamed over the old ones (no symlink flip).
    replacement = new_pair(21)
    version = (server.volume.root / "..data").resolve()
    for name, content in (("tls.key", replacement.key), ("tls.crt", replacement.cert)):
        staged = version / f".{name}.new"
        staged.write_bytes(content)
        os.replace(staged, version / name)
    assert handshake(server.port, client_context())[0] == replacement.der


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_tls_1_2_and_1_3_are_accepted(server: Server, version: ssl.TLSVersion) -> None:
    assert handshake(server.port, client_context(version))[1] == version.name.replace("v1_", "v1.")


@pytest.fixture(scope="module")
def old_tls_client(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    """A TLS 1.1 client, proven able to complete a TLS 1.1 handshake with a server that allows
    it; where this OpenSSL cannot speak TLS 1.1 at all, refusing it would prove nothing."""
    directory = tmp_path_factory.mktemp("tls11")
    pair = new_pair(30)
    (directory / "tls.crt").write_bytes(pair.cert)
    (directory / "tls.key").write_bytes(pair.key)
    permissive = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    permissive.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    permissive.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.1, on purpose
        permissive.minimum_version = ssl.TLSVersion.TLSv1_1

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept_one() -> None:
        connection, _ = listener.accept()
        try:
            with permissive.wrap_socket(connection, server_side=True):
                pass
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=accept_one, daemon=True)
    thread.start()
    client = client_context(ssl.TLSVersion.TLSv1_1)
    try:
        version = handshake(port, client)[1]
    except ssl.SSLError as error:
        pytest.fail(
            f"this OpenSSL cannot speak TLS 1.1, so refusal cannot be shown ({error.reason})"
        )
    finally:
        thread.join(timeout=5)
        listener.close()
    assert version == "TLSv1.1"
    return client


def test_tls_1_1_is_refused(server: Server, old_tls_client: ssl.SSLContext) -> None:
    with pytest.raises(ssl.SSLError):
        handshake(server.port, old_tls_client)


class TestReloadingContext:
    """The reload rules, without a server: a bad pair never replaces a good one."""

    @pytest.fixture
    def volume(self, tmp_path: Path) -> SecretVolume:
        volume = SecretVolume(tmp_path)
        pair = new_pair(40)
        volume.update(pair.cert, pair.key)
        return volume

    @staticmethod
    def factory(volume: SecretVolume) -> castslice.serve.tls.ContextFactory:
        def build() -> ssl.SSLContext:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(volume.certfile, volume.keyfile)
            return context

        return build

    @staticmethod
    def served(context: ssl.SSLContext) -> bytes:
        """The certificate `context` presents, read back through an in-memory handshake."""
        server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        server = context.wrap_bio(server_in, server_out, server_side=True)
        client = client_context().wrap_bio(client_in, client_out, server_hostname=HOST)
        for _ in range(10):
            for endpoint in (client, server):
                with contextlib.suppress(ssl.SSLWantReadError):
                    endpoint.do_handshake()
            server_in.write(client_out.read())
            client_in.write(server_out.read())
        return client.getpeercert(binary_form=True)

    def test_the_same_files_give_the_same_context(self, volume: SecretVolume) -> None:
        contexts = castslice.serve.tls.ReloadingContext()
        build = self.factory(volume)
        first = contexts.get(str(volume.certfile), str(volume.keyfile), build)
        assert contexts.get(str(volume.certfile), str(volume.keyfile), build) is first
        assert first.minimum_version == ssl.TLSVersion.TLSv1_2

    def test_contexts_refuse_protocols_older_than_tls_1_2(self) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.1, on purpose
            context.minimum_version = ssl.TLSVersion.TLSv1_1
        assert castslice.serve.tls.harden(context).minimum_version == ssl.TLSVersion.TLSv1_2
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        assert castslice.serve.tls.harden(context).minimum_version == ssl.TLSVersion.TLSv1_3

    def test_a_mismatched_pair_keeps_the_last_good_certificate(self, volume: SecretVolume) -> None:
        contexts = castslice.serve.tls.ReloadingContext()
        build = self.factory(volume)
        good = contexts.get(str(volume.certfile), str(volume.keyfile), build)
        before = self.served(good)

        # A certificate with another pair's key, as if the two were updated one by one.
        volume.update(new_pair(41).cert, new_pair(42).key)
        assert contexts.get(str(volume.certfile), str(volume.keyfile), build) is good
        assert self.served(good) == before

        fixed = new_pair(43)
        volume.update(fixed.cert, fixed.key)
        reloaded = contexts.get(str(volume.certfile), str(volume.keyfile), build)
        assert self.served(reloaded) == fixed.der

    def test_without_a_good_certificate_the_error_is_raised(self, volume: SecretVolume) -> None:
        volume.update(new_pair(44).cert, new_pair(45).key)
        with pytest.raises(ssl.SSLError):
            castslice.serve.tls.ReloadingContext().get(
                str(volume.certfile), str(volume.keyfile), self.factory(volume)
            )


def test_only_intended_names_are_read_as_gunicorn_settings() -> None:
    # gunicorn takes every module-level name of the config module that is a setting.
    known = {setting.name for setting in gunicorn.config.KNOWN_SETTINGS}
    settings = set(vars(castslice.serve.tls)) & known
    assert settings == {
        "wsgi_app", "preload_app", "bind", "worker_class", "workers", "timeout",
        "graceful_timeout", "keepalive", "certfile", "keyfile", "control_socket_disable",
        "loglevel", "when_ready",
    }  # fmt: skip


def test_gunicorn_says_where_it_listens_once_bound(tmp_path: Path) -> None:
    """The Deployment's server writes the start line from gunicorn's when_ready hook, with
    the address it bound and the settings it runs with, before any review."""
    volume = SecretVolume(tmp_path / "tls")
    pair = new_pair(1)
    volume.update(pair.cert, pair.key)
    settings = served_environment(CASTSLICE_BACKEND="nvidia", CASTSLICE_BAKEND="gke")
    command = lambda port: tls_command(port, volume.certfile, volume.keyfile)  # noqa: E731
    with served_by("gunicorn-tls", command, tmp_path, settings, context=client_context()) as run:
        lines = [json.loads(line) for line in run.request_log.read_text().splitlines()]
        port = run.port
    started, warned = lines
    assert started["message"] == "castslice starting"
    assert started["listening"] == [f"https://127.0.0.1:{port}"]
    assert started["backend"] == "nvidia"
    assert started["sharedResource"] == "nvidia.com/gpu.shared"
    assert warned["unknownSettings"] == [
        {"name": "CASTSLICE_BAKEND", "closest": "CASTSLICE_BACKEND"}
    ]
