"""CASTSLICE_SCHEDULER_NAME: the Pods CastSlice rewrites go to a second scheduler, and only
they; a Pod that names a scheduler of its own keeps it, and everything else it asked for.

Every patch is applied (jsonpatch) to the Pod that was sent and the whole result compared.
The two real schedulers side by side are in tests/e2e/test_second_scheduler.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import kubernetes_validate
import pytest
from starlette.testclient import TestClient

from castslice.backends import PLACERS
from castslice.environment import load_config
from castslice.settings.config import ConfigError
from tests.factories import (
    applied,
    apply_response,
    gpu_container,
    make_pod,
    make_review,
    opted_in,
    review_response,
)
from tests.helpers import claimed, pod_of, template_of, workload

SECOND = "castslice-scheduler"
TYPE = "castops.io/workload-type"
SETTINGS = {"CASTSLICE_BACKEND": "dra", "CASTSLICE_SCHEDULER_NAME": SECOND}


def pod_with(annotations: dict[str, str], **spec: object) -> dict:
    pod = make_pod(annotations, containers=[gpu_container("app")])
    pod["spec"].update(spec)
    return pod


def rewritten(pod: dict, template: str, slices: int, source: str) -> dict:
    """What the dra backend makes of `pod`, sent to the second scheduler."""
    want = applied(claimed(pod, [template]), slices, source, {"app": "1"}, backend="dra")
    want["spec"]["schedulerName"] = SECOND
    return want


@pytest.mark.parametrize(
    "spec",
    [{}, {"schedulerName": "default-scheduler"}, {"schedulerName": SECOND}],
    ids=["unset", "the API server's default", "already the second"],
)
@pytest.mark.parametrize(
    ("annotations", "template", "slices", "source"),
    [
        ({"castops.io/workload-type": "dev"}, "castslice-1-of-4", 1, "workload-type"),
        ({"castops.io/workload-type": "training"}, "castslice-4-of-4", 4, "workload-type"),
    ],
    ids=["a share", "a whole GPU"],
)
def test_every_rewritten_pod_shares_and_whole_gpus_goes_to_the_second_scheduler(
    make_client: Callable[..., TestClient],
    spec: dict,
    annotations: dict,
    template: str,
    slices: int,
    source: str,
) -> None:
    # Whole devices too: a whole-GPU claim from another scheduler could be allocated the
    # device a share was just given, as neither scheduler sees the other's allocation yet.
    pod = pod_with(opted_in(**annotations), **spec)
    response = review_response(make_client(**SETTINGS), make_review(pod))
    want = rewritten(pod, template, slices, source)
    assert apply_response(pod, response) == want
    kubernetes_validate.validate(want, "1.37.0", strict=True)
    assert response["auditAnnotations"]["scheduler"] == SECOND


def test_a_pod_that_did_not_opt_in_keeps_its_scheduler_and_everything_else(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(**SETTINGS)
    for opt in ({}, {"castops.io/optimize": "false"}):
        pod = pod_with(opt, schedulerName="default-scheduler")
        response = review_response(client, make_review(pod))
        assert "patch" not in response
        assert apply_response(pod, response) == pod


@pytest.mark.parametrize("named", ["volcano", "my-scheduler"])
def test_a_pod_naming_its_own_scheduler_is_left_unchanged_with_a_warning(
    make_client: Callable[..., TestClient], named: str
) -> None:
    pod = pod_with(opted_in(**{"castops.io/workload-type": "dev"}), schedulerName=named)
    response = review_response(make_client(**SETTINGS), make_review(pod))
    assert "patch" not in response
    assert apply_response(pod, response) == pod
    assert response["warnings"] == [
        f'spec.schedulerName is "{named}", not "{SECOND}"; castslice left the Pod unchanged'
    ]


def test_without_the_setting_the_scheduler_is_never_touched(
    make_client: Callable[..., TestClient],
) -> None:
    pod = pod_with(opted_in(), schedulerName="volcano")
    response = review_response(make_client(CASTSLICE_BACKEND="dra"), make_review(pod))
    want = applied(claimed(pod, ["castslice-1-of-4"]), 1, "default", {"app": "1"}, backend="dra")
    assert apply_response(pod, response) == want
    assert "scheduler" not in response["auditAnnotations"]


def test_a_long_foreign_scheduler_name_keeps_the_warning_short(
    make_client: Callable[..., TestClient],
) -> None:
    pod = pod_with(opted_in(), schedulerName="s" * 253)
    response = review_response(make_client(**SETTINGS), make_review(pod))
    [warning] = response["warnings"]
    assert len(warning) <= 120 and warning.startswith('spec.schedulerName is "sss')


@pytest.mark.parametrize("backend", [name for name in PLACERS if name != "dra"])
def test_the_setting_is_refused_where_other_schedulers_could_place_on_the_same_gpus(
    backend: str,
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config({"CASTSLICE_BACKEND": backend, "CASTSLICE_SCHEDULER_NAME": SECOND})
    message = str(refused.value)
    assert message.startswith(
        f"CASTSLICE_SCHEDULER_NAME is set, but with CASTSLICE_BACKEND={backend} it cannot"
    )
    assert "DeviceTaintRule" in message


@pytest.mark.parametrize("bad", ["Castslice", "castslice_scheduler", "a" * 254])
def test_a_name_the_api_server_would_refuse_is_refused_naming_the_variable(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"CASTSLICE_SCHEDULER_NAME=.* is not a scheduler name"):
        load_config({"CASTSLICE_BACKEND": "dra", "CASTSLICE_SCHEDULER_NAME": bad})


def test_policy_mode_refuses_to_leave_the_scheduler_out() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "castslice", "policy"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **SETTINGS},
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "policy mode" in done.stderr


def test_the_rewritten_pod_is_never_changed_again(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(**SETTINGS)
    pod = pod_with(opted_in(), schedulerName="default-scheduler")
    once = apply_response(pod, review_response(client, make_review(pod)))
    again = review_response(client, make_review(once))
    assert apply_response(once, again) == once


def test_a_deployment_whose_pods_name_their_own_scheduler_is_warned_as_they_would_be(
    make_client: Callable[..., TestClient],
) -> None:
    from tests.factories import assert_warned_only, workload_review

    client = make_client(**SETTINGS)
    manifest = workload("Deployment", template_annotations=opted_in(**{TYPE: "dev"}))
    template_of(manifest)["spec"]["schedulerName"] = "volcano"
    warnings = assert_warned_only(review_response(client, workload_review(manifest)))
    assert warnings == review_response(client, make_review(pod_of(manifest)))["warnings"]
    assert warnings == [
        f'spec.schedulerName is "volcano", not "{SECOND}"; castslice left the Pod unchanged'
    ]


def test_the_start_line_names_the_scheduler_pods_are_sent_to() -> None:
    from castslice.serve.start import settings_fields

    assert settings_fields(load_config(SETTINGS))["schedulerName"] == SECOND
    assert settings_fields(load_config({"CASTSLICE_BACKEND": "dra"}))["schedulerName"] is None
