"""Session fixtures: one control plane and one registered CastSlice for the whole suite.

Outside CI a missing tool skips the suite with what to install; with CI=true
it is a failure, so a CI machine without nginx or Go can never pass by skipping.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NoReturn, Protocol

import kubernetes.client
import pytest

from tests.helm import HelmUnavailable, helm_binary

from . import tools
from .castslice_server import CastSliceServer, StartServer
from .cluster import LocalControlPlane
from .kubectl import Kubectl
from .pods import create_namespace
from .registration import register_and_wait


# Anything that can show its logs when a test fails.
class _HasLogs(Protocol):
    def log_tails(self, lines: int = 20) -> dict[str, str]: ...


_live: list[_HasLogs] = []


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1")


def missing(error: tools.MissingTool) -> NoReturn:
    if in_ci():
        pytest.fail(f"CI=true and a tool is missing: {error}", pytrace=False)
    pytest.skip(f"end-to-end suite skipped: {error}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    target = tools.kubernetes_version()
    kept, too_new = [], []
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.e2e)
        needs = item.get_closest_marker("kubernetes")
        if needs and tuple(map(int, needs.args[0].split("."))) > target:
            too_new.append(item)
        else:
            kept.append(item)
    # Deselected, not skipped: the feature does not exist on that release at all.
    if too_new:
        config.hook.pytest_deselected(items=too_new)
        items[:] = kept


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kubernetes(version): needs that Kubernetes release or newer (e.g. '1.36'); "
        "deselected when CASTSLICE_E2E_KUBERNETES picks an older one",
    )
    config.addinivalue_line(
        "markers", "e2e: runs against a real kube-apiserver (tests/e2e; slow first build)"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed:
        # The API server's view and CastSlice's request log usually explain a failure.
        for component in _live:
            for name, tail in component.log_tails().items():
                report.sections.append((f"log: {name}", tail))
    return report


@pytest.fixture(scope="session")
def nginx() -> Path:
    try:
        return tools.nginx()
    except tools.MissingTool as error:
        missing(error)


@pytest.fixture(scope="session")
def kubectl() -> Path:
    try:
        return tools.kubectl()
    except tools.MissingTool as error:
        missing(error)


@pytest.fixture(scope="session")
def control_plane(nginx: Path, request: pytest.FixtureRequest) -> Iterator[LocalControlPlane]:
    # Asks for nginx first so that a missing tool stops the suite before anything starts.
    def announce(message: str) -> None:
        # Minutes of silence would look like a hang: say it past pytest's capture.
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():
            print(f"\n{message}", flush=True)

    try:
        binaries = tools.kube_binaries(on_build=announce)
    except tools.MissingTool as error:
        missing(error)
    with LocalControlPlane(binaries) as plane:
        _live.append(plane)
        yield plane
        _live.remove(plane)


@pytest.fixture(scope="session")
def api(control_plane: LocalControlPlane) -> kubernetes.client.ApiClient:
    return control_plane.api_client()


@pytest.fixture(scope="session")
def castslice(nginx: Path, api: kubernetes.client.ApiClient) -> Iterator[CastSliceServer]:
    """CastSlice with its default settings, registered for the whole session."""
    with CastSliceServer(nginx) as server:
        _live.append(server)
        register_and_wait(api, server)
        yield server
        _live.remove(server)


@pytest.fixture
def namespace(api: kubernetes.client.ApiClient, castslice: CastSliceServer) -> Iterator[str]:
    """A fresh namespace, ready for Pods (its default ServiceAccount exists), deleted after.

    With a scheduler running, Pods and workloads a test leaves behind would take
    the nodes of a later test.
    """
    name = create_namespace(api, f"e2e-{uuid.uuid4().hex[:8]}")
    yield name
    kubernetes.client.CoreV1Api(api).delete_namespace(name)


@pytest.fixture
def own_castslice(
    nginx: Path, api: kubernetes.client.ApiClient, castslice: CastSliceServer
) -> Iterator[StartServer]:
    """Start a separate CastSlice (own settings, free to stop) for one test.

    The registration is pointed back at the session's server afterwards, and
    the test only ends once the API server calls that one again.
    """
    yield from _separate_servers(nginx, api, castslice)


@pytest.fixture(scope="module")
def module_castslice(
    nginx: Path, api: kubernetes.client.ApiClient, castslice: CastSliceServer
) -> Iterator[StartServer]:
    """`own_castslice` for a whole test module: servers started once, shared by its tests."""
    yield from _separate_servers(nginx, api, castslice)


def _separate_servers(
    nginx: Path, api: kubernetes.client.ApiClient, session_server: CastSliceServer
) -> Iterator[StartServer]:
    started: list[CastSliceServer] = []

    def start(env: Mapping[str, str]) -> CastSliceServer:
        server = CastSliceServer(nginx, env)
        started.append(server)
        _live.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in started:
            _live.remove(server)
            server.close()
        register_and_wait(api, session_server)


@pytest.fixture(scope="session")
def helm() -> Path:
    """helm, built from its Go module on first use (tests/helm/build.sh)."""
    try:
        return helm_binary()
    except HelmUnavailable as error:
        missing(tools.MissingTool(str(error)))


@pytest.fixture(scope="session")
def kubectl_user(kubectl: Path, control_plane: LocalControlPlane) -> Kubectl:
    """kubectl with the cluster admin's kubeconfig, as a user of the cluster runs it."""
    return Kubectl(kubectl, control_plane.kubeconfig)
