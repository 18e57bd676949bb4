"""The Dockerfile, parsed; and its command run on exactly the files it copies."""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import shutil
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import DOCKERFILE, REPORT, STAGES, arguments_of
from tests.procs import free_port, serving
from tests.served import IMAGE_TARGET

from .variants import ROOT

# How the function is started in production and by the end-to-end suite
# (which adds --host and --port).
START_COMMAND = ["functions-framework", "--target=mutate_asgi", "--source=main.py"]


def test_the_base_is_python_3_11_slim_and_the_default_target_the_webhook() -> None:
    assert list(STAGES) == ["base", "report", "webhook"]
    for stage in STAGES.values():
        assert arguments_of("FROM", stage) == ["python:3.11-slim"]


def test_only_the_runtime_requirements_are_installed() -> None:
    (install,) = [run for run in arguments_of("RUN") if "pip install" in run]
    assert install == "pip install --no-cache-dir -r requirements.txt"


def test_the_report_image_adds_only_the_kubernetes_client_the_tests_run() -> None:
    installs = [run for run in arguments_of("RUN", REPORT) if "pip install" in run]
    assert installs == [
        "pip install --no-cache-dir -r requirements.txt",
        "pip install --no-cache-dir -r requirements-report.txt",
    ]
    pins = [
        line for line in (ROOT / "requirements-report.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]  # fmt: skip
    development = (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert pins == [line for line in development if line.startswith("kubernetes==")]


@pytest.mark.parametrize("stage", ["webhook", "report"])
def test_it_runs_as_a_numeric_non_root_user(stage: str) -> None:
    built = STAGES[stage]
    users = arguments_of("USER", built)
    assert users, "no USER: the image would run as root"
    user, _, group = users[-1].partition(":")
    assert user.isdigit() and int(user) != 0
    assert not group or (group.isdigit() and int(group) != 0)
    # Nothing after the last USER runs as root again.
    last_user = max(i for i, (keyword, _) in enumerate(built) if keyword == "USER")
    assert all(keyword != "RUN" for keyword, _ in built[last_user:])


def test_the_command_is_the_one_production_and_the_e2e_suite_run() -> None:
    assert not arguments_of("ENTRYPOINT")
    (command,) = arguments_of("CMD")
    assert json.loads(command) == START_COMMAND  # exec form: signals reach the server
    assert "PORT=8080" in " ".join(arguments_of("ENV"))


def test_the_report_command_serves_on_the_port_it_exposes() -> None:
    (command,) = arguments_of("CMD", REPORT)
    words = json.loads(command)
    assert words[:4] == ["python", "-m", "castslice", "report"]
    assert words[words.index("--serve") + 1] == arguments_of("EXPOSE", REPORT)[-1]
    assert words[words.index("--address") + 1] == "0.0.0.0"


def _word(node: ast.expr) -> str | None:
    """A literal argument; in an f-string, the served target stands for its replacement field,
    which defaults to IMAGE_TARGET (the e2e server's `target` parameter)."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(part.value) if isinstance(part, ast.Constant) else IMAGE_TARGET
            for part in node.values
        )
    return None


def e2e_start_commands() -> list[list[str]]:
    """The argument lists in tests/e2e that start the function (literal words only)."""
    commands = []
    for path in (ROOT / "tests" / "e2e").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.List):
                words = [w for w in map(_word, node.elts) if w is not None]
                if any(str(word).startswith("--target") for word in words):
                    commands.append([str(word) for word in words])
    return commands


def test_the_e2e_suite_starts_the_same_program_and_target() -> None:
    assert f"--target={IMAGE_TARGET}" in START_COMMAND
    commands = e2e_start_commands()
    assert commands, "the end-to-end suite must start functions-framework"
    for command in commands:
        if "-m" in command:
            module = command[command.index("-m") + 1]
            program, flags = module.replace("_", "-"), command[command.index("-m") + 2 :]
        else:
            program, flags = command[0], command[1:]
        flags = [flag for flag in flags if not flag.startswith(("--host", "--port"))]
        assert [program, *flags] == START_COMMAND


def dockerignore_excludes(path: str) -> bool:
    """Whether .dockerignore keeps `path` out of the build context (last match wins)."""
    excluded = False
    for pattern in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = pattern.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negated = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(prefix, pattern) for prefix in prefixes):
            excluded = not negated
    return excluded


def copied_sources(stage: list[tuple[str, str]] = DOCKERFILE) -> list[str]:
    sources = []
    for arguments in arguments_of("COPY", stage):
        *paths, _destination = arguments.split()
        sources += [path.rstrip("/") for path in paths]
    return sources


def test_the_build_context_holds_what_is_copied_and_nothing_private() -> None:
    assert set(copied_sources()) == {"requirements.txt", "main.py", "castslice"}
    assert set(copied_sources(REPORT)) == {*copied_sources(), "requirements-report.txt"}
    for source in (
        "requirements.txt",
        "requirements-report.txt",
        "main.py",
        "castslice/serve/tls.py",
        "castslice/serve/core.py",
    ):
        assert not dockerignore_excludes(source), source
    for private in (".git/config", ".venv/bin/python", "tests/conftest.py", "infra/main.tf"):
        assert dockerignore_excludes(private), private


def health_of(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=2) as reply:
        return json.load(reply)


def test_the_command_serves_from_the_copied_files_on_port(tmp_path: Path) -> None:
    # The image's /app: only what the Dockerfile copies.
    app = tmp_path / "app"
    app.mkdir()
    for source in copied_sources():
        origin = ROOT / source
        if origin.is_dir():
            shutil.copytree(origin, app / source, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(origin, app / source)

    program = Path(sys.executable).with_name(START_COMMAND[0])
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CASTSLICE_", "PYTHON"))}
    # functions-framework listens on 0.0.0.0 by default; --host keeps the test on loopback.
    with serving(
        "image",
        [str(program), *START_COMMAND[1:], "--host=127.0.0.1"],
        app,
        lambda: health_of(f"http://127.0.0.1:{port}/healthz"),
        env={**env, "PORT": str(port)},
        cwd=app,
        timeout=20,
    ) as health:
        assert health["status"] == "ok"


def gcloudignore_excludes(path: str) -> bool:
    """Whether `gcloud` leaves `path` out of an upload (.gcloudignore and its #!include)."""
    excluded = False
    lines = (ROOT / ".gcloudignore").read_text().splitlines()
    for line in list(lines):
        if line.startswith("#!include:"):
            lines += (ROOT / line.removeprefix("#!include:")).read_text().splitlines()
    for pattern in lines:
        pattern = pattern.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negated = pattern.startswith("!")
        pattern = pattern.removeprefix("!").rstrip("/")
        parts = Path(path).parts
        if any(fnmatch.fnmatch(part, pattern) for part in parts) or fnmatch.fnmatch(path, pattern):
            excluded = not negated
    return excluded


def test_a_source_deploy_uploads_what_googles_buildpacks_run() -> None:
    # `gcloud run deploy --source . --function=TARGET`: the Python buildpack installs
    # requirements.txt and runs functions-framework on main.py with that target.
    for path in ("main.py", "requirements.txt", "castslice/serve/core.py"):
        assert not gcloudignore_excludes(path), path
    assert gcloudignore_excludes(".venv/bin/python")
    pins = (ROOT / "requirements.txt").read_text().splitlines()
    assert "functions-framework==3.10.2" in pins
    source = (ROOT / "main.py").read_text()
    for target in ("mutate", "mutate_asgi"):
        assert f"def {target}(request" in source
