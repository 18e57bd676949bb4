from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import functions_framework
import pytest
from flask.testing import FlaskClient

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def make_client(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FlaskClient]:
    """A test client of the deployed entry point, main.py's `mutate`, with the given env."""

    def build(**environment: str) -> FlaskClient:
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        app = functions_framework.create_app(target="mutate", source=str(ROOT / "main.py"))
        return app.test_client()

    return build


@pytest.fixture
def client(make_client: Callable[..., FlaskClient]) -> FlaskClient:
    return make_client()
