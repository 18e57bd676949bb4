"""infra/ evaluated by Terraform itself, where it is installed.

Without the providers (which need the network) Terraform can still evaluate
variables and locals: these tests run the module's variable validations on
real input, and the locals that build the webhook from the shared file, with
the two resource attributes they read (the service URI, the token) supplied as
variables.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .variants import INFRA, SAMPLE_CLOUD_RUN_URI, SAMPLE_TOKEN, cloud_run_configuration

# The resource attributes the locals read, and the variables standing in for them.
STAND_INS = {
    "google_cloud_run_v2_service.castslice.uri": "var.service_uri",
    "random_password.path_token.result": "var.path_token",
}


pytestmark = pytest.mark.terraform


def terraform() -> str:
    path = shutil.which("terraform")
    assert path, "the terraform marker selects these tests only where terraform is installed"
    return path


def run(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TF_IN_AUTOMATION": "1",
        "TF_INPUT": "0",
        # No user CLI configuration (plugin caches, credentials) leaks into the test.
        "TF_CLI_CONFIG_FILE": os.devnull,
        "CHECKPOINT_DISABLE": "1",
    }
    return subprocess.run(
        [terraform(), *args, "-no-color"],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def module(directory: Path, *extra: str) -> Path:
    """A provider-free module: infra/variables.tf, the shared webhook file, and `extra`."""
    shutil.copy(INFRA / "variables.tf", directory)
    shutil.copytree(INFRA / "webhook", directory / "webhook")
    for number, text in enumerate(extra):
        (directory / f"extra_{number}.tf").write_text(text)
    result = run(directory, "init", "-backend=false")
    assert result.returncode == 0, result.stderr
    return directory


def plan(directory: Path, *variables: str) -> subprocess.CompletedProcess[str]:
    return run(directory, "plan", "-lock=false", "-refresh=false", *variables)


@pytest.fixture(scope="module")
def variables_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return module(tmp_path_factory.mktemp("variables"))


def test_example_tfvars_passes_every_validation(variables_module: Path) -> None:
    result = plan(variables_module, f"-var-file={INFRA / 'example.tfvars'}")
    assert result.returncode == 0, result.stderr


def test_the_defaults_pass_every_validation(variables_module: Path) -> None:
    result = plan(variables_module, "-var=project_id=my-project", "-var=image=castslice:v1")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("assignments", "message"),
    [
        (["min_instances=0"], "min_instances must be a whole number from 1"),
        (["min_instances=1.5"], "min_instances must be a whole number"),
        (["max_instances=500"], "max_instances must be a whole number from 1 to 100"),
        (["min_instances=4", "max_instances=3"], "max_instances must be at least min_instances"),
        (["path_token_length=8"], "path_token_length must be a whole number from 16"),
        (["image=europe-west1-docker.pkg.dev/p/r/castslice:v1"], "image must be NAME:TAG"),
        (['castslice_env={CASTSLICE_PATH_TOKEN="x"}'], "castslice_env keys must be"),
        (['castslice_env={PORT="9000"}'], "castslice_env keys must be"),
        (["deployer_service_account=builder"], "deployer_service_account must be"),
        (["kube_context= "], "kube_context must be null or a non-empty"),
        (["request_timeout_seconds=2"], "request_timeout_seconds must be a whole number"),
        (["memory=lots"], "memory must be a quantity"),
    ],
)
def test_invalid_values_are_refused_with_a_message(
    variables_module: Path, assignments: list[str], message: str
) -> None:
    required = {"project_id": "my-project", "image": "castslice:v1"}
    given = dict(assignment.split("=", 1) for assignment in assignments)
    args = [f"-var={name}={value}" for name, value in {**required, **given}.items()]
    result = plan(variables_module, *args)
    assert result.returncode != 0
    assert message in " ".join(result.stderr.split()), result.stderr


def locals_of_main() -> str:
    """main.tf's locals block, with the resource attributes replaced by their stand-ins."""
    source = (INFRA / "main.tf").read_text()
    (block,) = re.findall(r"^locals \{\n.*?^\}\n", source, flags=re.MULTILINE | re.DOTALL)
    for reference, stand_in in STAND_INS.items():
        block = block.replace(reference, stand_in)
    leftover = re.findall(r"\b(?:google|random|kubernetes|data)[_.][\w.]+", block)
    assert not leftover, f"locals read resources the test does not stand in for: {leftover}"
    return block


def evaluate_locals(directory: Path, *variables: str) -> dict[str, Any]:
    stand_ins = """
variable "service_uri" { type = string }
variable "path_token" { type = string }
output "webhook_manifest" { value = local.webhook_manifest }
output "container_env" { value = local.container_env }
"""
    module(directory, locals_of_main(), stand_ins)
    state = directory / "terraform.tfstate"
    result = run(directory, "apply", "-auto-approve", "-lock=false", f"-state={state}", *variables)
    assert result.returncode == 0, result.stderr
    outputs = run(directory, "output", "-json", f"-state={state}")
    assert outputs.returncode == 0, outputs.stderr
    return {name: output["value"] for name, output in json.loads(outputs.stdout).items()}


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return evaluate_locals(
        tmp_path_factory.mktemp("locals"),
        f"-var-file={INFRA / 'example.tfvars'}",
        f"-var=service_uri={SAMPLE_CLOUD_RUN_URI}",
        f"-var=path_token={SAMPLE_TOKEN}",
    )


def test_terraform_builds_the_shared_webhook_with_the_url_as_only_change(
    evaluated: dict[str, Any],
) -> None:
    assert evaluated["webhook_manifest"] == cloud_run_configuration(SAMPLE_CLOUD_RUN_URI)
    (webhook,) = evaluated["webhook_manifest"]["webhooks"]
    assert webhook["clientConfig"] == {"url": f"{SAMPLE_CLOUD_RUN_URI}/{SAMPLE_TOKEN}"}


def test_the_service_gets_the_castslice_settings_and_matching_threads(
    evaluated: dict[str, Any],
) -> None:
    assert evaluated["container_env"] == {
        "CASTSLICE_SHARED_RESOURCE": "nvidia.com/gpu-shared",
        "THREADS": "40",
    }
