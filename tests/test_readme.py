"""The README's examples, run as the README says, answer what the README shows; every
relative link in the README and docs/ leads somewhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.factories import JSON_HEADERS

README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCED = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*$", re.M)
_EXTERNAL = ("http://", "https://", "mailto:")


def test_curl_example_output_matches_the_readme(client) -> None:
    shown = re.search(r"decode-patch\.py\n```\n\n```\n(.*?)```", README, re.S).group(1)
    body = (ROOT / "examples" / "admission-review.json").read_bytes()
    answer = client.post("/?timeout=5s", content=body, headers=JSON_HEADERS)
    decoded = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "decode-patch.py")],
        input=answer.content,
        capture_output=True,
        check=True,
    )
    assert decoded.stdout.decode() == shown


def test_warning_example_is_what_users_see(client) -> None:
    shown = re.search(r"^Warning: (.*)$", README, re.M).group(1)
    review = (ROOT / "examples" / "admission-review.json").read_text()
    review = review.replace('"true",', '"true", "castops.io/slice-ratio": "1.5",', 1)
    answer = client.post("/", content=review, headers=JSON_HEADERS).json()
    assert answer["response"]["warnings"] == [shown]


def prose(markdown: str) -> str:
    """The text a reader sees as prose: no code blocks, code spans or comments."""
    return _CODE_SPAN.sub("", _COMMENT.sub("", _FENCED.sub("", markdown)))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(_FENCED.sub("", page.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in _LINK.findall(prose(page.read_text())):
        if target.startswith(_EXTERNAL):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {_shown(linked)}")
    return broken


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Without a server (Kubernetes 1.36+)", "without-a-server-kubernetes-136"),
        (
            "Cloud Run: log-based metrics, dashboard and alerts",
            "cloud-run-log-based-metrics-dashboard-and-alerts",
        ),
        ("Worked example: Knative or in the cluster", "worked-example-knative-or-in-the-cluster"),
        ("`resource`", "resource"),
    ],
)
def test_anchors_are_made_as_github_makes_them(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](missing.md) [no heading](#nowhere)\n")
    assert broken_links(page) == [
        "missing.md: no such file",
        "#nowhere: no heading #nowhere in page.md",
    ]


def test_the_readme_links_every_page_of_the_docs() -> None:
    linked = {target.partition("#")[0] for target in _LINK.findall(prose(README))}
    assert {f"docs/{page.name}" for page in PAGES[1:]} <= linked


def test_preview_example_prints_what_the_readme_shows() -> None:
    command, shown = re.search(
        r"## Check before you deploy.*?```sh\n(.*?)```\n\n```diff\n(.*?)```", README, re.S
    ).groups()
    environment, _, arguments = command.replace("\\\n", " ").partition("castslice preview")
    settings = dict(word.split("=", 1) for word in environment.split())
    printed = subprocess.run(
        [sys.executable, "-m", "castslice", "preview", *arguments.split()],
        cwd=ROOT,
        env={**os.environ, **settings},
        capture_output=True,
        text=True,
        check=True,
    )
    assert printed.stdout + printed.stderr == shown


# The Kubernetes the dra backend needs, said once for every page: consumable capacity
# (KEP-5075) is beta and on by default in 1.36, GA in 1.37; the DeviceTaintRule every dra
# installation needs (KEP-5055) is GA in 1.37 and a beta API behind DRADeviceTaintRules
# in 1.36.
DRA_KUBERNETES = "Kubernetes 1.37+ (1.36 with the `DRADeviceTaintRules` gate)"


def _row(page: Path, starts: str, contains: str) -> str:
    (row,) = [
        line
        for line in page.read_text().splitlines()
        if line.startswith(starts) and contains in line
    ]
    return row


def _dra_statements() -> dict[str, str]:
    backends = (ROOT / "docs" / "backends.md").read_text()
    section = backends.split("\n## `dra`\n", 1)[1].strip().split("\n\n")[0]
    return {
        "README.md (backends)": _row(ROOT / "README.md", "| Kubernetes", "| `dra`"),
        "docs/deploy.md (versions)": _row(
            ROOT / "docs" / "deploy.md", "| NVIDIA DRA driver", "`dra`"
        ),
        "infra/gpu-sharing/README.md": _row(
            ROOT / "infra" / "gpu-sharing" / "README.md", "| Kubernetes", "| `dra`"
        ),
        "docs/backends.md": section,
    }


@pytest.mark.parametrize("where", sorted(_dra_statements()))
def test_every_page_states_the_same_kubernetes_for_dra_with_its_device_taint_rule(
    where: str,
) -> None:
    statement = " ".join(_dra_statements()[where].split())
    assert DRA_KUBERNETES in statement, f"{where}: {statement}"
    assert set(re.findall(r"Kubernetes 1\.\d+\+", statement)) == {"Kubernetes 1.37+"}, where
    assert "DeviceTaintRule" in statement, f"{where} omits the DeviceTaintRule"


# Files whose comments send the reader to the docs (`docs/deploy.md#first-install`).
_POINTING = [
    ROOT / "Dockerfile",
    ROOT / "cloudbuild.yaml",
    ROOT / "charts" / "castslice" / "values.yaml",
    *sorted((ROOT / "infra").glob("*.tf")),
    *sorted((ROOT / "infra").glob("*.tfvars")),
]
_DOC_POINTER = re.compile(r"\b(docs/[a-z-]+\.md)(?:#([a-z0-9-]+))?")


@pytest.mark.parametrize("source", _POINTING, ids=_shown)
def test_every_docs_pointer_in_a_comment_leads_to_a_page_and_heading(source: Path) -> None:
    for page, anchor in _DOC_POINTER.findall(source.read_text()):
        assert (ROOT / page).exists(), f"{_shown(source)}: {page}"
        if anchor:
            assert anchor in anchors(ROOT / page), f"{_shown(source)}: {page}#{anchor}"


def test_the_tfvars_image_comment_points_where_the_build_command_is() -> None:
    """infra/example.tfvars once sent the reader to the README for `gcloud builds submit
    --tag`, which only docs/deploy.md shows."""
    comment = re.search(r"`gcloud builds submit --tag` \((.*?)\)", (ROOT / "infra" /
                        "example.tfvars").read_text())  # fmt: skip
    assert comment, "infra/example.tfvars no longer names the build command"
    ((page, anchor),) = _DOC_POINTER.findall(comment.group(1))
    assert "gcloud builds submit" in section(ROOT / page, anchor), f"{page}#{anchor}"
    assert "--tag=" in section(ROOT / page, anchor), f"{page}#{anchor}"


def section(page: Path, anchor: str) -> str:
    """The text under the heading of `anchor`, up to the next heading."""
    parts = re.split(r"^(#{1,6}[ \t]+.+?)[ \t]*$", page.read_text(), flags=re.M)
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        if slug(heading.lstrip("#")) == anchor:
            return body
    return ""


# What the ASGI server costs against the Flask one, said once for every place that says it.
ASGI_CPU = "about two thirds"


def test_every_statement_of_the_asgi_servers_cpu_agrees_with_the_measurement() -> None:
    performance = (ROOT / "docs" / "performance.md").read_text()
    measured = re.search(
        r"\(([\d.]+), ([\d.]+) and ([\d.]+) ms per review against ([\d.]+), ([\d.]+) and "
        r"([\d.]+) ms",
        " ".join(performance.split()),
    )
    assert measured, "docs/performance.md no longer gives the two servers' CPU per review"
    asgi, flask = (list(map(float, measured.groups()[i : i + 3])) for i in (0, 3))
    # "About two thirds": each body's ratio within a sixth of it.
    assert all(abs(a / f - 2 / 3) <= 1 / 6 for a, f in zip(asgi, flask, strict=True))
    for page in ("Dockerfile", "README.md", "docs/deploy.md", "docs/performance.md"):
        text = " ".join((ROOT / page).read_text().split())
        assert ASGI_CPU in text.lower(), page
        assert "a third to a half" not in text.lower(), page


def test_development_says_what_make_unit_does_first() -> None:
    """docs/development.md once said `make unit` only creates .venv; it also builds helm."""
    makefile = (ROOT / "Makefile").read_text()
    prerequisites = re.search(r"^unit: (.*)$", makefile, re.M)
    assert prerequisites, "the Makefile has no unit target"
    assert prerequisites.group(1).split() == ["$(VENV)/.installed", "helm"]
    development = " ".join((ROOT / "docs" / "development.md").read_text().split())
    said = development.split("`make unit` also", 1)
    assert len(said) == 2, "docs/development.md no longer says what `make unit` does first"
    assert said[1].split(".")[0].startswith(" builds helm for the chart tests")


def test_the_readme_is_a_front_page() -> None:
    """What CastSlice is, how to start, the annotations, the backends and the links: the
    rest is in docs/."""
    assert len(README.splitlines()) <= 300


def test_the_readme_names_every_backend_and_the_mig_layouts_setting() -> None:
    from castslice.backends import PLACERS as BACKENDS

    most_set = README.split("The ones most installations set:", 1)[1].split("\n\n", 1)[0]
    listed = re.search(r"`CASTSLICE_BACKEND` \(([^)]*)\)", most_set)
    assert listed is not None
    assert set(re.findall(r"`(\w+)`", listed.group(1))) == set(BACKENDS)
    (row,) = [line for line in README.splitlines() if "| `mig` " in line]
    for setting in ("CASTSLICE_MIG_GPU_MODELS", "CASTSLICE_MIG_STACK", "CASTSLICE_MIG_PROFILES"):
        assert setting in row, setting


def test_the_chart_values_are_named_as_configuration_md_says() -> None:
    """camelCase without the prefix; the mig backend's under `mig.`, the metrics' under
    `metrics.`: every setting of the chart is named so."""
    from castslice.settings.table import SETTINGS

    def camel(words: str) -> str:
        first, *rest = words.lower().split("_")
        return first + "".join(word.capitalize() for word in rest)

    text = (ROOT / "docs" / "configuration.md").read_text()
    assert "the `mig` backend's settings sit under `mig.`" in text
    for entry in SETTINGS:
        if entry.value is None or not entry.in_environment:
            continue
        name = entry.variable.removeprefix("CASTSLICE_")
        if name.startswith("MIG_"):
            assert entry.value == "mig." + camel(name.removeprefix("MIG_")), entry.variable
        elif name.startswith("METRICS"):
            assert entry.value in ("metrics.enabled", "metrics.port"), entry.variable
        else:
            assert entry.value == camel(name), entry.variable
