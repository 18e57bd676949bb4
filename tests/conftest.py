from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from functions_framework.aio import create_asgi_app
from starlette.testclient import TestClient

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def make_client(monkeypatch: pytest.MonkeyPatch) -> Callable[..., TestClient]:
    """A test client of the deployed entry point, main.py's `mutate`, with the given env."""

    def build(**environment: str) -> TestClient:
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        app = create_asgi_app(target="mutate", source=str(ROOT / "main.py"))
        return TestClient(app, raise_server_exceptions=False)

    return build


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client()
