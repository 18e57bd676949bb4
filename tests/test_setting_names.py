"""A CASTSLICE_* name that is no setting is never silent: named with the closest setting,
refused under CASTSLICE_STRICT_SETTINGS=true; the project's own variables never trip it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from castslice.environment import UnknownSetting, load_config, unknown_settings
from castslice.settings.config import ConfigError
from tests.served import environment

ROOT = Path(__file__).resolve().parent.parent
# Names the repository (outside this file) writes on purpose as what is warned of: the
# misspellings the docs, the code's comments and tests/test_start.py show, and the Service
# link a comment in the chart's Deployment names.
WARNED_ON_PURPOSE = {
    "CASTSLICE_BAKEND",
    "CASTSLICE_METRIC_PORT",
    "CASTSLICE_SLICE_PER_GPU",
    "CASTSLICE_PORT",
}


@pytest.mark.parametrize(
    ("name", "closest"),
    [
        ("CASTSLICE_BAKEND", "CASTSLICE_BACKEND"),
        ("CASTSLICE_SLICE_PER_GPU", "CASTSLICE_SLICES_PER_GPU"),
        ("CASTSLICE_SHARING_DEGREE", "CASTSLICE_SHARING_DEGREES"),
        ("CASTSLICE_METRIC_PORT", "CASTSLICE_METRICS_PORT"),
        ("CASTSLICE_XYZZY", None),
    ],
)
def test_an_unknown_name_is_ignored_and_named_with_the_closest_setting(
    name: str, closest: str | None
) -> None:
    environ = {name: "9191", "CASTSLICE_BACKEND": "gke"}
    assert unknown_settings(environ) == (UnknownSetting(name, closest),)
    # Not strict: the configuration is what the known settings say.
    assert load_config(environ) == load_config({"CASTSLICE_BACKEND": "gke"})


def test_strict_settings_refuse_an_unknown_name_naming_the_closest() -> None:
    environ = {"CASTSLICE_BAKEND": "gke", "CASTSLICE_STRICT_SETTINGS": "true"}
    with pytest.raises(ConfigError) as refused:
        load_config(environ)
    assert str(refused.value) == (
        "CASTSLICE_STRICT_SETTINGS=true refuses names that are not settings: "
        "CASTSLICE_BAKEND (did you mean CASTSLICE_BACKEND?)"
    )
    assert load_config({"CASTSLICE_BACKEND": "gke", "CASTSLICE_STRICT_SETTINGS": "true"})
    with pytest.raises(ConfigError, match="CASTSLICE_STRICT_SETTINGS='yes' must be true or false"):
        load_config({"CASTSLICE_STRICT_SETTINGS": "yes"})


def test_service_links_pass_only_with_the_kubelets_values() -> None:
    # What the kubelet writes for a Service named castslice-report in the Pod's namespace.
    links = {
        "CASTSLICE_REPORT_SERVICE_HOST": "10.96.0.12",
        "CASTSLICE_REPORT_SERVICE_PORT": "9100",
        "CASTSLICE_REPORT_SERVICE_PORT_METRICS": "9100",
        "CASTSLICE_REPORT_PORT": "tcp://10.96.0.12:9100",
        "CASTSLICE_REPORT_PORT_9100_TCP": "tcp://10.96.0.12:9100",
        "CASTSLICE_REPORT_PORT_9100_TCP_PROTO": "tcp",
        "CASTSLICE_REPORT_PORT_9100_TCP_PORT": "9100",
        "CASTSLICE_REPORT_PORT_9100_TCP_ADDR": "10.96.0.12",
        "CASTSLICE_PORT": "tcp://[fd00::1]:443",
    }
    assert unknown_settings(links) == ()
    # The same shapes with values someone wrote are settings misspelt.
    written = {"CASTSLICE_METRIC_PORT": "9191", "CASTSLICE_REPORT_SERVICE_HOST": "report"}
    assert [unknown.name for unknown in unknown_settings(written)] == sorted(written)


def test_the_projects_own_variables_are_not_taken_for_settings() -> None:
    """Every CASTSLICE_* name anywhere in the repository (chart, Terraform, Makefile, the
    e2e harness, the tests, the docs) is a setting or a development variable."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    names: set[str] = set()
    for file in filter(None, files):
        path = ROOT / file.decode()
        if path.is_file() and path != Path(__file__) and b"\0" not in path.read_bytes()[:1024]:
            text = path.read_text(errors="replace")
            names.update(re.findall(r"\bCASTSLICE_[A-Z0-9_]*[A-Z0-9]\b", text))
    assert {"CASTSLICE_E2E_KUBERNETES", "CASTSLICE_HELM_CACHE", "CASTSLICE_BACKEND"} <= names
    flagged = {unknown.name for unknown in unknown_settings(dict.fromkeys(names, "1"))}
    assert flagged == WARNED_ON_PURPOSE


def castslice(*arguments: str, **settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "castslice", *arguments],
        env=environment(**settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_line_warns_on_stderr_and_refuses_when_strict() -> None:
    manifest = "examples/pytorchjob.yaml"
    warned = castslice("preview", "-f", manifest, CASTSLICE_BAKEND="gke")
    assert warned.returncode == 0, warned.stderr
    assert warned.stderr.splitlines()[0] == (
        "castslice: warning: CASTSLICE_BAKEND is not a setting and is ignored "
        "(did you mean CASTSLICE_BACKEND?)"
    )
    # The output is the default backend's, as the warning says.
    assert warned.stderr.rstrip().endswith("resource backend")
    assert "CASTSLICE_BAKEND" not in warned.stdout

    refused = castslice(
        "preview", "-f", manifest, CASTSLICE_BAKEND="gke", CASTSLICE_STRICT_SETTINGS="true"
    )
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert refused.stderr == (
        "castslice: invalid configuration: CASTSLICE_STRICT_SETTINGS=true refuses names that "
        "are not settings: CASTSLICE_BAKEND (did you mean CASTSLICE_BACKEND?)\n"
    )

    quiet = castslice("preview", "-f", manifest, CASTSLICE_BACKEND="gke")
    assert "warning" not in quiet.stderr.split("\n")[0]
