"""infra/ evaluated by Terraform itself, where it is installed (see terraform_offline.py).

The variable validations run on real input through `terraform plan`; the locals that
build the webhook registration and the service's settings are evaluated by `terraform
apply` of a provider-free copy, and the settings are read back by CastSlice's own
configuration loader.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from castslice.environment import load_config

from .conftest import kubectl
from .terraform_offline import Locals, module, plan, refusal, variable_args
from .variants import INFRA, SAMPLE_CLOUD_RUN_URI, SAMPLE_TOKEN, cloud_run_configuration

pytestmark = pytest.mark.terraform

EXAMPLE = f"-var-file={INFRA / 'example.tfvars'}"
# The backend and sharing settings CastSlice reads from its environment.
SHARING_SETTINGS = ("backend", "slices_per_gpu", "sharing_degrees", "sharing_strategy")


@pytest.fixture(scope="module")
def variables_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return module(tmp_path_factory.mktemp("variables"))


@pytest.fixture(scope="module")
def locals_module(tmp_path_factory: pytest.TempPathFactory) -> Locals:
    return Locals(
        tmp_path_factory.mktemp("locals"),
        ["webhook_manifest", "container_env", "registration_policy", "service_policy"],
        outputs=["check_command", "smoke_test_command", "webhook_configuration_name"],
    )


def test_example_tfvars_passes_every_validation(variables_module: Path) -> None:
    result = plan(variables_module, EXAMPLE)
    assert result.returncode == 0, result.stderr


def test_the_defaults_pass_every_validation(variables_module: Path) -> None:
    result = plan(variables_module, *variable_args())
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("assignments", "message"),
    [
        ({"min_instances": "0"}, "min_instances must be a whole number from 1"),
        ({"min_instances": "1.5"}, "min_instances must be a whole number"),
        ({"max_instances": "500"}, "max_instances must be a whole number from 1 to 100"),
        ({"min_instances": "4", "max_instances": "3"}, "max_instances must be at least min"),
        ({"path_token_length": "8"}, "path_token_length must be a whole number from 16"),
        ({"image": "europe-west1-docker.pkg.dev/p/r/castslice:v1"}, "image must be NAME:TAG"),
        ({"castslice_env": '{PORT="9000"}'}, "castslice_env keys must be CASTSLICE_*"),
        ({"castslice_env": '{CASTSLICE_PATH_TOKEN="x"}'}, "must not set CASTSLICE_PATH_TOKEN"),
        ({"castslice_env": '{CASTSLICE_BACKEND="gke"}'}, "(use the variables backend,"),
        ({"castslice_env": '{CASTSLICE_POLICY_FILE="/p"}'}, "the service has no file to read"),
        ({"deployer_service_account": "builder"}, "deployer_service_account must be"),
        ({"kube_context": " "}, "kube_context must be null or a non-empty"),
        ({"request_timeout_seconds": "2"}, "request_timeout_seconds must be a whole number"),
        ({"memory": "lots"}, "memory must be a quantity"),
        ({"webhook_name": "Cast_Slice"}, "webhook_name must be a Kubernetes object name"),
        ({"backend": "hami"}, "backend must be one of: resource, nvidia, gke, dra, mig"),
        ({"slices_per_gpu": "0"}, "slices_per_gpu must be a whole number from 1"),
        ({"slices_per_gpu": "1001"}, "slices_per_gpu must be a whole number from 1"),
        ({"slices_per_gpu": "2.5"}, "slices_per_gpu must be a whole number from 1"),
        ({"sharing_degrees": "[1]"}, "sharing_degrees must list whole numbers from 2"),
        ({"sharing_degrees": "[]"}, "sharing_degrees must list whole numbers from 2"),
        ({"sharing_degrees": "[2.5]"}, "sharing_degrees must list whole numbers from 2"),
        ({"sharing_degrees": "[4, 2, 4]"}, "sharing_degrees must not list a degree twice"),
        ({"sharing_strategy": "time-sharing"}, "sharing_strategy must be time-slicing or mps"),
        ({"policy": "namespaces: [research]"}, "policy must be YAML or JSON with a top-level"),
        ({"policy": "rules: everything"}, "policy must be YAML or JSON with a top-level"),
        ({"policy": "rules: [unclosed"}, "policy must be YAML or JSON with a top-level"),
        ({"notification_channels": '["alerts@example.com"]'}, "notification channel names"),
        ({"alert_thresholds": "{failed_open = -1}"}, "alert_thresholds must be whole numbers"),
        ({"alert_thresholds": "{server_errors = 0.5}"}, "alert_thresholds must be whole numbers"),
    ],
)
def test_invalid_values_are_refused_with_a_message(
    variables_module: Path, assignments: dict[str, str], message: str
) -> None:
    result = plan(variables_module, *variable_args(**assignments))
    assert message in refusal(result), result.stderr


def test_slices_per_gpu_may_go_up_to_the_configured_maximum(variables_module: Path) -> None:
    raised = {"castslice_env": '{CASTSLICE_MAX_SLICE_RATIO="5000"}'}
    assert plan(variables_module, *variable_args(**raised, slices_per_gpu="5000")).returncode == 0
    result = plan(variables_module, *variable_args(**raised, slices_per_gpu="5001"))
    assert "slices_per_gpu must be a whole number from 1" in refusal(result)


# Cloud Run's table: 1 vCPU takes 128 MiB to 4 GiB, 2 up to 8 GiB, 4 from 2 to 16 GiB,
# 6 from 4 to 24 GiB, 8 from 4 to 32 GiB.
@pytest.mark.parametrize(
    ("cpu", "memory", "accepted"),
    [
        ("1", "128Mi", True),
        ("1", "4Gi", True),
        ("1", "4097Mi", False),
        ("1", "127Mi", False),
        ("2", "8Gi", True),
        ("2", "9Gi", False),
        ("4", "2Gi", True),
        ("4", "2047Mi", False),
        ("4", "1Gi", False),
        ("4", "16Gi", True),
        ("6", "2Gi", False),
        ("6", "4Gi", True),
        ("6", "24Gi", True),
        ("6", "25Gi", False),
        ("8", "4096Mi", True),
        ("8", "32Gi", True),
        ("8", "3Gi", False),
    ],
)
def test_memory_must_fit_the_cpu_as_cloud_run_requires(
    variables_module: Path, cpu: str, memory: str, accepted: bool
) -> None:
    result = plan(variables_module, *variable_args(cpu=cpu, memory=memory))
    if accepted:
        assert result.returncode == 0, result.stderr
    else:
        assert f"memory {memory} does not go with cpu {cpu}" in refusal(result)


def test_a_malformed_memory_is_reported_once(variables_module: Path) -> None:
    message = refusal(plan(variables_module, *variable_args(cpu="4", memory="2GB")))
    assert "memory must be a quantity in Mi or Gi" in message
    assert "does not go with cpu" not in message


def test_terraform_builds_the_shared_webhook_with_the_url_as_only_change(
    locals_module: Locals,
) -> None:
    evaluated = locals_module.evaluate(*variable_args())
    assert evaluated["webhook_manifest"] == cloud_run_configuration(SAMPLE_CLOUD_RUN_URI)
    for webhook in evaluated["webhook_manifest"]["webhooks"]:
        assert webhook["clientConfig"] == {"url": f"{SAMPLE_CLOUD_RUN_URI}/{SAMPLE_TOKEN}"}


def test_the_configuration_name_is_a_variable_and_only_it_changes(locals_module: Locals) -> None:
    evaluated = locals_module.evaluate(*variable_args(webhook_name="castslice-staging"))
    expected = cloud_run_configuration(SAMPLE_CLOUD_RUN_URI)
    expected["metadata"] = {**expected["metadata"], "name": "castslice-staging"}
    assert evaluated["webhook_manifest"] == expected


def settings_of(environment: dict[str, str]) -> dict[str, Any]:
    """What CastSlice makes of an environment, for the settings Terraform manages."""
    config = load_config(environment)
    return {name: getattr(config, name) for name in SHARING_SETTINGS}


def test_the_default_settings_are_the_applications_defaults(locals_module: Locals) -> None:
    env = locals_module.evaluate(*variable_args())["container_env"]
    assert env == {
        "CASTSLICE_BACKEND": "resource",
        "CASTSLICE_SLICES_PER_GPU": "4",
        "CASTSLICE_SHARING_DEGREES": "4",
        "CASTSLICE_SHARING_STRATEGY": "time-slicing",
    }
    assert settings_of(env) == settings_of({})


def test_the_service_gets_the_settings_of_example_tfvars(locals_module: Locals) -> None:
    env = locals_module.evaluate(EXAMPLE)["container_env"]
    assert env == {
        "CASTSLICE_BACKEND": "gke",
        "CASTSLICE_SLICES_PER_GPU": "4",
        "CASTSLICE_SHARING_DEGREES": "2,4",
        "CASTSLICE_SHARING_STRATEGY": "time-slicing",
        "CASTSLICE_PRESETS": "training=4,inference=2,batch=2,dev=1",
    }
    assert settings_of(env) == {
        "backend": "gke",
        "slices_per_gpu": 4,
        "sharing_degrees": (2, 4),
        "sharing_strategy": "time-slicing",
    }


POLICY = """\
rules:
  - name: research
    namespaces: [research, "team-*"]
    optimize: true
    workloadType: dev
"""


def test_the_registration_and_the_service_get_one_policy(
    locals_module: Locals, tmp_path: Path
) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)
    generated = subprocess.run(
        [
            *(sys.executable, "-m", "castslice", "webhook"),
            *("--url", "https://castslice.invalid/", "--policy", str(tmp_path / "policy.yaml")),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (tmp_path / "webhook.yaml").write_text(generated)
    matched = locals_module.evaluate(
        *variable_args(webhook_configuration_file=str(tmp_path / "webhook.yaml")),
        f"-var=policy={POLICY}",
    )
    assert matched["container_env"]["CASTSLICE_POLICY"] == POLICY
    assert matched["registration_policy"] == matched["service_policy"]
    conditions = {c["name"] for c in matched["webhook_manifest"]["webhooks"][0]["matchConditions"]}
    assert "opted-in-or-enrolled" in conditions
    # The shipped registration knows no policy: the plan's precondition stops it.
    stale = locals_module.evaluate(*variable_args(), f"-var=policy={POLICY}")
    assert stale["registration_policy"] != stale["service_policy"]
    unset = locals_module.evaluate(*variable_args())
    assert unset["registration_policy"] == unset["service_policy"]


def test_non_default_settings_reach_the_application(locals_module: Locals) -> None:
    env = locals_module.evaluate(
        *variable_args(
            backend="nvidia",
            slices_per_gpu="8",
            sharing_degrees="[8, 2, 4]",
            sharing_strategy="mps",
            concurrency="10",
        )
    )["container_env"]
    assert "THREADS" not in env
    assert "CASTSLICE_POLICY" not in env
    assert settings_of(env) == {
        "backend": "nvidia",
        "slices_per_gpu": 8,
        "sharing_degrees": (2, 4, 8),
        "sharing_strategy": "mps",
    }


def test_the_smoke_test_prints_the_record_castslice_leaves_on_a_pod(
    locals_module: Locals, tmp_path: Path
) -> None:
    evaluated = locals_module.evaluate(*variable_args(kube_context="gpu-cluster"))
    argv = shlex.split(evaluated["smoke_test_command"])
    assert argv[:5] == ["kubectl", "--context", "gpu-cluster", "run", "castslice-smoke-test"]
    assert {"--dry-run=server", "--annotations=castops.io/optimize=true"} <= set(argv)
    overrides = json.loads(next(a for a in argv if a.startswith("--overrides=")).partition("=")[2])
    (container,) = overrides["spec"]["containers"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    # The Pod as CastSlice returns it, and the template the command prints it with.
    record = '{"slices":1,"source":"default","backend":"resource","original":{"c":"1"}}'
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": {"castslice.castops.io/applied": record}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    template = argv[argv.index("-o") + 1]
    printed = subprocess.run(
        [kubectl(), "annotate", "--local", "-f", str(tmp_path / "pod.json"), "x=y", "-o", template],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert printed.stdout == record


def test_the_check_command_names_the_configuration(locals_module: Locals) -> None:
    evaluated = locals_module.evaluate(*variable_args(webhook_name="castslice-staging"))
    assert evaluated["webhook_configuration_name"] == "castslice-staging"
    argv = shlex.split(evaluated["check_command"])
    assert argv[:4] == ["kubectl", "get", "mutatingwebhookconfiguration", "castslice-staging"]
