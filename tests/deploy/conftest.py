"""Fixtures for the deployment tests: the variants rendered by kustomize, once per session."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helm import HelmUnavailable, helm_binary

from .variants import copy_infra, render


def ci_or_skip(message: str) -> None:
    """Skip for `message`, except in CI (CI=true), where a missing tool must not pass as a skip."""
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)


def kubectl() -> str:
    """kubectl, whose built-in kustomize renders the variants. Missing, the rendering tests
    skip, except in CI (CI=true), where a missing tool must not pass as a skip."""
    path = shutil.which("kubectl")
    if path is None:
        message = "kubectl (with its built-in kustomize) is not installed"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def helm() -> Path:
    """helm, built from its Go module on first use (tests/helm/build.sh)."""
    try:
        return helm_binary()
    except HelmUnavailable as error:
        ci_or_skip(str(error))
        raise


@pytest.fixture(scope="session")
def infra_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of infra/ with sample castslice.env files, as a user would have it."""
    return copy_infra(tmp_path_factory.mktemp("deploy"))


@pytest.fixture(scope="session")
def kustomize(infra_copy: Path) -> Callable[[str], list[dict[str, Any]]]:
    """Build one variant of the sample infra/ copy with `kubectl kustomize`, once per variant."""
    built: dict[str, list[dict[str, Any]]] = {}

    def build(variant: str) -> list[dict[str, Any]]:
        if variant not in built:
            built[variant] = render(kubectl(), infra_copy, variant)
        return built[variant]

    return build
