"""A real Kubernetes control plane on 127.0.0.1, with fake nodes that run Pods.

etcd, kube-apiserver, kube-controller-manager (every controller a cluster runs
by default) and kube-scheduler, all of the pinned release, plus KWOK's
controller standing in for the kubelets: it keeps the fake nodes it manages
Ready and moves Pods bound to them to Running. Nodes are created through the
API (see nodes.py); until one exists, Pods are admitted and stay Pending.
"""

from __future__ import annotations

import base64
import os
import shutil
import ssl
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import kubernetes.client
import kubernetes.config
import yaml

from ..procs import ManagedProcess, free_port, wait_until
from .certs import CertificateAuthority, KeyPair, rsa_key_pair
from .tools import KubeBinaries

# What the API server's own certificate must name for in-cluster and local clients.
_APISERVER_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
_SERVICE_CIDR = "10.0.0.0/24"
# Addresses KWOK writes into the status of fake nodes and Pods; nothing listens there.
_POD_CIDR = "10.244.0.0/16"
_NODE_IP = "10.240.0.1"
_START_TIMEOUT = 90.0
# The nodes KWOK plays the kubelet for: nodes.py puts this label on every fake node,
# so a real node that ever joins is left to its own kubelet.
KWOK_NODE_LABEL = ("type", "kwok")


class LocalControlPlane:
    """`with LocalControlPlane(binaries) as plane:`, or `start()`, then `stop()` to clean up."""

    def __init__(
        self,
        binaries: KubeBinaries,
        workdir: Path | None = None,
        scheduler_config: Path | None = None,
        client_qps: int | None = None,
        scheduler_flags: Sequence[str] = (),
    ) -> None:
        """`scheduler_config`: a KubeSchedulerConfiguration (its profiles) for kube-scheduler,
        as a cluster admin ships it; without one the scheduler runs its default profile.
        `client_qps`: the API request rate the controller-manager and the scheduler may use
        (bursts of twice as many), instead of their defaults (20 and 50 a second), for
        clusters of thousands of Pods; it changes how fast they act, not what they do.
        `scheduler_flags`: more command-line flags for kube-scheduler."""
        self.binaries = binaries
        self.scheduler_flags = tuple(scheduler_flags)
        self.scheduler_config = scheduler_config
        self.client_qps = client_qps
        self._owns_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="castslice-kube-"))
        self.pki = self.workdir / "pki"
        self.logs = self.workdir / "logs"
        self.port = 0
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.ca = CertificateAuthority("castslice-e2e-cluster-ca")
        self._admin = self.ca.issue(
            "castslice-e2e-admin", organizations=("system:masters",), client=True
        )
        # The bootstrap RBAC policy binds its roles to these exact user names.
        self._controller_manager = self.ca.issue("system:kube-controller-manager", client=True)
        self._scheduler = self.ca.issue("system:kube-scheduler", client=True)
        # KWOK writes the status of nodes and Pods, leases and deletions: what a
        # kubelet does for its own node, here for every fake one.
        self._kwok = self.ca.issue(
            "kwok-controller", organizations=("system:masters",), client=True
        )
        self._processes: list[ManagedProcess] = []
        self.scheduler: ManagedProcess | None = None
        self.scheduler_url = ""

    @property
    def server_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def __enter__(self) -> LocalControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        self.pki.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        try:
            self._write_pki()
            etcd_url = self._start_etcd()
            self._start_apiserver(etcd_url)
            # Started together, then waited for: the controller manager, which sets up
            # every controller in turn, takes the longest (about 5 s).
            waits = [self._start_controller_manager(), self._start_scheduler(), self._start_kwok()]
            for wait in waits:
                wait()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        # Reverse order: nothing keeps talking to a component that is already gone.
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def api_client(self) -> kubernetes.client.ApiClient:
        """A client authenticated as a cluster admin (group system:masters)."""
        return kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))

    def log_tails(self, lines: int = 20) -> dict[str, str]:
        return {process.name: process.log_tail(lines) for process in self._processes}

    def _write_pki(self) -> None:
        (self.pki / "ca.crt").write_bytes(self.ca.cert_pem)
        self.ca.issue(
            "kube-apiserver", ip_addresses=("127.0.0.1", "10.0.0.1"), dns_names=_APISERVER_DNS
        ).write(self.pki, "apiserver")
        self._admin.write(self.pki, "admin")
        # The API server verifies service-account tokens with the public half.
        private, public = rsa_key_pair()
        (self.pki / "sa.key").touch(mode=0o600)
        (self.pki / "sa.key").write_bytes(private)
        (self.pki / "sa.pub").write_bytes(public)

    def _start(
        self, name: str, argv: list[str], env: dict[str, str] | None = None
    ) -> ManagedProcess:
        process = ManagedProcess(name, argv, self.logs, env=env)
        self._processes.append(process)
        process.start()
        return process

    def _start_etcd(self) -> str:
        client_port, peer_port = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        etcd = self._start(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=castslice-e2e",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=castslice-e2e={peer_url}",
                # Throw-away data: fsync would only slow every write down.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        wait_until(
            lambda: _http_ok(f"{client_url}/health"),
            timeout=_START_TIMEOUT,
            what="etcd to report healthy",
            alive=etcd.check_running,
        )
        return client_url

    def _start_apiserver(self, etcd_url: str) -> None:
        self.port = free_port()
        pki = self.pki
        apiserver = self._start(
            "kube-apiserver",
            [
                str(self.binaries.apiserver),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--service-account-issuer={self.server_url}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={_SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                # No kube-proxy or nodes: the `kubernetes` Service would point at a
                # loopback address, which Endpoints validation rejects.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
            ],
        )
        context = self._admin_tls_context()
        wait_until(
            lambda: _http_ok(f"{self.server_url}/readyz", context),
            timeout=_START_TIMEOUT,
            what="kube-apiserver /readyz",
            interval=0.25,
            alive=apiserver.check_running,
        )
        self._write_kubeconfig(self.kubeconfig, "castslice-e2e-admin", self._admin)

    def _start_controller_manager(self) -> Callable[[], None]:
        kubeconfig = self.workdir / "controller-manager.kubeconfig"
        self._write_kubeconfig(
            kubeconfig, "system:kube-controller-manager", self._controller_manager
        )
        controller_manager = self._start(
            "kube-controller-manager",
            [
                str(self.binaries.controller_manager),
                f"--kubeconfig={kubeconfig}",
                # Every controller that is on by default, as in any cluster: Jobs,
                # CronJobs, StatefulSets, DaemonSets, garbage collection, node lifecycle...
                "--controllers=*",
                # Each controller acts as its own ServiceAccount with the bootstrap
                # RBAC roles, as in a kubeadm cluster.
                "--use-service-account-credentials=true",
                f"--root-ca-file={self.pki / 'ca.crt'}",
                # The service-account token controller signs with the key the API server checks.
                f"--service-account-private-key-file={self.pki / 'sa.key'}",
                "--leader-elect=false",
                # KWOK renews its nodes' leases late when the machine is busy, and a
                # Running Pod its node lifecycle marks NotReady then stays NotReady for
                # good: KWOK only readies Pending Pods (kubernetes-sigs/kwok#1464). No
                # test here is about a node going away; none may fail because one seemed to.
                "--node-monitor-grace-period=10m",
                "--bind-address=127.0.0.1",
                # Nothing scrapes its metrics or health endpoints here.
                "--secure-port=0",
                *(
                    [f"--kube-api-qps={self.client_qps}", f"--kube-api-burst={2 * self.client_qps}"]
                    if self.client_qps
                    else []
                ),
            ],
        )
        core = kubernetes.client.CoreV1Api(self.api_client())
        return lambda: wait_until(
            lambda: _service_account_exists(core, "default", "default"),
            timeout=_START_TIMEOUT,
            what="kube-controller-manager to create the default ServiceAccount",
            interval=0.25,
            alive=controller_manager.check_running,
        )

    def _start_scheduler(self) -> Callable[[], None]:
        kubeconfig = self.workdir / "scheduler.kubeconfig"
        self._write_kubeconfig(kubeconfig, "system:kube-scheduler", self._scheduler)
        connection = [f"--kubeconfig={kubeconfig}", "--leader-elect=false"]
        if self.scheduler_config is not None or self.client_qps:
            # With --config the scheduler ignores --kubeconfig and --leader-elect: the file
            # must say both, so the shipped profiles get this cluster's connection added.
            connection = [f"--config={self._scheduler_config_file(kubeconfig)}"]
        return self._scheduler_process(
            "kube-scheduler", [*connection, *self.scheduler_flags], self.workdir / "scheduler"
        )

    def scheduler_metrics(self) -> str:
        """kube-scheduler's /metrics text (its self-signed certificate is not checked)."""
        with urllib.request.urlopen(
            f"{self.scheduler_url}/metrics", context=_unverified(), timeout=30
        ) as answer:
            text: str = answer.read().decode()
        return text

    def add_scheduler(
        self, name: str, user: str, groups: tuple[str, ...], config: dict[str, Any]
    ) -> ManagedProcess:
        """Another kube-scheduler of the same release on this API server, signed in as
        `user` (in `groups`), run with the KubeSchedulerConfiguration `config` as it is
        (leader election included) plus this cluster's connection; returned once ready."""
        pair = self.ca.issue(user, organizations=groups, client=True)
        kubeconfig = self.workdir / f"{name}.kubeconfig"
        self._write_kubeconfig(kubeconfig, user, pair)
        document = {**config, "clientConnection": {"kubeconfig": str(kubeconfig)}}
        path = self.workdir / f"{name}-config.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        wait = self._scheduler_process(name, [f"--config={path}"], self.workdir / name)
        wait()
        return self._processes[-1]

    def retire(self, process: ManagedProcess) -> None:
        """Stop a process added to the running plane (add_scheduler) before the plane stops."""
        process.stop()
        self._processes.remove(process)

    def _scheduler_process(
        self, name: str, connection: list[str], cert_dir: Path
    ) -> Callable[[], None]:
        port = free_port()
        scheduler = self._start(
            name,
            [
                str(self.binaries.scheduler),
                *connection,
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                # Its self-signed serving certificate, instead of /var/run/kubernetes.
                f"--cert-dir={cert_dir}",
                # Bound to loopback: the benchmarks read its scheduling latencies.
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            ],
        )
        if name == "kube-scheduler":
            self.scheduler = scheduler
            self.scheduler_url = f"https://127.0.0.1:{port}"
        # Ready once its informers have synced: from then on every Pending Pod is tried.
        # Health paths need no credentials, and its certificate is its own self-signed one.
        insecure = _unverified()
        base = f"https://127.0.0.1:{port}"
        return lambda: wait_until(
            # Older releases have no /readyz (404): their /healthz is the best there is.
            lambda: (
                _http_ok(f"{base}/readyz", insecure)
                or (
                    _http_status(f"{base}/readyz", insecure) == 404
                    and _http_ok(f"{base}/healthz", insecure)
                )
            ),
            timeout=_START_TIMEOUT,
            what=f"{name} /readyz",
            interval=0.25,
            alive=scheduler.check_running,
        )

    def _scheduler_config_file(self, kubeconfig: Path) -> Path:
        document = (
            yaml.safe_load(self.scheduler_config.read_text())
            if self.scheduler_config is not None
            else {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
            }
        )
        document["clientConnection"] = {"kubeconfig": str(kubeconfig)}
        if self.client_qps:
            document["clientConnection"] |= {"qps": self.client_qps, "burst": 2 * self.client_qps}
        document["leaderElection"] = {"leaderElect": False}
        path = self.workdir / "scheduler-config.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    def _start_kwok(self) -> Callable[[], None]:
        kubeconfig = self.workdir / "kwok.kubeconfig"
        self._write_kubeconfig(kubeconfig, "kwok-controller", self._kwok)
        port = free_port()
        key, value = KWOK_NODE_LABEL
        kwok = self._start(
            "kwok",
            [
                str(self.binaries.kwok),
                f"--kubeconfig={kubeconfig}",
                # The release's default stages (what kwokctl uses): nodes turn Ready and
                # keep their lease; bound Pods run, Job Pods complete, deleted Pods go.
                f"--config={self.binaries.kwok_stages}",
                f"--manage-nodes-with-label-selector={key}={value}",
                f"--cidr={_POD_CIDR}",
                f"--node-ip={_NODE_IP}",
                # Health only, on loopback; it answers once the controllers have started.
                f"--server-address=127.0.0.1:{port}",
                # At INFO it logs every status it writes; problems are what a log tail needs.
                "--v=WARN",
            ],
            # Its work directory would otherwise be ~/.kwok, whose kwok.yaml it reads first.
            env={**os.environ, "KWOK_WORKDIR": str(self.workdir / "kwok")},
        )
        return lambda: wait_until(
            lambda: _http_ok(f"http://127.0.0.1:{port}/healthz"),
            timeout=_START_TIMEOUT,
            what="KWOK's controller /healthz",
            interval=0.25,
            alive=kwok.check_running,
        )

    def _admin_tls_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return context

    def _write_kubeconfig(self, path: Path, user: str, pair: KeyPair) -> None:
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "castslice-e2e",
                    "cluster": {
                        "server": self.server_url,
                        "certificate-authority-data": _b64(self.ca.cert_pem),
                    },
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": _b64(pair.cert_pem),
                        "client-key-data": _b64(pair.key_pem),
                    },
                }
            ],
            "contexts": [
                {"name": "castslice-e2e", "context": {"cluster": "castslice-e2e", "user": user}}
            ],
            "current-context": "castslice-e2e",
        }
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(document, sort_keys=False))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unverified() -> ssl.SSLContext:
    """A TLS context for a process's own self-signed serving certificate."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return response.status == 200
    except OSError:  # refused, TLS not up yet, or an HTTP error status
        return False


def _http_status(url: str, context: ssl.SSLContext | None = None) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def _service_account_exists(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        core.read_namespaced_service_account(name, namespace)
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True
