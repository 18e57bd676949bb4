"""Reading the tables of the project's Markdown documents, for the tests that hold them true."""

from __future__ import annotations

from pathlib import Path


def markdown_table(path: Path, header: str) -> tuple[list[str], list[list[str]]]:
    """The header cells and the rows of the table in `path` whose header line starts with
    `header`."""
    lines = path.read_text().splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return [cell.strip() for cell in lines[start].strip("|").split("|")], rows
