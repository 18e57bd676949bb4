"""The layer picture in docs/development.md, the import contract in pyproject.toml and the
tree of castslice/ say the same thing: a newcomer who reads the picture knows the rule
`make lint` enforces, and no module sits outside it."""

from __future__ import annotations

import fnmatch
import itertools
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
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


def test_the_backends_layers_are_their_contract_s() -> None:
    contract = contracts()["backend-roles"]
    assert contract["type"] == "layers"
    assert contract["containers"] == ["castslice.backends"]
    pictured = [" | ".join(names(layer)) for layer in picture()["backends"]]
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


def _layer_pairs() -> list[tuple[str, list[str], list[str]]]:
    """Every two adjacent layers of every layers contract: (container, upper, lower)."""
    pairs = []
    for contract in contracts().values():
        if contract["type"] != "layers":
            continue
        for container in contract["containers"]:
            layers = [names(layer) for layer in contract["layers"]]
            pairs += [(container, upper, lower) for upper, lower in itertools.pairwise(layers)]
    return pairs


def _rule_key(container: str, upper: list[str], lower: list[str]) -> str:
    return f"{container}: {' | '.join(upper)} / {' | '.join(lower)}"


def test_each_layer_stands_on_the_one_below_or_the_order_is_a_listed_rule() -> None:
    """The picture claims no order the code does not have: two adjacent layers are a real
    dependency (one imports the other) or a rule written down with its reason, never both."""
    graph = grimp.build_graph("castslice", cache_dir=None)
    rules = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["castslice"]["layer-rules"]

    def members(container: str, layer: list[str]) -> set[str]:
        prefixes = [f"{container}.{name}" for name in layer]
        return {m for m in graph.modules for p in prefixes if m == p or m.startswith(p + ".")}

    pairs = _layer_pairs()
    for container, upper, lower in pairs:
        above, below = members(container, upper), members(container, lower)
        assert above and below, f"{_rule_key(container, upper, lower)}: a layer with no module"
        imports = any(
            graph.direct_import_exists(importer=importer, imported=imported)
            for importer in above
            for imported in below
        )
        key = _rule_key(container, upper, lower)
        if imports:
            assert key not in rules, f"{key}: a real dependency listed as a rule"
        else:
            assert key in rules, f"{key}: neither imports the other, and no rule says why"
    assert set(rules) <= {_rule_key(*pair) for pair in pairs}, "a rule for no adjacent layers"


def _forbidden_to_the_webhook(module: str) -> bool:
    """Whether the `webhook-alone` contract forbids the webhook's process `module` (a
    forbidden package forbids what is in it; `*` stands for one name, as import-linter reads
    it)."""
    parts = module.split(".")
    return any(
        fnmatch.fnmatchcase(".".join(parts[: pattern.count(".") + 1]), pattern)
        for pattern in contracts()["webhook-alone"]["forbidden_modules"]
        if len(parts) > pattern.count(".")
    )


def test_the_webhook_process_loads_nothing_the_contract_keeps_from_it() -> None:
    # What a cold start pays for: the image's target module, imported as functions-framework
    # imports it.
    program = "import sys, main; print(*(m for m in sys.modules if m.startswith('castslice')))"
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = done.stdout.split()
    assert "castslice.decision.admission" in loaded
    assert [module for module in loaded if _forbidden_to_the_webhook(module)] == []


def test_an_import_of_a_tool_from_the_server_fails_the_contract(tmp_path: Path) -> None:
    shutil.copytree(PACKAGE, tmp_path / "castslice", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    linter = Path(sys.executable).parent / "lint-imports"

    def lint() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [linter, "--no-cache", "--no-logo", "--contract", "webhook-alone"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(tmp_path)},
        )

    kept = lint()
    assert kept.returncode == 0, kept.stdout + kept.stderr
    server = tmp_path / "castslice" / "serve" / "core.py"
    server.write_text(server.read_text() + "\nimport castslice.inspect.doctor  # noqa: E402\n")
    broken = lint()
    assert broken.returncode == 1
    assert "castslice.serve.core -> castslice.inspect.doctor" in broken.stdout
