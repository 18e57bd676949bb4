"""infra/ evaluated by the terraform CLI without providers (they need the network).

Terraform can still evaluate variables and locals offline. A provider-free module is
built from infra/variables.tf, the shared webhook file and every `locals` block of
infra/*.tf, with the few resource attributes the locals read (the service URI, the
path token) supplied as variables; `terraform plan` then runs the variable
validations on real input, and `terraform apply` of that module (outputs only, a
throw-away local state) gives the locals' values.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .variants import INFRA, SAMPLE_CLOUD_RUN_URI, SAMPLE_TOKEN

# The resource attributes the locals read, and the variables standing in for them.
STAND_INS = {
    "google_cloud_run_v2_service.castslice.uri": "var.service_uri",
    "random_password.path_token.result": "var.path_token",
}
STAND_IN_VARIABLES = f"""
variable "service_uri" {{
  type    = string
  default = "{SAMPLE_CLOUD_RUN_URI}"
}}
variable "path_token" {{
  type    = string
  default = "{SAMPLE_TOKEN}"
}}
"""
# What the required variables are set to when a test does not say.
REQUIRED = {"project_id": "my-project", "image": "castslice:v1"}


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
        # Generous: the machine may be shared, and init and apply of a module take seconds.
        timeout=180,
    )


def all_locals() -> str:
    """Every `locals` block of infra/*.tf, resource attributes replaced by their stand-ins."""
    found: list[str] = []
    # The MIG profile table is copied whole beside variables.tf (module).
    for path in sorted(set(INFRA.glob("*.tf")) - {INFRA / "mig-profiles.tf"}):
        found += re.findall(r"^locals \{\n.*?^\}\n", path.read_text(), flags=re.M | re.S)
    text = "\n".join(found)
    for reference, stand_in in STAND_INS.items():
        text = text.replace(reference, stand_in)
    leftover = re.findall(r"\b(?:google|random|kubernetes|time|data)[_.][\w.]+", text)
    assert not leftover, f"locals read resources the tests do not stand in for: {leftover}"
    return text


def module(directory: Path, *extra: str) -> Path:
    """A provider-free module: infra/variables.tf with the MIG profile table its validations
    read, the shared webhook file, and `extra`."""
    shutil.copy(INFRA / "variables.tf", directory)
    shutil.copy(INFRA / "mig-profiles.tf", directory)
    shutil.copytree(INFRA / "webhook", directory / "webhook")
    for number, text in enumerate(extra):
        (directory / f"extra_{number}.tf").write_text(text)
    result = run(directory, "init", "-backend=false")
    assert result.returncode == 0, result.stderr
    return directory


def variable_args(**variables: str) -> list[str]:
    """-var arguments: the required variables plus `variables` (HCL values as strings)."""
    return [f"-var={name}={value}" for name, value in {**REQUIRED, **variables}.items()]


def plan(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(directory, "plan", "-lock=false", "-refresh=false", *args)


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    """Terraform's error output on one line, as it would read without its box drawing."""
    assert result.returncode != 0, "terraform accepted what it should refuse"
    return " ".join(result.stderr.replace("│", " ").split())


def shipped_outputs(names: Sequence[str]) -> str:
    """The output blocks called `names` from infra/outputs.tf, as they are written there."""
    source = (INFRA / "outputs.tf").read_text()
    found = []
    for name in names:
        (block,) = re.findall(rf'^output "{name}" \{{\n.*?^\}}\n', source, flags=re.M | re.S)
        found.append(block)
    return "\n".join(found)


class Locals:
    """The module's locals (and chosen outputs of infra/outputs.tf that read only locals
    and variables), evaluated by Terraform for a given set of variables."""

    def __init__(self, directory: Path, names: Sequence[str], outputs: Sequence[str] = ()) -> None:
        wrapped = "".join(f'output "{name}" {{\n  value = local.{name}\n}}\n' for name in names)
        self.directory = module(
            directory, all_locals(), STAND_IN_VARIABLES, wrapped, shipped_outputs(outputs)
        )

    def evaluate(self, *args: str) -> dict[str, Any]:
        """The locals' values for -var / -var-file `args` (each call starts a new state)."""
        state = self.directory / "terraform.tfstate"
        state.unlink(missing_ok=True)
        result = run(
            self.directory, "apply", "-auto-approve", "-lock=false", f"-state={state}", *args
        )
        assert result.returncode == 0, result.stderr
        outputs = run(self.directory, "output", "-json", f"-state={state}")
        assert outputs.returncode == 0, outputs.stderr
        return {name: output["value"] for name, output in json.loads(outputs.stdout).items()}
