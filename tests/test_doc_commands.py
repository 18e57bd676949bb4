"""The shell blocks of the docs run as written, from the directory the docs leave the reader in.

Every ```sh block of README.md, docs/*.md and infra/**/README.md is read as a
list of commands. The commands that can run on this machine without a cloud
account, a cluster or a server (castslice preview/webhook/policy, cd, cp,
export, printf, the editor...) run in a copy of the repository, in order,
until the first one that cannot: what that one needs is the block's reason
for stopping there. A block none of whose commands can run is listed with
that reason instead (`python -m tests.test_doc_commands` prints the list).

Where the reader is: each heading starts at the repository root (every section
of the docs says where to begin), and a `cd` in a block moves the reader for
the blocks after it. A docs author can say more with a comment on the line
before a block:

    <!-- docs-test: cwd infra/knative -->   the block runs from there
    <!-- docs-test: skip REASON -->           the block is not run, for REASON

The reader has followed the Knative variant's setup (castslice.env and
policy.yaml in infra/knative, copied from their examples) and keeps an
enrolment policy in policy.yaml at the repository root, the name the docs give it.
`$EDITOR` leaves files as they are, except that it writes an enrolment policy
into a policy.yaml that does not exist yet (the docs say "the rules above").
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

from tests.helm import HelmUnavailable, helm_binary

ROOT = Path(__file__).resolve().parent.parent
SHELLS = ("sh", "bash", "shell")
_FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^`\s]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<kind>cwd|skip)\s+(?P<value>.+?)\s*-->\s*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_TIMEOUT = 60
# Shell compounds run whole or not at all.
_OPENS = ("for", "while", "until", "if")
_CLOSES = ("done", "fi")

# What a command needs that this machine does not give a test: by its program, and for
# some programs by their first argument. A program missing here is not run either, and
# the test that lists the blocks names it, so a new command gets a rule or a marker.
NEEDS = {
    "gcloud": "a Google Cloud account (gcloud)",
    "terraform": "Google Cloud credentials and Terraform's providers",
    "docker": "a Docker daemon and a registry",
    "curl": "a running server",
    "make": "the development workflow (docs/development.md), which CI runs itself",
    ".venv/bin/python": "the development workflow (docs/development.md), which CI runs itself",
    "eval": "what another command prints (terraform output, against the deployed service)",
}
NEEDS_BY_SUBCOMMAND = {
    "castslice": (
        {"preview", "webhook", "policy", "claim-templates"},
        "a live cluster (castslice doctor)",
    ),
    # `helm install` and `helm upgrade --install` run as a client-side dry install (the shim
    # in helm_shim()): every check the chart makes (its schema, its templates) without a
    # cluster to send to.
    "helm": ({"install", "upgrade", "template", "lint"}, "a live cluster (helm)"),
    "kubectl": ({"kustomize"}, "a live cluster (kubectl)"),
}
OFFLINE = {
    "cd",
    ".",
    "cp",
    "export",
    "set",
    "echo",
    "printf",
    "sed",
    "grep",
    "cat",
    "ls",
    "$EDITOR",
    "openssl",
    "for",
    "do",
    "done",
    "true",
}


@dataclass(frozen=True)
class Block:
    path: str
    line: int
    text: str
    cwd: str
    skip: str = ""

    @property
    def name(self) -> str:
        return f"{self.path}:{self.line}"


def doc_files() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "infra").rglob("README.md")),
    ]


def blocks(path: Path, root: Path = ROOT) -> Iterator[Block]:
    relative = path.relative_to(root).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    cwd = PurePosixPath(".")
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("#"):
            cwd = PurePosixPath(".")
        fence = _FENCE.match(line)
        if not fence:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and not re.match(r"^ *```\s*$", lines[end]):
            end += 1
        if fence.group("info") in SHELLS:
            indent = len(fence.group("indent"))
            text = "\n".join(body[indent:] for body in lines[index + 1 : end])
            marker = _marker(lines, index)
            start = PurePosixPath(marker[1]) if marker and marker[0] == "cwd" else cwd
            skip = marker[1] if marker and marker[0] == "skip" else ""
            yield Block(relative, index + 1, text, start.as_posix(), skip)
            cwd = _after_cds(start, text)
        index = end + 1


def _marker(lines: list[str], fence_index: int) -> tuple[str, str] | None:
    previous = fence_index - 1
    while previous >= 0 and not lines[previous].strip():
        previous -= 1
    found = _MARKER.match(lines[previous]) if previous >= 0 else None
    return (found.group("kind"), found.group("value")) if found else None


def commands(text: str) -> list[str]:
    """The block's commands: continued lines and loops joined, comment-only lines dropped."""
    found: list[str] = []
    current = ""
    depth = 0
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current = f"{current}\n{line}" if current else line
        first = (line.split() or [""])[0]
        depth += first in _OPENS
        depth -= first in _CLOSES
        if not line.endswith("\\") and depth <= 0:
            found.append(current)
            current = ""
            depth = 0
    if current:
        found.append(current)
    return found


def need(command: str) -> str:
    """What `command` needs that is not here, or "" when it runs offline."""
    for part in re.split(r"&&|\|\||;|\||\n", command.replace("\\\n", " ")):
        words = _words(part)
        while words and _ASSIGNMENT.match(words[0]):
            words = words[1:]
        if not words:
            continue
        program = words[0]
        if program == "helm" and any(word.startswith("oci://") for word in words):
            return "a chart registry (oci://)"
        if program in NEEDS:
            return NEEDS[program]
        if words[:2] == ["helm", "upgrade"] and "--install" not in words:
            return "an installed release (helm upgrade)"
        if program in NEEDS_BY_SUBCOMMAND:
            allowed, needed = NEEDS_BY_SUBCOMMAND[program]
            if len(words) < 2 or words[1] not in allowed:
                return needed
            continue
        if program not in OFFLINE:
            return f"`{program}`, which no rule here says runs offline"
    return ""


def _words(part: str) -> list[str]:
    try:
        return shlex.split(part, comments=True)
    except ValueError:
        # An unbalanced quote: the part belongs to a command split at a `|` inside quotes.
        return part.split()


def runnable(block: Block) -> tuple[list[str], list[str]]:
    """The commands of `block` that run here, and what the others need.

    A command that cannot run is left out and the next ones still run: what
    it would change (a cloud project, a cluster) is nothing a later command
    that runs here reads.
    """
    if block.skip:
        return [], [block.skip]
    ran: list[str] = []
    needed: list[str] = []
    for command in commands(block.text):
        missing = need(command)
        if missing:
            if missing not in needed:
                needed.append(missing)
        else:
            ran.append(command)
    return ran, needed


def paths_read(command: str) -> list[str]:
    """The local files a command that is not run would read (-f, --patch-file, -k...)."""
    found = []
    for part in re.split(r"&&|\|\||;|\||\n", command.replace("\\\n", " ")):
        words = _words(part)
        for index, word in enumerate(words):
            option, _, attached = word.partition("=")
            if option not in _PATH_OPTIONS:
                continue
            value = attached or (words[index + 1] if index + 1 < len(words) else "")
            # "-" is standard input, as in `castslice claim-templates | kubectl apply -f -`.
            if (
                value
                and value != "-"
                and "://" not in value
                and "$" not in value
                and not value.isupper()
            ):
                found.append(value)
    return found


def _after_cds(start: PurePosixPath, text: str) -> PurePosixPath:
    cwd = start
    for command in commands(text):
        words = _words(command)
        if len(words) >= 2 and words[0] == "cd":
            cwd = PurePosixPath(os.path.normpath(cwd / words[1]))
    return cwd


ALL_BLOCKS = [block for path in doc_files() for block in blocks(path)]
RUN = [block for block in ALL_BLOCKS if runnable(block)[0]]
NOT_RUN = [(block, runnable(block)[1]) for block in ALL_BLOCKS if not runnable(block)[0]]
DOCS_WITH_BLOCKS = sorted({block.path for block in ALL_BLOCKS})
# Options whose value is a local file or directory the command reads.
_PATH_OPTIONS = ("-f", "--filename", "--patch-file", "-k", "--kustomize", "-var-file")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's tracked files, plus what the variants' setup has the reader create."""
    copy = tmp_path_factory.mktemp("pristine") / "castslice"
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, (entry.decode() for entry in listed)):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    directory = copy / "infra" / "knative"
    shutil.copy(directory / "castslice.env.example", directory / "castslice.env")
    shutil.copy(directory / "policy.yaml.example", directory / "policy.yaml")
    shutil.copy(copy / "examples" / "policy.yaml", copy / "policy.yaml")
    return copy


def editor(bin_dir: Path) -> Path:
    script = bin_dir / "editor"
    script.write_text(
        "#!/bin/sh\n"
        "# The reader's edits: a policy where the docs ask for one, nothing else.\n"
        'for file in "$@"; do\n'
        '  case "$file" in\n'
        f'    *policy.yaml) [ -e "$file" ] || cp "{ROOT / "examples" / "policy.yaml"}" "$file" ;;\n'
        "  esac\n"
        "done\n"
    )
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("doc", DOCS_WITH_BLOCKS)
def test_the_docs_commands_run_as_written(doc: str, pristine: Path, tmp_path: Path) -> None:
    """One reader follows one page from the top: files made by a block stay for the next.

    The commands that cannot run here still name files: those must exist where the
    reader is.
    """
    work = tmp_path / "castslice"
    shutil.copytree(pristine, work, symlinks=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASTSLICE_")}
    env.update(
        {
            "PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env["PATH"]]),
            "EDITOR": str(editor(bin_dir)),
            "HOME": str(tmp_path),
        }
    )
    page = [block for block in ALL_BLOCKS if block.path == doc and not block.skip]
    if any(_words(c)[:1] == ["helm"] for block in page for c in runnable(block)[0]):
        helm_shim(bin_dir)
    for block in page:
        ran, _ = runnable(block)
        cwd = work / block.cwd
        assert cwd.is_dir(), f"{block.name}: the docs leave the reader in {block.cwd}, missing"
        if ran:
            run_block(block, ran, cwd, env)
        where = cwd
        for command in commands(block.text):
            words = _words(command)
            if command in ran and len(words) >= 2 and words[0] == "cd":
                where = where / words[1]
            if command not in ran:
                for path in paths_read(command):
                    assert (where / path).exists(), (
                        f"{block.name}: {path} is not in {where.relative_to(work)}: {command}"
                    )


def helm_shim(bin_dir: Path) -> None:
    """`helm` as the docs run it, from the real helm CLI (tests/helm): `helm install` as a
    client-side dry run, since there is no cluster here to install into."""
    try:
        helm = helm_binary()
    except HelmUnavailable as error:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"CI=true and {error}", pytrace=False)
        pytest.skip(str(error))
    shim = bin_dir / "helm"
    # `upgrade --install` as the first install it is on a new cluster, without the flags
    # that only an upgrade reads (the previous release's values): what the chart renders
    # from the command's own values, as the docs' reader gets it the first time.
    shim.write_text(
        "#!/bin/bash\n"
        'if [ "$1" = upgrade ]; then\n'
        '  [ "$2" = --install ] || { echo "helm upgrade needs --install here" >&2; exit 1; }\n'
        "  shift 2\n"
        "  args=()\n"
        '  for arg in "$@"; do\n'
        '    case "$arg" in\n'
        "      --reuse-values|--reset-values|--reset-then-reuse-values) ;;\n"
        '      *) args+=("$arg") ;;\n'
        "    esac\n"
        "  done\n"
        '  set -- install "${args[@]}"\n'
        "fi\n"
        f'[ "$1" = install ] && exec "{helm}" "$@" --dry-run=client\n'
        f'exec "{helm}" "$@"\n'
    )
    shim.chmod(0o755)


def run_block(block: Block, ran: list[str], cwd: Path, env: dict[str, str]) -> None:
    script = "set -eo pipefail\n" + "\n".join(ran) + "\n"
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, (
        f"{block.name} (from {block.cwd}) failed with {done.returncode}:\n{script}\n"
        f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
    )
    assert "Traceback" not in done.stderr, f"{block.name}:\n{done.stderr}"


def test_every_block_not_run_says_what_it_needs() -> None:
    unknown = [
        f"{block.name}: {reason}"
        for block in ALL_BLOCKS
        for reason in runnable(block)[1]
        if "no rule here" in reason
    ]
    assert not unknown, (
        "blocks with a command this test knows nothing about: add it to NEEDS or OFFLINE, or "
        "put <!-- docs-test: skip REASON --> before the block:\n" + "\n".join(unknown)
    )


def test_the_offline_commands_of_the_docs_are_among_those_run() -> None:
    ran = {" ".join(command.split()) for block in RUN for command in runnable(block)[0]}
    for expected in (
        "castslice policy > castslice-policy.yaml",
        "cp castslice.env.example castslice.env && cp policy.yaml.example policy.yaml",
        "cp example.tfvars terraform.tfvars",
    ):
        assert any(expected in command for command in ran), expected


def test_where_the_reader_is_follows_headings_cds_and_markers(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# A\n\n```sh\ncd infra\n```\n\n```sh\ncp example.tfvars x\n```\n\n"
        "## B\n\n```sh\nls\n```\n\n<!-- docs-test: cwd infra/knative -->\n```sh\nls\n```\n\n"
        "<!-- docs-test: skip needs a GPU -->\n```sh\nls\n```\n"
    )
    found = list(blocks(doc, tmp_path))
    assert [(block.cwd, block.skip) for block in found] == [
        (".", ""),
        ("infra", ""),
        (".", ""),
        ("infra/knative", ""),
        ("infra/knative", "needs a GPU"),
    ]
    assert runnable(found[4]) == ([], ["needs a GPU"])
    assert need("gcloud auth login") == NEEDS["gcloud"]
    assert need("CASTSLICE_BACKEND=gke castslice preview -f x") == ""
    assert need("castslice doctor") == "a live cluster (castslice doctor)"
    assert need("kubectl get --raw /metrics | grep x") == "a live cluster (kubectl)"


if __name__ == "__main__":
    for block, reasons in NOT_RUN:
        print(f"{block.name}\tnot run: needs {'; '.join(reasons)}")
    for block in RUN:
        ran, reasons = runnable(block)
        rest = f"; not the others, which need {'; '.join(reasons)}" if reasons else ""
        print(f"{block.name}\truns {len(ran)} command(s) from {block.cwd}{rest}")
