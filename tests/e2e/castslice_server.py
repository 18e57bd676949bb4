"""CastSlice served as in production: functions-framework (gunicorn) behind nginx TLS.

Cloud Run terminates TLS in its front end and forwards plain HTTP to the
container; here nginx plays that front end on 127.0.0.1 with a certificate
from a throw-away CA, which the webhook registration carries as its caBundle.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import sys
import tempfile
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from ..procs import HarnessError, ManagedProcess, free_port, wait_until
from ..served import IMAGE_TARGET
from .certs import CertificateAuthority
from .tools import REPO_ROOT

LogRecord = dict[str, Any]

_START_TIMEOUT = 60.0
_NGINX_CONF = """\
daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 256; }}
http {{
    access_log {dir}/logs/nginx-access.log;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    # Above CastSlice's own 7 MiB limit, so the function answers with its 413.
    client_max_body_size 8m;
    # Like Cloud Run's front end, nginx keeps its connections to the function open. It
    # lets an idle one go after 1 s, before gunicorn would (2 s): never a request sent
    # on a connection the function is closing.
    upstream function {{
        server 127.0.0.1:{http_port};
        keepalive 16;
        keepalive_timeout 1s;
    }}
    server {{
        # HTTP/2 when the client offers it, as the API server's does.
        listen 127.0.0.1:{tls_port} ssl http2;
        ssl_certificate {dir}/pki/serving.crt;
        ssl_certificate_key {dir}/pki/serving.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {{
            proxy_pass http://function;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-Proto https;
            proxy_set_header X-Forwarded-For $remote_addr;
        }}
    }}
}}
"""


class CastSliceServer:
    """One CastSlice instance with its own certificate, ports and request log."""

    def __init__(
        self,
        nginx: Path,
        env: Mapping[str, str] | None = None,
        *,
        source_dir: Path = REPO_ROOT,
        python: str = sys.executable,
        program: Sequence[str] | None = None,
        log_through_pipe: bool = False,
        target: str = IMAGE_TARGET,
    ) -> None:
        """`env` holds the CASTSLICE_* settings; none are inherited from this process.

        `program` serves something else behind the same front end (the benchmark's
        reference webhook): it listens on 127.0.0.1:$PORT in plain HTTP and answers
        `GET /` with `{"status": "ok"}`, as CastSlice does.

        `log_through_pipe` gives the function a pipe for stdout, as in production,
        copied to the request log a moment later (the benchmark's latency).

        `target` is main.py's target functions-framework serves: the image's (the ASGI
        server) unless told otherwise.
        """
        self.nginx = nginx
        self.settings = dict(env or {})
        self.program = list(program) if program is not None else None
        self.log_through_pipe = log_through_pipe
        self.target = target
        self.http_port = 0
        self.source_dir = source_dir
        self.python = python
        self.workdir = Path(tempfile.mkdtemp(prefix="castslice-server-"))
        self.port = 0
        self._ca = CertificateAuthority("castslice-e2e-webhook-ca")
        self._function: ManagedProcess | None = None
        self._front: ManagedProcess | None = None

    @property
    def ca_pem(self) -> bytes:
        """The CA to put in the webhook's caBundle."""
        return self._ca.cert_pem

    def url(self, path: str = "") -> str:
        """The https URL the API server calls, with an optional path (the token)."""
        return f"https://127.0.0.1:{self.port}/{path}"

    def __enter__(self) -> CastSliceServer:
        try:
            self.start()
        except BaseException:
            self.close()  # __exit__ does not run when __enter__ fails
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> None:
        for sub in ("pki", "logs", "tmp"):
            (self.workdir / sub).mkdir(exist_ok=True)
        # nginx workers drop to an unprivileged user when started as root and
        # must still reach their temp directories.
        for directory in (self.workdir, self.workdir / "tmp"):
            directory.chmod(0o755)
        self._ca.issue("127.0.0.1", ip_addresses=("127.0.0.1",)).write(
            self.workdir / "pki", "serving"
        )
        try:
            http_port = self._start_function()
            self._start_front(http_port)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop both processes; the request log stays readable until `close()`."""
        for process in (self._front, self._function):
            if process is not None:
                process.stop()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def stop_function(self) -> None:
        """Stop the function behind the front end: nginx answers its own 502 page."""
        self._require(self._function).stop()

    def kill_function(self) -> None:
        """SIGKILL gunicorn, master and worker at once: a crash, with requests in flight."""
        function = self._require(self._function)
        os.killpg(function.pid, signal.SIGKILL)
        function.stop()  # reaps it

    def restart_function(self) -> None:
        """Start the function again on its old port, as a restarted container would be."""
        self._run_function(self._require(self._function))

    def pause(self) -> None:
        """Freeze the function's workers: nginx still accepts, but no answer comes back."""
        self._require(self._function).pause_workers()

    def resume(self) -> None:
        self._require(self._function).resume_workers()

    def log_records(self) -> list[LogRecord]:
        """The JSON lines CastSlice wrote on stdout so far, one per review or rejection."""
        path = self._require(self._function).stdout_path
        records = []
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # not one of CastSlice's structured lines
            if isinstance(record, dict):
                records.append(record)
        return records

    def reviews_of(self, namespace: str, pod: str) -> list[LogRecord]:
        """The review log lines of `pod` (its name, or generateName for controllers),
        complete up to now (see `settled_log_records`)."""
        return [
            record
            for record in self.settled_log_records()
            if record.get("namespace") == namespace and record.get("pod") == pod
        ]

    def settled_log_records(self) -> list[LogRecord]:
        """Every line of the requests answered so far.

        CastSlice writes its lines in order but in batches, a little after the
        answer. A marker review sent now is logged after everything before it,
        so once its line is there, so are all the others.
        """
        function = self._require(self._function)
        if not function.running():
            return self.log_records()  # a stopped server wrote everything at exit
        marker = f"log-barrier-{uuid.uuid4()}"
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": marker, "operation": "DELETE", "object": None},
        }
        request = urllib.request.Request(
            self.url(self.settings.get("CASTSLICE_PATH_TOKEN", "")),
            data=json.dumps(review).encode(),
            headers={"Content-Type": "application/json"},
        )
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        with urllib.request.urlopen(request, context=context, timeout=10) as reply:
            reply.read()
        self.wait_for_log(lambda record: record.get("uid") == marker, what="the log barrier")
        return self.log_records()

    def wait_for_log(
        self, match: Callable[[LogRecord], bool], *, what: str, timeout: float = 10.0
    ) -> LogRecord:
        def find() -> LogRecord | None:
            return next((record for record in self.log_records() if match(record)), None)

        return wait_until(find, timeout=timeout, what=what)

    def log_tails(self, lines: int = 20) -> dict[str, str]:
        tails = {}
        for process in (self._function, self._front):
            if process is not None:
                tails[process.name] = process.log_tail(lines)
        if self._function is not None and self._function.stdout_path.exists():
            text = self._function.stdout_path.read_text(errors="replace")
            tails["castslice request log"] = "\n".join(text.splitlines()[-lines:])
        return tails

    def _start_function(self) -> int:
        http_port = self.http_port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("CASTSLICE_")}
        env.update(self.settings)
        env["PYTHONUNBUFFERED"] = "1"
        env["PORT"] = str(http_port)
        function = ManagedProcess(
            "castslice",
            self.program
            or [
                self.python,
                "-m",
                "functions_framework",
                f"--target={self.target}",
                "--source=main.py",
                "--host=127.0.0.1",
                f"--port={http_port}",
            ],
            self.workdir / "logs",
            env=env,
            cwd=self.source_dir,
            separate_stdout=True,
            stdout_through_pipe=self.log_through_pipe,
            # gunicorn's master stops its workers on SIGTERM.
            death_signal=signal.SIGTERM,
        )
        self._function = function
        self._run_function(function)
        return http_port

    def _run_function(self, function: ManagedProcess) -> None:
        function.start()
        wait_until(
            lambda: _get_ok(f"http://127.0.0.1:{self.http_port}/"),
            timeout=_START_TIMEOUT,
            what="functions-framework to serve CastSlice",
            alive=function.check_running,
        )

    def _start_front(self, http_port: int) -> None:
        self.port = free_port()
        conf = self.workdir / "nginx.conf"
        conf.write_text(
            _NGINX_CONF.format(dir=self.workdir, tls_port=self.port, http_port=http_port)
        )
        front = ManagedProcess(
            "nginx",
            # -e: the error log before the config is read, instead of /var/log/nginx.
            [str(self.nginx), "-p", str(self.workdir), "-c", str(conf), "-e", "stderr"],
            self.workdir / "logs",
            # nginx's master stops its workers on SIGTERM; killed, it would orphan them.
            death_signal=signal.SIGTERM,
        )
        self._front = front
        front.start()
        context = ssl.create_default_context(cadata=self.ca_pem.decode("ascii"))
        wait_until(
            lambda: _get_ok(self.url(), context),
            timeout=_START_TIMEOUT,
            what="nginx to serve CastSlice over TLS",
            alive=front.check_running,
        )

    @staticmethod
    def _require(process: ManagedProcess | None) -> ManagedProcess:
        if process is None:
            raise HarnessError("the CastSlice server was never started")
        return process


def _get_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return response.status == 200 and json.load(response).get("status") == "ok"
    except (OSError, ValueError):
        return False


# What the `own_castslice` fixture hands a test: start a server with these settings.
StartServer = Callable[[Mapping[str, str]], CastSliceServer]
