from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest
from functions_framework import _function_registry, create_app
from functions_framework.aio import create_asgi_app
from starlette.testclient import TestClient

from tests.served import TARGETS

ROOT = Path(__file__).resolve().parent.parent
MAIN = str(ROOT / "main.py")

# main.py's targets, one per functions-framework server; both serve the whole contract.
FACES = TARGETS


def face_client(face: str) -> httpx2.Client:
    """An HTTP client of functions-framework's own app for `face`, called in process."""
    if face == "flask":
        # The app `functions-framework --target=mutate` serves with gunicorn. A process
        # loads main.py once; here an ASGI app made before may have marked `mutate` as an
        # ASGI target (main.py's `--asgi` branch), which would make this one ASGI too.
        _function_registry.ASGI_FUNCTIONS.discard(FACES[face])
        app = create_app(target=FACES[face], source=MAIN)
        transport = httpx2.WSGITransport(app=app, raise_app_exceptions=False)
        return httpx2.Client(transport=transport, base_url="http://testserver")
    return TestClient(
        create_asgi_app(target=FACES[face], source=MAIN), raise_server_exceptions=False
    )


@pytest.fixture(params=sorted(FACES))
def face(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make_client(monkeypatch: pytest.MonkeyPatch, face: str) -> Callable[..., httpx2.Client]:
    """A test client of the deployed entry point, main.py's target for `face`, with the env."""

    def build(**environment: str) -> httpx2.Client:
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        return face_client(face)

    return build


@pytest.fixture
def client(make_client: Callable[..., httpx2.Client]) -> httpx2.Client:
    return make_client()
