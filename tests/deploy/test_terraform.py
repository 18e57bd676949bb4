"""The Terraform module in infra/, parsed with python-hcl2 and checked structurally."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .variants import INFRA, ROOT, blocks, load_hcl

MAIN = load_hcl(INFRA / "main.tf")
VARIABLES = blocks(load_hcl(INFRA / "variables.tf"), "variable")
RESOURCES = blocks(MAIN, "resource")
DATA = blocks(MAIN, "data")
OUTPUTS = blocks(load_hcl(INFRA / "outputs.tf"), "output")
EXAMPLE = load_hcl(INFRA / "example.tfvars")

SERVICE = RESOURCES["google_cloud_run_v2_service"]["castslice"]
TEMPLATE = SERVICE["template"][0]
CONTAINER = TEMPLATE["containers"][0]


def condition_regex(variable: str) -> re.Pattern[str]:
    """The regex of a `can(regex("…", var.x))` validation, unescaped from HCL."""
    condition = VARIABLES[variable]["validation"][0]["condition"]
    match = re.search(r'regex\("((?:[^"\\]|\\.)*)"', condition)
    assert match, condition
    return re.compile(match.group(1).replace("\\\\", "\\"))


def test_the_module_has_the_usual_files() -> None:
    for name in ("versions.tf", "variables.tf", "main.tf", "outputs.tf", "example.tfvars"):
        assert (INFRA / name).is_file(), name


def test_providers_are_pinned_to_a_range() -> None:
    terraform = load_hcl(INFRA / "versions.tf")["terraform"][0]
    assert terraform["required_version"].startswith(">=")
    providers = terraform["required_providers"][0]
    assert set(providers) == {"google", "kubernetes", "random"}
    for name, requirement in providers.items():
        assert requirement["source"] == f"hashicorp/{name}"
        lower, upper = (part.strip() for part in requirement["version"].split(","))
        assert lower.startswith(">= ") and upper.startswith("< "), requirement["version"]


def test_every_variable_is_described_typed_and_validated() -> None:
    for name, variable in VARIABLES.items():
        assert variable.get("description"), name
        assert variable.get("type"), name
        # Only a bool needs no validation: its type says it all.
        if variable["type"] != "bool":
            assert variable.get("validation"), f"variable {name} has no validation"


def test_min_instances_is_at_least_one_by_default_and_by_validation() -> None:
    variable = VARIABLES["min_instances"]
    assert variable["default"] >= 1
    assert "var.min_instances >= 1" in variable["validation"][0]["condition"]
    assert TEMPLATE["scaling"][0]["min_instance_count"] == "${var.min_instances}"


def test_max_instances_is_capped() -> None:
    conditions = " ".join(v["condition"] for v in VARIABLES["max_instances"]["validation"])
    assert "var.max_instances <= 100" in conditions
    assert "var.max_instances >= var.min_instances" in conditions
    assert TEMPLATE["scaling"][0]["max_instance_count"] == "${var.max_instances}"


def test_concurrency_and_timeout_are_set() -> None:
    assert TEMPLATE["max_instance_request_concurrency"] == "${var.concurrency}"
    assert TEMPLATE["timeout"] == "${var.request_timeout_seconds}s"
    assert VARIABLES["request_timeout_seconds"]["default"] >= 5  # the API server's timeoutSeconds


def comment_above(path: Path, statement: str) -> str:
    """The comment lines directly above the line that starts with `statement`."""
    lines = path.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip().startswith(statement))
    comment: list[str] = []
    for line in reversed(lines[:index]):
        if not line.strip().startswith("#"):
            break
        comment.insert(0, line.strip().lstrip("#").strip())
    return " ".join(comment)


def test_the_service_is_publicly_invocable_with_the_reason_beside_it() -> None:
    assert SERVICE["ingress"] == "INGRESS_TRAFFIC_ALL"
    assert SERVICE["invoker_iam_disabled"] is True
    reason = comment_above(INFRA / "main.tf", "invoker_iam_disabled")
    assert "API server" in reason and "Google identity" in reason, reason
    assert "API server" in comment_above(INFRA / "main.tf", "ingress")


def test_the_service_runs_the_pushed_image_by_digest() -> None:
    image = DATA["google_artifact_registry_docker_image"]["castslice"]
    assert image["repository_id"] == (
        "${google_artifact_registry_repository.castslice.repository_id}"
    )
    assert image["image_name"] == "${var.image}"
    # Reading the data source fails until the image exists, and the service depends on it.
    assert CONTAINER["image"] == "${data.google_artifact_registry_docker_image.castslice.self_link}"
    repository = RESOURCES["google_artifact_registry_repository"]["castslice"]
    assert repository["format"] == "DOCKER"


@pytest.mark.parametrize(
    ("image", "valid"),
    [
        ("castslice:3f2a9c1", True),
        ("castslice:manual-0b1d2c3e-aaaa-bbbb-cccc-0123456789ab", True),
        ("castslice@sha256:" + "a" * 64, True),
        ("castslice", False),
        ("europe-west1-docker.pkg.dev/p/castslice/castslice:3f2a9c1", False),
        ("castslice:", False),
    ],
)
def test_the_image_variable_takes_a_name_in_the_repository(image: str, valid: bool) -> None:
    assert bool(condition_regex("image").fullmatch(image)) is valid


def test_the_runtime_service_account_holds_no_role() -> None:
    assert TEMPLATE["service_account"] == "${google_service_account.runtime.email}"
    for kind, instances in RESOURCES.items():
        if kind.endswith(("_iam_member", "_iam_binding", "_iam_policy")):
            for name, grant in instances.items():
                members = str(grant.get("member", "")) + str(grant.get("members", ""))
                assert "google_service_account.runtime" not in members, f"{kind}.{name}"


def test_the_path_token_is_random_long_and_url_safe() -> None:
    token = RESOURCES["random_password"]["path_token"]
    assert token["special"] is False  # letters and digits: a valid URL path segment
    assert token["length"] == "${var.path_token_length}"
    assert (
        "var.path_token_length >= 16"
        in VARIABLES["path_token_length"]["validation"][0]["condition"]
    )
    env = {item["name"]: item["value"] for item in CONTAINER["env"]}
    assert env["CASTSLICE_PATH_TOKEN"] == "${random_password.path_token.result}"


def test_the_webhook_url_is_the_service_uri_plus_the_token() -> None:
    local = {key: value for block in MAIN["locals"] for key, value in block.items()}
    assert local["webhook_url"] == (
        "${google_cloud_run_v2_service.castslice.uri}/${random_password.path_token.result}"
    )


def test_the_webhook_uses_a_resource_that_can_express_match_conditions() -> None:
    # kubernetes_mutating_webhook_configuration_v1 has no match_conditions block.
    assert "kubernetes_mutating_webhook_configuration_v1" not in RESOURCES
    assert "kubernetes_mutating_webhook_configuration" not in RESOURCES
    assert set(RESOURCES["kubernetes_manifest"]) == {"webhook"}


def test_outputs_give_the_url_the_webhook_name_and_a_check_command() -> None:
    assert OUTPUTS["service_url"]["value"] == "${google_cloud_run_v2_service.castslice.uri}"
    assert OUTPUTS["webhook_name"]["value"] == "${local.webhook_settings.webhooks[0].name}"
    check = OUTPUTS["check_command"]["value"]
    assert "get mutatingwebhookconfiguration" in check
    for output in OUTPUTS.values():
        assert output.get("description")
        # The token must not leak through an output.
        assert "random_password" not in str(output["value"])


def test_example_tfvars_sets_only_declared_variables_with_valid_values() -> None:
    assert set(EXAMPLE) <= set(VARIABLES)
    required = {name for name, variable in VARIABLES.items() if "default" not in variable}
    assert required <= set(EXAMPLE)
    assert condition_regex("project_id").fullmatch(EXAMPLE["project_id"])
    assert condition_regex("region").fullmatch(EXAMPLE["region"])
    assert condition_regex("image").fullmatch(EXAMPLE["image"])
    assert 1 <= EXAMPLE["min_instances"] <= EXAMPLE["max_instances"] <= 100
    assert all(key.startswith("CASTSLICE_") for key in EXAMPLE["castslice_env"])


def _terraform() -> str:
    path = shutil.which("terraform")
    assert path, "the terraform marker selects these tests only where terraform is installed"
    return path


@pytest.mark.terraform
def test_terraform_files_are_formatted() -> None:
    result = subprocess.run(
        [_terraform(), "fmt", "-check", "-diff", "-recursive", str(INFRA)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_cpu_stays_allocated_between_requests() -> None:
    # Log lines are written just after each answer; a throttled instance would hold them.
    assert CONTAINER["resources"][0]["cpu_idle"] is False
