"""cloudbuild.yaml: the steps, the image tag and the substitutions, and its shell
scripts run for real (with `docker` and `gcloud` replaced by recorders)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from castslice import __version__

from .variants import ROOT, load_yaml

CLOUDBUILD = load_yaml(ROOT / "cloudbuild.yaml")
STEPS = {step["id"]: step for step in CLOUDBUILD["steps"]}

# Cloud Build's own substitutions (https://cloud.google.com/build/docs/configuring-builds/
# substitute-variable-values); the trigger ones are empty in a manual build.
BUILT_IN = {
    "PROJECT_ID", "BUILD_ID", "PROJECT_NUMBER", "LOCATION", "TRIGGER_NAME", "COMMIT_SHA",
    "REVISION_ID", "SHORT_SHA", "REPO_NAME", "REPO_FULL_NAME", "BRANCH_NAME", "TAG_NAME",
    "REF_NAME", "TRIGGER_BUILD_CONFIG_PATH", "SERVICE_ACCOUNT_EMAIL", "SERVICE_ACCOUNT",
}  # fmt: skip
_REFERENCE = re.compile(r"\$(?:\$|\{([A-Za-z0-9_]+)\}|([A-Za-z0-9_]+))")
BUILD_ID = "0b1d2c3e-5f60-4a7b-8c9d-0e1f2a3b4c5d"


def substitute(text: str, values: dict[str, str]) -> str:
    """What Cloud Build does to a step's args: `$$` is `$`, `$VAR`/`${VAR}` its value."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return values[match.group(1) or match.group(2)]

    return _REFERENCE.sub(replace, text)


def references(value: Any) -> set[str]:
    if isinstance(value, str):
        return {a or b for a, b in _REFERENCE.findall(value) if a or b}
    if isinstance(value, list):
        return set().union(*map(references, value)) if value else set()
    if isinstance(value, dict):
        return references(list(value.values()))
    return set()


def test_user_substitutions_have_defaults() -> None:
    substitutions = CLOUDBUILD["substitutions"]
    assert {"_REGION", "_REPOSITORY", "_SERVICE"} <= substitutions.keys()
    assert all(isinstance(value, str) and value for value in substitutions.values())


def test_every_reference_is_a_built_in_or_a_declared_substitution() -> None:
    # Cloud Build rejects a build whose template names an unknown variable;
    # shell variables are written `$$name`.
    declared = set(CLOUDBUILD["substitutions"])
    assert references(CLOUDBUILD["steps"]) <= BUILT_IN | declared
    for step in CLOUDBUILD["steps"]:
        for arg in step.get("args", []):
            assert not re.search(r"(?<!\$)\$(?![${A-Za-z0-9_])", arg.replace("$$", "")), arg


def test_the_tests_run_before_anything_is_built_or_deployed() -> None:
    order = [step["id"] for step in CLOUDBUILD["steps"]]
    # (The helm step first builds a tool, helm, that the tests and the chart step use.)
    assert order == ["helm", "test", "image-name", "build", "push", "chart", "deploy"]
    # No step starts early: without waitFor each step waits for all before it.
    assert all("waitFor" not in step for step in CLOUDBUILD["steps"])


# What python:3.11-slim, the test step's image, lacks of what `make test` uses.
NOT_IN_THE_IMAGE = {"terraform", "kubectl", "go", "nginx", "make"}
_NO_MAKE = "make is not installed (python:3.11-slim has none; CI's .ci/run installs it)"
# Set for the run of the step's command below, which must not start itself again.
INSIDE_THE_STEP = "CASTSLICE_CLOUD_BUILD_STEP"
_SKIP_LINE = re.compile(r"^SKIPPED \[\d+\] (?P<where>[^:]+):\d+: (?P<why>.*)$")


def path_without(tools: set[str], bin_dir: Path) -> str:
    """This PATH's programs, linked into `bin_dir`, except `tools`."""
    bin_dir.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = bin_dir / entry.name
            if entry.name in tools or link.exists() or not os.access(entry.path, os.X_OK):
                continue
            link.symlink_to(entry.path)
    return str(bin_dir)


_ITSELF = "this is that run"


# The tests that need what the step installs beyond requirements-dev.txt (the `castslice`
# command, run as users run it) or what the helm step builds for it (the artefact's draws,
# a Go program). The whole suite runs in the step; here these stand for it, so that this
# test stays within a minute or two.
STEP_TESTS = (
    "tests/test_cli_preview.py",
    "tests/test_doc_commands.py",
    "tests/test_packing_bench.py::test_the_artefact_order_shuffles_every_task_then_tunes_with_its_own_draws",
)


def wheelhouse() -> Path:
    """Wheels of requirements-dev.txt and of the build backend, made once per version of
    the requirements into ~/.cache/castslice/wheels-SHA (pip fetches them from the index)."""
    requirements = (ROOT / "requirements-dev.txt").read_bytes() + (
        ROOT / "requirements.txt"
    ).read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "castslice"
    directory = cache / f"wheels-{hashlib.sha256(requirements).hexdigest()[:16]}"
    if not (directory / ".complete").exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
             "-r", str(ROOT / "requirements-dev.txt"), "setuptools>=75", "-w", str(directory)],
            cwd=ROOT, check=True, timeout=1200,
        )  # fmt: skip
        (directory / ".complete").touch()
    return directory


@pytest.mark.skipif(INSIDE_THE_STEP in os.environ, reason=_ITSELF)
# In Cloud Build's own test step the helm step has already run, in its Go image: this
# replay of both needs Go here (CI's .ci/run installs it).
@pytest.mark.skipif(
    shutil.which("go") is None, reason="go not found: the helm step replayed here builds with Go"
)
def test_the_test_step_passes_in_an_image_without_terraform_kubectl_go_or_nginx(
    tmp_path: Path, helm: Path
) -> None:
    # As empty as python:3.11-slim: a fresh virtual environment (its pip installs from the
    # package index, as the step's does), this machine's programs minus the four.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    assert not (venv / "bin" / "castslice").exists()
    tools = tmp_path / "bin"
    tools.mkdir()
    # `python -m pytest ... tests`: the step's command, on STEP_TESTS instead of `tests`.
    (tools / "python").write_text(
        f"#!{venv}/bin/python\n"
        "import os, sys\n"
        "args = sys.argv[1:]\n"
        "if args[:2] == ['-m', 'pytest']:\n"
        "    assert 'tests' in args, f'the step no longer runs tests: {args}'\n"
        "    at = args.index('tests')\n"
        f"    args = [*args[:at], *{list(STEP_TESTS)!r}, *args[at + 1 :]]\n"
        # The full path as argv[0]: Python finds its venv from it, not from the PATH.
        f"python = {str(venv / 'bin' / 'python')!r}\n"
        "os.execv(python, [python, *args])\n"
    )
    (tools / "python").chmod(0o755)
    env = {key: value for key, value in os.environ.items() if key not in ("CI", "VIRTUAL_ENV")}
    system = path_without(NOT_IN_THE_IMAGE | {"castslice", "python", "pip"}, tmp_path / "system")
    env["PATH"] = os.pathsep.join([str(tools), str(venv / "bin"), system])
    env.pop("PYTHONPATH", None)
    env[INSIDE_THE_STEP] = "1"
    # The packages from wheels made once (the index's own files, kept by requirements),
    # not downloaded again on every run; what the step installs is still decided by it.
    env.update(PIP_FIND_LINKS=str(wheelhouse()), PIP_NO_INDEX="1")
    # An empty home and cache, as the image's: no helm built earlier on this machine.
    for name in ("HOME", "XDG_CACHE_HOME"):
        env[name] = str(tmp_path / "home")
    env.pop("CASTSLICE_HELM_CACHE", None)
    # The helm step, as it leaves /workspace: its build.sh's helm (built from the Go
    # module as here, so this machine's build stands for it), which the step then finds,
    # and what it builds with its image's Go (this machine's, with its build cache).
    workspace = tmp_path / "workspace"
    built = workspace / "tools" / f"helm-{(ROOT / 'tests/helm/helm.version').read_text().strip()}"
    built.mkdir(parents=True)
    shutil.copy2(helm, built / "helm")
    step = STEPS["helm"]
    assert step["name"].startswith("golang:")
    script = [arg.replace("/workspace/", f"{workspace}/") for arg in step["args"]]
    with_go = {key: value for key, value in os.environ.items() if key != "CASTSLICE_HELM_CACHE"}
    done = subprocess.run(
        ["bash", *script], cwd=ROOT, env=with_go, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == str(built / "helm"), done.stderr
    step = STEPS["test"]
    assert (step["name"], step["entrypoint"]) == ("python:3.11-slim", "bash")
    # A checkout of its own, as Cloud Build's: `pip install .` writes build/ into it.
    checkout = tmp_path / "source"
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, (entry.decode() for entry in listed)):
        if (ROOT / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, checkout / name)
    # The docs' test lists the checkout's files with git, as a clone has them.
    for command in (["init", "-q"], ["add", "-A"]):
        subprocess.run(["git", *command], cwd=checkout, check=True, capture_output=True)
    script = [arg.replace("/workspace/", f"{workspace}/") for arg in step["args"]]
    done = subprocess.run(
        ["bash", *script], cwd=checkout, env=env, capture_output=True, text=True,
        timeout=900, check=False,
    )  # fmt: skip
    summary = (done.stdout.strip().splitlines() or [""])[-1]
    print(f"the test step's command, as Cloud Build runs it: {summary}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert (venv / "bin" / "castslice").exists()
    assert " passed" in summary and "failed" not in summary and "error" not in summary
    # What skips there is what needs kubectl, and it says so; never what needs helm.
    skips = [_SKIP_LINE.match(line) for line in done.stdout.splitlines()]
    reasons = {match["why"] for match in skips if match}
    expected = {"kubectl (with its built-in kustomize) is not installed", _ITSELF, _NO_MAKE}
    assert reasons <= expected, reasons


def test_the_build_uses_the_dockerfile_and_deploys_with_gcloud_run() -> None:
    assert STEPS["build"]["name"] == "gcr.io/cloud-builders/docker"
    assert "docker build" in " ".join(STEPS["build"]["args"])
    assert "docker push" in " ".join(STEPS["push"]["args"])
    assert "gcloud run deploy" in " ".join(STEPS["deploy"]["args"])


@pytest.fixture
def workspace(tmp_path: Path) -> dict[str, Path]:
    """A stand-in for /workspace, and `docker` and `gcloud` that record their arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("docker", "gcloud"):
        script = bin_dir / tool
        script.write_text(
            "#!/bin/sh\n"
            f'echo "{tool} $*" >> "{tmp_path}/calls"\n'
            # A missing service: `gcloud run services describe` fails.
            f'case "$*" in *"services describe"*) [ -e "{tmp_path}/no-service" ] && exit 1;; esac\n'
            "exit 0\n"
        )
        script.chmod(0o755)
    return {"root": tmp_path, "bin": bin_dir, "calls": tmp_path / "calls"}


def run_step(
    step_id: str, values: dict[str, str], workspace: dict[str, Path]
) -> subprocess.CompletedProcess[str]:
    """Run one step's bash script after Cloud Build's substitution, /workspace redirected."""
    step = STEPS[step_id]
    assert step.get("entrypoint") == "bash"
    args = [substitute(arg, values) for arg in step["args"]]
    args = [arg.replace("/workspace/", f"{workspace['root']}/") for arg in args]
    bash = shutil.which("bash")
    assert bash, "bash is needed to run the build scripts"
    return subprocess.run(
        [bash, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": f"{workspace['bin']}{os.pathsep}{os.environ['PATH']}"},
        timeout=30,
    )


def build_values(short_sha: str, tag_name: str = "") -> dict[str, str]:
    values = {name: "" for name in BUILT_IN}
    values.update(CLOUDBUILD["substitutions"])
    values.update(PROJECT_ID="sample-project", BUILD_ID=BUILD_ID, SHORT_SHA=short_sha)
    values.update(TAG_NAME=tag_name)
    return values


@pytest.mark.parametrize(
    ("short_sha", "tag_name", "tag"),
    [
        ("3f2a9c1", f"v{__version__}", f"v{__version__}"),
        ("3f2a9c1", "", "3f2a9c1"),
        ("", "", f"manual-{BUILD_ID}"),
    ],
)
def test_the_image_is_tagged_with_the_release_the_commit_or_the_build_and_deployed(
    workspace: dict[str, Path], short_sha: str, tag_name: str, tag: str
) -> None:
    values = build_values(short_sha, tag_name)
    for step_id in ("image-name", "build", "push", "deploy"):
        result = run_step(step_id, values, workspace)
        assert result.returncode == 0, result.stderr

    image = f"europe-west1-docker.pkg.dev/sample-project/castslice/castslice:{tag}"
    assert (workspace["root"] / "image").read_text().strip() == image
    calls = workspace["calls"].read_text().splitlines()
    report = f"europe-west1-docker.pkg.dev/sample-project/castslice/castslice-report:{tag}"
    assert calls == [
        f"docker build --tag {image} .",
        f"docker build --target report --tag {report} .",
        f"docker push {image}",
        f"docker push {report}",
        "gcloud run services describe castslice --region=europe-west1 --format=value(name)",
        f"gcloud run deploy castslice --image={image} --region=europe-west1 --quiet",
    ]


def test_a_release_tag_must_be_the_version_the_image_is_built_from(
    workspace: dict[str, Path],
) -> None:
    result = run_step("image-name", build_values("3f2a9c1", "v9.9.9"), workspace)
    assert result.returncode != 0
    assert f"tag v9.9.9 does not match castslice/__init__.py (v{__version__})" in result.stderr


def test_the_deploy_step_never_creates_a_service(workspace: dict[str, Path]) -> None:
    (workspace["root"] / "no-service").touch()
    (workspace["root"] / "image").write_text(
        "europe-west1-docker.pkg.dev/p/castslice/castslice:x\n"
    )
    result = run_step("deploy", build_values("abc"), workspace)
    assert result.returncode != 0
    assert "create it with Terraform" in result.stderr
    assert "run deploy" not in workspace["calls"].read_text()


@pytest.mark.parametrize(("ci", "status"), [("true", 2), (None, 0)])
def test_make_terraform_without_terraform_fails_only_in_ci(
    tmp_path: Path, ci: str | None, status: int
) -> None:
    if shutil.which("make") is None and "CI" not in os.environ:
        pytest.skip(_NO_MAKE)
    # make's own prerequisite (.venv/.installed) is this environment's, already made.
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    env["PATH"] = path_without({"terraform"}, tmp_path / "bin")
    if ci:
        env["CI"] = ci
    done = subprocess.run(
        ["make", "-s", "terraform", f"VENV={Path(sys.executable).parent.parent}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == status, done.stdout + done.stderr
    if ci:
        assert "CI=true and terraform (1.9+) is not installed" in done.stderr
    else:
        assert "infra/ was checked by parsing only" in done.stdout


@pytest.fixture
def chart_step(workspace: dict[str, Path], helm: Path) -> dict[str, Path]:
    """The chart step's tools: the helm step's helm in /workspace/tools, a wrapper of the real
    helm for packaging that records `registry login` and `push` (no registry here); `curl`
    answers as the metadata server does; `go` fails, as the chart step builds nothing."""
    real = workspace["root"] / "real-helm"
    real.symlink_to(helm)
    version = (ROOT / "tests" / "helm" / "helm.version").read_text().strip()
    built = workspace["root"] / "tools" / f"helm-{version}" / "helm"
    built.parent.mkdir(parents=True)
    built.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f'  registry) echo "helm $* $(cat)" >> "{workspace["root"]}/calls" ;;\n'
        f'  push) echo "helm $*" >> "{workspace["root"]}/calls" ;;\n'
        f'  *) exec "{real}" "$@" ;;\n'
        "esac\n"
    )
    built.chmod(0o755)
    (workspace["bin"] / "go").write_text(
        f'#!/bin/sh\necho "go $*" >> "{workspace["root"]}/calls"\nexit 1\n'
    )
    (workspace["bin"] / "curl").write_text(
        "#!/bin/sh\n"
        'echo \'{"access_token":"ya29.sample-token","expires_in":3599,"token_type":"Bearer"}\'\n'
    )
    for tool in ("go", "curl"):
        (workspace["bin"] / tool).chmod(0o755)
    return workspace


@pytest.mark.parametrize(
    ("tag_name", "short_sha", "chart_version", "app_version"),
    [
        (f"v{__version__}", "3f2a9c1", __version__, f"v{__version__}"),
        ("", "0123abc", f"{__version__}-image-0123abc", "0123abc"),
        ("", "", f"{__version__}-image-manual-{BUILD_ID}", f"manual-{BUILD_ID}"),
    ],
)
def test_the_chart_is_packaged_with_the_image_version_and_pushed_next_to_it(
    chart_step: dict[str, Path],
    helm: Path,
    tag_name: str,
    short_sha: str,
    chart_version: str,
    app_version: str,
) -> None:
    values = build_values(short_sha, tag_name)
    for step_id in ("image-name", "chart"):
        result = run_step(step_id, values, chart_step)
        assert result.returncode == 0, result.stderr

    package = chart_step["root"] / "chart" / f"castslice-{chart_version}.tgz"
    calls = chart_step["calls"].read_text().splitlines()
    assert calls == [
        "helm registry login europe-west1-docker.pkg.dev --username oauth2accesstoken "
        "--password-stdin ya29.sample-token",
        f"helm push {package} oci://europe-west1-docker.pkg.dev/sample-project/castslice/charts",
    ]
    shown = yaml.safe_load(
        subprocess.run(
            [str(helm), "show", "chart", str(package)], capture_output=True, text=True, check=True
        ).stdout
    )
    assert (shown["version"], shown["appVersion"]) == (chart_version, app_version)
    rendered = subprocess.run(
        [str(helm), "template", "castslice", str(package)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (deployment,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    image = (chart_step["root"] / "image").read_text().strip()
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image
    # Its report exporter runs the report image the build step pushed beside it.
    rendered = subprocess.run(
        [str(helm), "template", "castslice", str(package), "--set", "reportExporter.enabled=true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (exporter,) = [
        d for d in yaml.safe_load_all(rendered)
        if d and d["kind"] == "Deployment" and d["metadata"]["name"] == "castslice-report"
    ]  # fmt: skip
    repository, _, tag = image.rpartition(":")
    assert exporter["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"{repository}-report:{tag}"
    )
    # The repository's own chart is untouched: it names no image.
    assert '  repository: ""\n' in (ROOT / "charts" / "castslice" / "values.yaml").read_text()
