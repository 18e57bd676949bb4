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
CHECKS = blocks(MAIN, "check")
LOCAL = blocks(MAIN, "locals")
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
    for name in (
        "versions.tf",
        "variables.tf",
        "main.tf",
        "monitoring.tf",
        "gpu-node-pools.tf",
        "outputs.tf",
        "example.tfvars",
    ):
        assert (INFRA / name).is_file(), name


def test_providers_are_pinned_to_a_range() -> None:
    terraform = load_hcl(INFRA / "versions.tf")["terraform"][0]
    assert terraform["required_version"].startswith(">=")
    providers = terraform["required_providers"][0]
    assert set(providers) == {"google", "kubernetes", "random", "time"}
    for name, requirement in providers.items():
        assert requirement["source"] == f"hashicorp/{name}"
        lower, upper = (part.strip() for part in requirement["version"].split(","))
        assert lower.startswith(">= ") and upper.startswith("< "), requirement["version"]


def test_the_kubernetes_provider_is_one_that_ignores_kube_environment_variables() -> None:
    # 2.x lets KUBE_CTX, KUBE_CONFIG_PATH or KUBE_HOST override the provider block for
    # kubernetes_manifest: the webhook could be registered in another cluster.
    providers = load_hcl(INFRA / "versions.tf")["terraform"][0]["required_providers"][0]
    assert providers["kubernetes"]["version"].startswith(">= 3.0.0, ")


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


def test_the_service_runs_the_image_from_this_modules_repository() -> None:
    assert CONTAINER["image"] == "${local.image}"
    assert LOCAL["image"] == (
        "${var.region}-docker.pkg.dev/${var.project_id}/${var.repository_id}/${var.image}"
    )
    repository = RESOURCES["google_artifact_registry_repository"]["castslice"]
    assert repository["format"] == "DOCKER"
    assert repository["repository_id"] == "${var.repository_id}"
    assert repository["location"] == "${var.region}"


def test_a_deleted_image_tag_only_warns() -> None:
    # A data source the service read would fail every plan once a cleanup policy deletes
    # the first tag; a check block's data source only warns.
    assert "data" not in MAIN
    (lookup,) = CHECKS["image_is_pushed"]["data"]
    image = lookup["google_artifact_registry_docker_image"]["castslice"]
    assert image == {
        "location": "${var.region}",
        "repository_id": "${var.repository_id}",
        "image_name": "${var.image}",
    }
    (assertion,) = CHECKS["image_is_pushed"]["assert"]
    assert "data.google_artifact_registry_docker_image.castslice" in assertion["condition"]
    assert "push it before the first apply" in assertion["error_message"]


def test_terraform_leaves_what_gcloud_run_deploy_writes_alone() -> None:
    ignored = SERVICE["lifecycle"][0]["ignore_changes"]
    assert "${template[0].containers[0].image}" in ignored
    assert {"client", "client_version"} <= set(ignored)
    for annotation in (
        "client.knative.dev/user-image",
        "run.googleapis.com/client-name",
        "run.googleapis.com/client-version",
    ):
        assert f'${{template[0].annotations["{annotation}"]}}' in ignored
        assert f'${{annotations["{annotation}"]}}' in ignored


def test_a_fresh_project_gets_its_apis_before_the_service_account() -> None:
    apis = LOCAL["apis"]
    for api in ("artifactregistry", "iam", "run"):
        assert f'"{api}.googleapis.com"' in apis
    assert '"logging.googleapis.com", "monitoring.googleapis.com"' in apis
    account = RESOURCES["google_service_account"]["runtime"]
    assert account["depends_on"] == ["${google_project_service.apis}"]
    assert RESOURCES["google_project_service"]["apis"]["for_each"] == "${local.apis}"


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
    assert OUTPUTS["webhook_names"]["value"] == (
        "${[for webhook in local.webhook_settings.webhooks : webhook.name]}"
    )
    assert OUTPUTS["webhook_configuration_name"]["value"] == (
        "${local.webhook_manifest.metadata.name}"
    )
    check = OUTPUTS["check_command"]["value"]
    assert "get mutatingwebhookconfiguration ${local.webhook_manifest.metadata.name}" in check
    for output in OUTPUTS.values():
        assert output.get("description")


def test_no_output_shows_the_token_or_the_url_that_holds_it() -> None:
    for name, output in OUTPUTS.items():
        value = str(output["value"])
        for reference in ("random_password", "webhook_url", "kubernetes_manifest", "PATH_TOKEN"):
            assert reference not in value, (name, reference)
        assert "local.webhook_manifest" not in value.replace(
            "local.webhook_manifest.metadata.name", ""
        ), name
        assert "sensitive" not in output, name


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


def test_billing_is_request_based_unless_asked_otherwise() -> None:
    # CastSlice writes every log line before it answers: nothing runs between requests.
    assert CONTAINER["resources"][0]["cpu_idle"] == "${var.cpu_idle}"
    assert VARIABLES["cpu_idle"]["default"] is True
    assert VARIABLES["cpu_idle"]["type"] == "bool"


def test_the_service_gets_the_backend_settings_and_the_policy() -> None:
    environment = LOCAL["container_env"]
    for name, variable in (
        ("CASTSLICE_BACKEND", "var.backend"),
        ("CASTSLICE_SLICES_PER_GPU", "tostring(var.slices_per_gpu)"),
        ("CASTSLICE_SHARING_STRATEGY", "var.sharing_strategy"),
        ("CASTSLICE_SHARING_DEGREES", "var.sharing_degrees"),
        ("CASTSLICE_POLICY", "var.policy"),
    ):
        assert re.search(rf"{name}\s*=\s*[^\n]*{re.escape(variable)}", environment), name
    dynamic_env = CONTAINER["dynamic"][0]["env"]
    assert dynamic_env["for_each"] == "${local.container_env}"


def test_the_registration_is_named_by_a_variable() -> None:
    assert VARIABLES["webhook_name"]["default"] == "castslice"
    assert "var.webhook_name" in LOCAL["webhook_manifest"]
    shared_file = '"${path.module}/webhook/mutatingwebhookconfiguration.yaml"'
    assert (
        f"file(coalesce(var.webhook_configuration_file, {shared_file}))"
        in LOCAL["webhook_settings"]
    )


def test_a_plan_stops_when_registration_and_service_policy_differ() -> None:
    webhook = RESOURCES["kubernetes_manifest"]["webhook"]
    (precondition,) = webhook["lifecycle"][0]["precondition"]
    assert precondition["condition"] == ("${local.registration_policy == local.service_policy}")
    assert "castslice webhook" in precondition["error_message"]
