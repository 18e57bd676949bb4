"""gunicorn configuration for serving CastSlice over TLS inside a cluster.

    gunicorn --config python:castslice.serve.tls

On Cloud Run and Knative the platform terminates TLS and the container runs
`functions-framework --target=mutate_asgi`, whose command line has no TLS options. In a cluster
the API server connects to the Pod directly, so the Pod terminates TLS itself.
This module runs the same functions-framework ASGI app on the same worker
(gunicorn running uvicorn) with the certificate cert-manager keeps in a Secret.

cert-manager renews that certificate before it expires and the kubelet swaps the
mounted files (a symlink flip). uvicorn builds its SSLContext once; the context
given to it here asks, on every TLS handshake, for the context of the current
files (cached, rebuilt when they change) and hands the new connection to it, so
the next connection presents the renewed certificate with no restart.

gunicorn reads every module-level name that matches one of its settings; the
helpers are private so that only the settings below are picked up. Command-line
flags (`--bind`, `--certfile`, `--keyfile`) override them.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uvicorn import Config as UvicornConfig
from uvicorn_worker import UvicornWorker

from castslice.environment import load_config as _load_config
from castslice.serve.start import announce as _announce

# --- gunicorn settings -------------------------------------------------------

# The same app `functions-framework --target=mutate_asgi --source=main.py` serves.
wsgi_app = "functions_framework.aio:create_asgi_app(target='mutate_asgi', source='main.py')"
# Loaded in the arbiter, then one worker forked, as functions-framework does: a bad
# setting stops gunicorn at start with its message, and the metrics server
# (castslice/serve/metrics.py) starts in the worker right after the fork.
preload_app = True
bind = ["0.0.0.0:8443"]
worker_class = "castslice.serve.tls.TLSWorker"
# One worker answering on an event loop; a Pod scales by replicas. The Prometheus counts
# live in the worker's memory, so CASTSLICE_METRICS=true stops gunicorn if there are more.
workers = 1
# The API server gives the webhook 5 s; a request still running after 30 s is stuck.
timeout = 30
graceful_timeout = 20
# Longer than the API server keeps an idle connection open (90 s): the server never closes
# a connection the API server may be sending its next review on, and a pause between
# reviews costs no new TLS handshake.
keepalive = 120
# Where the Deployment mounts the cert-manager Secret (keys tls.crt and tls.key).
certfile = "/etc/castslice/tls/tls.crt"
keyfile = "/etc/castslice/tls/tls.key"
# Nothing in a Pod uses gunicorn's control socket, and the root filesystem is read-only.
control_socket_disable = True
loglevel = "info"


def when_ready(server: Any) -> None:
    """gunicorn's hook once its sockets are bound (the app, preloaded, read the settings)."""
    # Each listener's str() is its URL (gunicorn/sock.py), https with a certificate.
    _announce(_load_config(os.environ), os.environ, [str(socket) for socket in server.LISTENERS])


MINIMUM_TLS_VERSION = ssl.TLSVersion.TLSv1_2

_log = logging.getLogger("gunicorn.error")

ContextFactory = Callable[[], ssl.SSLContext]
# uvicorn's Config takes either for its certificate and key files.
FilePath = str | os.PathLike[str]


@dataclass(frozen=True)
class _Stamp:
    """What identifies one version of a file: a replaced or rewritten file gets a new stamp."""

    device: int
    inode: int
    size: int
    modified_ns: int

    @classmethod
    def of(cls, path: FilePath) -> _Stamp:
        # stat() follows symlinks, so the kubelet's flip of `..data` shows as a new inode.
        status = os.stat(path)
        return cls(status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


def _stamps(certfile: FilePath | None, keyfile: FilePath | None) -> tuple[_Stamp, ...] | None:
    """The stamps of the certificate and key files, or None while one cannot be read."""
    try:
        return tuple(_Stamp.of(path) for path in (certfile, keyfile) if path)
    except OSError:
        return None


class ReloadingContext:
    """Hands out an SSLContext for the current certificate files; safe to share between threads.

    The context is rebuilt only when the files' stamps change. A pair that cannot
    be loaded (cert and key from different versions, a half-written file) is not
    fatal: the last good context keeps serving and the load is retried once the
    files change again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._loaded: tuple[_Stamp, ...] | None = None
        self._rejected: tuple[_Stamp, ...] | None = None

    def get(
        self, certfile: FilePath | None, keyfile: FilePath | None, factory: ContextFactory
    ) -> ssl.SSLContext:
        with self._lock:
            stamps = _stamps(certfile, keyfile)
            if self._context is not None and stamps in (None, self._loaded, self._rejected):
                return self._context
            try:
                context = harden(factory())
            except (OSError, ssl.SSLError) as error:
                if self._context is None:
                    raise
                self._rejected = stamps
                _log.warning(
                    "TLS certificate not reloaded, still serving the previous one: %s", error
                )
                return self._context
            if self._context is not None:
                _log.info("TLS certificate reloaded from %s", certfile)
            self._context, self._loaded, self._rejected = context, stamps, None
            return context


def harden(context: ssl.SSLContext) -> ssl.SSLContext:
    """Refuse anything older than TLS 1.2 (the API server speaks 1.2 and 1.3)."""
    context.minimum_version = max(context.minimum_version, MINIMUM_TLS_VERSION)
    return context


_contexts = ReloadingContext()


class TLSWorker(UvicornWorker):
    """functions-framework's ASGI worker, serving TLS from the current certificate files."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.config.ssl_context_factory = _following_context


def _following_context(config: UvicornConfig, default_factory: ContextFactory) -> ssl.SSLContext:
    """The listening socket's context: each handshake moves to the current files' context."""

    def current() -> ssl.SSLContext:
        return _contexts.get(config.ssl_certfile, config.ssl_keyfile, default_factory)

    def follow(connection: ssl.SSLObject, _server_name: str | None, used: ssl.SSLContext) -> None:
        renewed = current()
        if renewed is not used:
            connection.context = renewed

    listening = current()
    # Called for every ClientHello, with or without a server name (the API server sends
    # none when it calls an IP address).
    listening.sni_callback = follow
    return listening
