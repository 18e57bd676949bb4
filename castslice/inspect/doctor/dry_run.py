"""Check: a server-side dry run of GPU Pods comes back as CastSlice's own decision says.

An opted-in Pod must come back rewritten, a Pod without the annotation
untouched. The expectation is computed here with the function's own decision
code and this configuration, so a function running other settings shows up.
A dry run goes through admission but stores nothing.
"""

from __future__ import annotations

import copy
import json

import jsonpatch

from castslice.contract import Manifest
from castslice.contract.cluster import ApiError, Cluster
from castslice.contract.definitions import APPLIED, OPTIMIZE, DecisionRecord
from castslice.contract.findings import Result, failed, passed
from castslice.decision.admission import Admission
from castslice.settings.config import Config

CHECK = "dry-run"
# The failure that means the API server did not get CastSlice's answer.
NOT_CALLED = "CastSlice was not called or failed open"
# Never pulled: a dry run schedules and runs nothing.
PROBE_IMAGE = "registry.k8s.io/pause:3.10"
_POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}


def probe_pod(config: Config, *, opted_in: bool) -> Manifest:
    """A Pod asking for one whole GPU, with or without `castops.io/optimize: "true"`."""
    gpu = {config.gpu_resource: "1"}
    metadata: Manifest = {
        "generateName": "castslice-doctor-",
        "labels": {"app.kubernetes.io/name": "castslice-doctor"},
    }
    if opted_in:
        metadata["annotations"] = {OPTIMIZE: "true"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "probe",
                    "image": PROBE_IMAGE,
                    "resources": {"requests": dict(gpu), "limits": dict(gpu)},
                }
            ],
        },
    }


def expected_pod(config: Config, pod: Manifest, namespace: str) -> Manifest:
    """`pod` as the function with `config` leaves it."""
    request = {
        "uid": "castslice-doctor",
        "kind": _POD_KIND,
        "operation": "CREATE",
        "namespace": namespace,
        "dryRun": True,
        "object": copy.deepcopy(pod),
    }
    response = Admission(config).review(request).response  # type: ignore[arg-type]
    if "patch" not in response:
        return copy.deepcopy(pod)
    return jsonpatch.apply_patch(pod, json.loads(response["patch"]))


def differences(expected: Manifest, answered: Manifest) -> list[str]:
    """What CastSlice decides and the answer shows differently: resources, nodeSelector, record."""
    problems = []
    want_containers = {c["name"]: c for c in expected["spec"]["containers"]}
    for container in answered.get("spec", {}).get("containers") or []:
        want = want_containers.get(container.get("name"), {}).get("resources") or {}
        have = container.get("resources") or {}
        if _quantities(have) != _quantities(want):
            problems.append(
                f"container {container.get('name')} has {_resources_text(have)}, "
                f"expected {_resources_text(want)}"
            )
    want_selector = expected["spec"].get("nodeSelector") or {}
    have_selector = answered.get("spec", {}).get("nodeSelector") or {}
    if have_selector != want_selector:
        problems.append(
            f"nodeSelector is {_labels_text(have_selector)}, expected {_labels_text(want_selector)}"
        )
    if _record(answered) != _record(expected):
        have_record, want_record = _record(answered), _record(expected)
        if want_record is None:
            problems.append(f"it carries {APPLIED}")
        elif have_record is None:
            problems.append(f"{APPLIED} is missing")
        elif (
            isinstance(have_record, DecisionRecord)
            and isinstance(want_record, DecisionRecord)
            and have_record.backend != want_record.backend
        ):
            problems.append(
                f"the function's backend is {have_record.backend}, "
                f"this configuration's is {want_record.backend}"
            )
        else:
            problems.append(f"{APPLIED} differs")
    return problems


def check_dry_run(cluster: Cluster, config: Config, namespace: str) -> Result:
    path = f"/api/v1/namespaces/{namespace}/pods"
    described = {True: "an opted-in GPU Pod", False: "a GPU Pod without castops.io/optimize"}
    for opted_in in (True, False):
        probe = probe_pod(config, opted_in=opted_in)
        expected = expected_pod(config, probe, namespace)
        try:
            answered = cluster.dry_run_create(path, probe)
        except ApiError as error:
            return failed(
                CHECK,
                f"a dry-run Pod create in namespace {namespace} was refused: "
                f"{error.status} {error.message}",
                "grant create on pods there (a dry run stores nothing), or pick another "
                "namespace with --namespace",
            )
        problems = differences(expected, answered)
        if not problems:
            continue
        what = described[opted_in]
        if opted_in and _record(answered) is None:
            return failed(
                CHECK,
                f"{what} came back unchanged from a dry run in namespace {namespace}: "
                + NOT_CALLED,
                "see the registration, endpoint and fail-open checks; the namespace must not "
                "be excluded by namespaceSelector",
            )
        return failed(
            CHECK,
            f"{what} came back from a dry run in namespace {namespace} not as this "
            f"configuration expects: {'; '.join(problems)}",
            "run castslice doctor with the CASTSLICE_* settings of the function",
        )
    return passed(
        CHECK,
        f"dry run in namespace {namespace}: an opted-in GPU Pod comes back rewritten "
        f"({_summary(config, namespace)}), one without the annotation untouched",
    )


def _summary(config: Config, namespace: str) -> str:
    expected = expected_pod(config, probe_pod(config, opted_in=True), namespace)
    resources = expected["spec"]["containers"][0]["resources"].get("limits") or {}
    templates = sorted(
        {
            claim.get("resourceClaimTemplateName")
            for claim in expected["spec"].get("resourceClaims") or ()
        }
    )
    text = _quantities_text(resources)
    if templates:
        claims = f"a claim from {', '.join(map(str, templates))}"
        text = f"{text}, {claims}" if resources else claims
    selector = expected["spec"].get("nodeSelector")
    return f"{text} on {_labels_text(selector)}" if selector else text


def _quantities(resources: Manifest) -> dict[str, dict[str, str]]:
    return {kind: dict(resources.get(kind) or {}) for kind in ("requests", "limits")}


def _resources_text(resources: Manifest) -> str:
    return _quantities_text(resources.get("limits") or resources.get("requests") or {})


def _quantities_text(quantities: Manifest) -> str:
    return ", ".join(f"{name}: {value}" for name, value in sorted(quantities.items())) or "nothing"


def _labels_text(labels: Manifest) -> str:
    return ", ".join(f"{key}={value}" for key, value in sorted(labels.items())) or "empty"


def _record(pod: Manifest) -> DecisionRecord | str | None:
    """The Pod's decision record; its text when it is not one CastSlice wrote."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(APPLIED)
    if text is None:
        return None
    return DecisionRecord.parse(text) or text
