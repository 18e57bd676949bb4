"""The helm CLI, built from its Go module (build.sh), and the chart rendered and installed with it.

Plain functions (no fixtures), shared by tests/deploy and the end-to-end suite.
A missing Go skips the tests that need helm, except in CI (CI=true), where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "castslice"
BUILD_SCRIPT = Path(__file__).with_name("build.sh")
VERSION_FILE = Path(__file__).with_name("helm.version")

Objects = list[dict[str, Any]]


class HelmUnavailable(RuntimeError):
    """helm could not be built here; the message says what is missing."""


class HelmFailed(AssertionError):
    """helm exited non-zero; the message is its standard error."""


def helm_binary() -> Path:
    """The helm binary, built on first use (minutes) and cached by version."""
    if shutil.which("go") is None and not _cached():
        raise HelmUnavailable(
            "go not found; helm is built from its Go module helm.sh/helm/v4: https://go.dev/dl/"
        )
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        tail = "\n".join(result.stderr.splitlines()[-30:])
        raise HelmUnavailable(f"{BUILD_SCRIPT} failed with status {result.returncode}:\n{tail}")
    return Path(result.stdout.strip().splitlines()[-1])


def _cached() -> bool:
    root = os.environ.get("CASTSLICE_HELM_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "castslice"
    )
    return (Path(root) / f"helm-{VERSION_FILE.read_text().strip()}" / "helm").is_file()


def run_helm(
    helm: Path, *args: str, env: Mapping[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """helm with `args`, its own settings kept out of the user's home."""
    environment = {**os.environ, **(env or {})}
    result = subprocess.run(
        [str(helm), *args],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        timeout=300,
    )
    if check and result.returncode != 0:
        raise HelmFailed(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


# The chart requires image.repository (it names no image of its own); a test that does not
# choose one renders this one.
SAMPLE_REPOSITORY = "europe-west1-docker.pkg.dev/sample-project/castslice/castslice"


def values_file(directory: Path, values: Mapping[str, Any], name: str = "values.yaml") -> Path:
    """`values` as a file, with the sample image.repository unless `values` sets the key."""
    chosen = dict(values)
    image = chosen.get("image", {})
    if "repository" not in image:
        chosen["image"] = {"repository": SAMPLE_REPOSITORY, **image}
    path = directory / name
    path.write_text(yaml.safe_dump(chosen, sort_keys=False))
    return path


def template_args(
    values: Path,
    *,
    release: str = "castslice",
    namespace: str = "castslice",
    kube_version: str | None = None,
) -> list[str]:
    args = ["template", release, str(CHART), "--namespace", namespace, "-f", str(values)]
    if kube_version is not None:
        args += ["--kube-version", kube_version]
    return args


def template(
    helm: Path,
    directory: Path,
    values: Mapping[str, Any],
    *,
    release: str = "castslice",
    namespace: str = "castslice",
    kube_version: str | None = None,
) -> Objects:
    """`helm template` of the chart with `values`: the objects it would install (its
    uninstall hooks left out)."""
    path = values_file(directory, values)
    result = run_helm(
        helm,
        *template_args(path, release=release, namespace=namespace, kube_version=kube_version),
    )
    return installed_objects(result.stdout)


def hook_events(obj: dict[str, Any]) -> set[str]:
    annotations = obj.get("metadata", {}).get("annotations") or {}
    return {event for event in annotations.get("helm.sh/hook", "").split(",") if event}


def installed_objects(rendered: str) -> Objects:
    """The objects of `helm template`'s output that an install creates: none of the hooks
    that run only at uninstall."""
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    uninstall_only = [obj for obj in objects if hook_events(obj) <= {"pre-delete", "post-delete"}]
    return [obj for obj in objects if not hook_events(obj) or obj not in uninstall_only]


def template_error(helm: Path, directory: Path, values: Mapping[str, Any]) -> str:
    """What `helm template` says when it refuses `values` (AssertionError if it renders)."""
    result = run_helm(helm, *template_args(values_file(directory, values)), check=False)
    if result.returncode == 0:
        raise AssertionError(f"helm template rendered values it should refuse: {dict(values)}")
    return result.stderr


def castslice_output(
    args: Sequence[str], env: Mapping[str, str] | None = None, *, cwd: Path = ROOT
) -> str:
    """`castslice ARGS` as a user runs it, with `env` added to a CASTSLICE_*-free environment."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CASTSLICE_")}
    result = subprocess.run(
        [sys.executable, "-m", "castslice", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**environment, **(env or {})},
        cwd=cwd,
        timeout=60,
    )
    if result.returncode != 0:
        raise AssertionError(f"castslice {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


def generated_claim_templates(env: Mapping[str, str]) -> dict[str, Any]:
    """The chart's `claimTemplates.generated` as `castslice claim-templates --helm-values`
    writes it for the CASTSLICE_* settings `env`."""
    values = yaml.safe_load(castslice_output(["claim-templates", "--helm-values"], env))
    generated: dict[str, Any] = values["claimTemplates"]["generated"]
    return generated


CERT_MANAGER_MODULE = "github.com/cert-manager/cert-manager"
CERT_MANAGER_VERSION_FILE = Path(__file__).with_name("cert-manager.version")


class GoModuleUnavailable(RuntimeError):
    """A Go module could not be downloaded here; the message says which and why."""


def go_module_dir(module: str, version: str) -> Path:
    """Where Go's module cache holds `module@version`, unpacked from its release zip.

    `go mod download` fetches the zip once and prints where it unpacked it; later calls
    find it in the cache. Nothing of it is kept in this repository.
    """
    if shutil.which("go") is None:
        raise GoModuleUnavailable(f"go not found; {module}@{version} comes from Go's module proxy")
    result = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
        env={**os.environ, "GOFLAGS": ""},
        timeout=600,
    )
    if result.returncode != 0:
        raise GoModuleUnavailable(f"go mod download {module}@{version}:\n{result.stdout}")
    return Path(json.loads(result.stdout)["Dir"])


def cert_manager_crds() -> list[Path]:
    """cert-manager's CRDs (deploy/crds) from its release module (cert-manager.version)."""
    version = CERT_MANAGER_VERSION_FILE.read_text().strip()
    crds = sorted((go_module_dir(CERT_MANAGER_MODULE, version) / "deploy" / "crds").glob("*.yaml"))
    if not crds:
        raise GoModuleUnavailable(f"{CERT_MANAGER_MODULE}@{version} has no deploy/crds/*.yaml")
    return crds


PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_OPERATOR_VERSION_FILE = Path(__file__).with_name("prometheus-operator.version")


def pod_monitor_crd() -> dict[str, Any]:
    """prometheus-operator's PodMonitor CRD (monitoring.coreos.com/v1), verbatim from its
    release module (prometheus-operator.version): example/prometheus-operator-crd/."""
    version = PROMETHEUS_OPERATOR_VERSION_FILE.read_text().strip()
    directory = go_module_dir(PROMETHEUS_OPERATOR_MODULE, version)
    path = (
        directory / "example" / "prometheus-operator-crd" / "monitoring.coreos.com_podmonitors.yaml"
    )
    if not path.is_file():
        raise GoModuleUnavailable(f"{PROMETHEUS_OPERATOR_MODULE}@{version} has no {path.name}")
    crd: dict[str, Any] = yaml.safe_load(path.read_text())
    return crd
