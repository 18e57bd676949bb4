"""Kubernetes manifests as users keep them: YAML or JSON files, directories, stdin.

Everything that can be wrong with the input becomes a ManifestError naming the
file, the document and, for syntax errors, the line; never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

import yaml

STDIN = "-"
SUFFIXES = (".yaml", ".yml", ".json")
MAX_FILE_BYTES = 10 * 1024 * 1024
# YAML aliases can make a small file expand into billions of values.
MAX_VALUES = 1_000_000
# Deeper than any real object, shallow enough for the recursive YAML writer.
MAX_DEPTH = 100


class ManifestError(ValueError):
    """Input that is not a readable manifest; the message names the file and the document."""


class Document(NamedTuple):
    """One document of a file: an object, or a List of them."""

    source: str
    # 1-based, counting every document of the file, empty ones too.
    number: int
    content: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.source}: document {self.number}"


# libyaml overflows the C stack (a crash, not an error) on flow collections nested some
# 25,000 deep; a file with fewer openings than this cannot nest that deep.
_MAX_FLOW_OPENINGS_FOR_LIBYAML = 5000
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


def _without_timestamps(loader: type[yaml.SafeLoader]) -> type[yaml.SafeLoader]:
    """`loader` whose timestamps stay strings, as the API server reads them."""
    resolvers = {
        first: [(tag, regexp) for tag, regexp in entries if tag != _TIMESTAMP]
        for first, entries in loader.yaml_implicit_resolvers.items()
    }
    return type(loader.__name__, (loader,), {"yaml_implicit_resolvers": resolvers})


_PythonLoader = _without_timestamps(yaml.SafeLoader)
# libyaml, when PyYAML was built with it, parses several times faster.
_FastLoader = _without_timestamps(getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def read_documents(paths: Sequence[str], stdin: IO[bytes]) -> list[Document]:
    """Every non-empty document of `paths` (files, directories, `-` for stdin), in order."""
    documents: list[Document] = []
    for source in _sources(paths):
        data = _read(source, stdin)
        documents += parse(source if source != STDIN else "<stdin>", data, _is_json(source, data))
    return documents


def objects(document: Document) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, object) for the document's object, or for each item of a List."""
    content = document.content
    if not is_list(content):
        yield document.where, content
        return
    items = content.get("items")
    if items is None:
        return
    if not isinstance(items, list):
        raise ManifestError(f"{document.where}: items is {_a(items)}, not a list of objects")
    for index, item in enumerate(items):
        where = f"{document.where}, items[{index}]"
        _check_object(where, item)
        yield where, item


def parse(source: str, data: bytes, as_json: bool = False) -> list[Document]:
    """The documents of one file's bytes; `source` names it in errors."""
    if b"\x00" in data:
        raise ManifestError(f"{source}: binary data, not a YAML or JSON manifest")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ManifestError(
            f"{source}: not UTF-8 text (byte {error.start}); is it a binary file?"
        ) from None
    loaded = _load_json(source, text) if as_json else _load_yaml(source, text)
    documents = []
    for number, content in loaded:
        if content is None:
            continue
        document = Document(source, number, content)
        _check_object(document.where, content)
        _check_size(document.where, content)
        documents.append(document)
    return documents


def _sources(paths: Sequence[str]) -> Iterator[str]:
    for path in paths:
        if path == STDIN:
            yield path
            continue
        directory = Path(path)
        if not directory.is_dir():
            yield path
            continue
        found = sorted(
            str(entry)
            for entry in directory.iterdir()
            if entry.suffix.lower() in SUFFIXES and entry.is_file()
        )
        if not found:
            raise ManifestError(f"{path}: no {', '.join('*' + s for s in SUFFIXES)} files in it")
        yield from found


def _read(source: str, stdin: IO[bytes]) -> bytes:
    name = "<stdin>" if source == STDIN else source
    try:
        if source == STDIN:
            data = stdin.read(MAX_FILE_BYTES + 1)
        else:
            with open(source, "rb") as stream:
                data = stream.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ManifestError(f"{name}: cannot read it: {error.strerror or error}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ManifestError(
            f"{name}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB; "
            "split it, or check that it is the manifest you meant"
        )
    return data


def _is_json(source: str, data: bytes) -> bool:
    if source == STDIN:
        return data.lstrip()[:1] == b"{"
    return source.lower().endswith(".json")


def _load_yaml(source: str, text: str) -> Iterator[tuple[int, Any]]:
    number = 0
    try:
        openings = text.count("[") + text.count("{")
        loader = _FastLoader if openings < _MAX_FLOW_OPENINGS_FOR_LIBYAML else _PythonLoader
        for number, content in enumerate(yaml.load_all(text, Loader=loader), start=1):
            yield number, content
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = f", line {mark.line + 1}" if mark is not None else ""
        problem = "; ".join(part for part in (error.context, error.problem) if part)
        raise ManifestError(
            f"{source}: document {number + 1}{line}: invalid YAML: {problem}"
        ) from None
    except yaml.YAMLError as error:
        raise ManifestError(f"{source}: document {number + 1}: invalid YAML: {error}") from None
    except RecursionError:
        raise ManifestError(
            f"{source}: document {number + 1}: nested more than {MAX_DEPTH} levels deep"
        ) from None


def _load_json(source: str, text: str) -> Iterator[tuple[int, Any]]:
    try:
        yield 1, json.loads(text)
    except json.JSONDecodeError as error:
        raise ManifestError(
            f"{source}: line {error.lineno}, column {error.colno}: invalid JSON: {error.msg}"
        ) from None
    except RecursionError:
        raise ManifestError(f"{source}: nested more than {MAX_DEPTH} levels deep") from None


def _check_object(where: str, content: Any) -> None:
    if not isinstance(content, dict):
        raise ManifestError(
            f"{where} is {_a(content)}, "
            "not a Kubernetes object (a mapping with apiVersion and kind)"
        )
    missing = [key for key in ("apiVersion", "kind") if not isinstance(content.get(key), str)]
    if missing:
        raise ManifestError(f"{where}: not a Kubernetes object, {' and '.join(missing)} not set")


def _check_size(where: str, content: Any) -> None:
    # With a stack, not recursion: this is what guards the recursive code after it.
    pending, seen = [(content, 1)], 0
    while pending:
        value, depth = pending.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise ManifestError(
                f"{where}: expands to more than {MAX_VALUES} values (YAML aliases?)"
            )
        if depth > MAX_DEPTH:
            raise ManifestError(f"{where}: nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, dict):
            pending += ((child, depth + 1) for child in value.values())
        elif isinstance(value, list):
            pending += ((child, depth + 1) for child in value)


def is_list(content: dict[str, Any]) -> bool:
    """Whether `content` holds objects in `items` rather than being one."""
    # `kind: List`, and what `kubectl get -o yaml` writes for several objects (PodList…).
    kind = content.get("kind", "")
    return kind == "List" or (kind.endswith("List") and "items" in content)


def _a(value: Any) -> str:
    names = {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "empty",
    }
    return names.get(type(value), f"a {type(value).__name__}")
