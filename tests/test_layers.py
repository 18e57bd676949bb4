"""The layer picture in docs/development.md, the import contract in pyproject.toml and the
tree of castslice/ say the same thing: a newcomer who reads the picture knows the rule
`make lint` enforces, and no module sits outside it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "castslice"
_HEADING = re.compile(r"^castslice/(?P<folder>\w+/)?$")
_LAYER_LINE = re.compile(r"^  (?P<layer>\S.*)$")


def picture() -> dict[str, list[str]]:
    """The picture's layers, top first: under "" the top-level ones, under a folder's name
    that folder's."""
    text = (ROOT / "docs" / "development.md").read_text()
    block = text.split("## Layers", 1)[1].split("```", 2)[1]
    folders: dict[str, list[str]] = {}
    current = None
    for line in block.splitlines():
        if not line.strip():
            continue
        if match := _HEADING.match(line):
            current = (match["folder"] or "").rstrip("/")
            folders[current] = []
        elif (match := _LAYER_LINE.match(line)) and current is not None:
            folders[current].append(match["layer"].strip())
        else:
            pytest.fail(f"docs/development.md: a layer line the test cannot read: {line!r}")
    return folders


def contracts() -> dict[str, dict]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {contract["id"]: contract for contract in data["tool"]["importlinter"]["contracts"]}


def names(layer: str) -> list[str]:
    return [name.strip().rstrip("/") for name in layer.split("|")]


def test_the_folders_are_the_top_contract_s_layers_in_order() -> None:
    top = contracts()["layers"]
    assert top["containers"] == ["castslice"]
    assert picture()[""] == top["layers"]


@pytest.mark.parametrize(
    "folder", ["cli", "render", "serve", "extender", "decision", "contract", "settings"]
)
def test_each_folder_s_layers_are_its_contract_s(folder: str) -> None:
    contract = contracts()[folder]
    assert contract["type"] == "layers"
    assert contract["containers"] == [f"castslice.{folder}"]
    pictured = [" | ".join(names(layer)) for layer in picture()[folder]]
    assert pictured == contract["layers"]


def test_the_tools_that_read_a_cluster_are_pictured_apart_as_their_contract_says() -> None:
    contract = contracts()["inspect"]
    assert contract["type"] == "independence"
    (line,) = picture()["inspect"]
    assert {f"castslice.inspect.{name}" for name in names(line)} == set(contract["modules"])


def test_the_backends_in_the_picture_are_the_protected_packages_and_the_real_ones() -> None:
    pictured = {
        f"castslice.backends.{name}"
        for layer in picture()["backends"]
        for name in names(layer)
        if layer.endswith("/") or "/" in layer
    }
    packages = {
        f"castslice.backends.{path.parent.name}" for path in PACKAGE.glob("backends/*/__init__.py")
    }
    protected = contracts()["backends"]
    apart = contracts()["backends-apart"]
    assert protected["type"] == "protected"
    assert protected["allowed_importers"] == ["castslice.backends"]
    assert pictured == packages == set(protected["protected_modules"]) == set(apart["modules"])


def test_every_module_is_in_the_picture() -> None:
    """A module added to castslice/ without a place in the layers fails here, not in review."""
    folders = picture()
    top = {name for layer in folders[""] for name in names(layer)}
    placed = {
        (folder, name)
        for folder, layers in folders.items()
        for layer in layers
        for name in names(layer)
    }
    assert set(folders) - {""} <= top, "a folder pictured apart but not in the top layers"
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if len(parts) == 1:
            assert parts[0] in ("__init__", "__main__") or parts[0] in top, (
                f"{path}: a module outside the layers"
            )
            continue
        folder, module = parts[0], parts[1]
        assert folder in top, f"{path}: folder {folder}/ is not in the picture"
        if module == "__init__" and len(parts) == 2:
            continue
        assert (folder, module) in placed, f"{path}: {module} has no layer in {folder}/"
