"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager.

No kubelet and no scheduler: Pods are admitted and stored but stay Pending,
which is all an admission webhook needs to be tested against.
"""

from __future__ import annotations

import base64
import shutil
import ssl
import tempfile
import urllib.request
from pathlib import Path
from types import TracebackType

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
_START_TIMEOUT = 90.0
# Only what the suite needs: ServiceAccounts (the ServiceAccount admission plugin
# wants one per namespace), Deployments and their ReplicaSets, namespace deletion.
_CONTROLLERS = (
    "serviceaccount-controller",
    "deployment-controller",
    "replicaset-controller",
    "namespace-controller",
)


class LocalControlPlane:
    """`with LocalControlPlane(binaries) as plane:`, or `start()`, then `stop()` to clean up."""

    def __init__(self, binaries: KubeBinaries, workdir: Path | None = None) -> None:
        self.binaries = binaries
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
        # The bootstrap RBAC policy binds its roles to this exact user name.
        self._controller_manager = self.ca.issue("system:kube-controller-manager", client=True)
        self._processes: list[ManagedProcess] = []

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
            self._start_controller_manager()
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

    def _start(self, name: str, argv: list[str]) -> ManagedProcess:
        process = ManagedProcess(name, argv, self.logs)
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

    def _start_controller_manager(self) -> None:
        kubeconfig = self.workdir / "controller-manager.kubeconfig"
        pair = self._controller_manager
        self._write_kubeconfig(kubeconfig, "system:kube-controller-manager", pair)
        controller_manager = self._start(
            "kube-controller-manager",
            [
                str(self.binaries.controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--controllers={','.join(_CONTROLLERS)}",
                # Each controller acts as its own ServiceAccount with the bootstrap
                # RBAC roles, as in a kubeadm cluster.
                "--use-service-account-credentials=true",
                f"--root-ca-file={self.pki / 'ca.crt'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                # Nothing scrapes its metrics or health endpoints here.
                "--secure-port=0",
            ],
        )
        core = kubernetes.client.CoreV1Api(self.api_client())
        wait_until(
            lambda: _service_account_exists(core, "default", "default"),
            timeout=_START_TIMEOUT,
            what="kube-controller-manager to create the default ServiceAccount",
            interval=0.25,
            alive=controller_manager.check_running,
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


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return response.status == 200
    except OSError:  # refused, TLS not up yet, or an HTTP error status
        return False


def _service_account_exists(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        core.read_namespaced_service_account(name, namespace)
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True
