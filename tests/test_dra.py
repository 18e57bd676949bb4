"""The `dra` backend: GPU containers claim shares of a device through shipped templates.

Each patch is applied (jsonpatch) to the Pod that was sent and the whole result
compared; the Pods and templates are validated against Kubernetes 1.37's schema.
The real scheduler's view of the same claims is in tests/e2e/test_dra.py.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import kubernetes_validate
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from castslice.backends.dra.claim_templates import (
    MAX_TEMPLATES,
    claim_shape,
    claim_template,
    claim_templates,
    default_counts,
    memory_quantity,
    reachable_counts,
    template_name,
)
from castslice.environment import load_config
from castslice.settings.config import Config
from castslice.settings.enrolment_policy import load_policy
from tests.factories import (
    APPLIED,
    GPU,
    applied,
    apply_response,
    container,
    gpu_container,
    make_pod,
    make_review,
    opted_in,
    review_response,
)
from tests.helpers import claimed

KUBERNETES = "1.37.0"
DRA = {"CASTSLICE_BACKEND": "dra"}


def validate(manifest: dict) -> None:
    kubernetes_validate.validate(manifest, KUBERNETES, strict=True)


def dra_pod(annotations: dict[str, str], *containers: dict, **spec: object) -> dict:
    pod = make_pod(annotations, containers=list(containers) or [gpu_container("app")])
    pod["spec"].update(spec)
    return pod


@pytest.mark.parametrize(
    ("annotations", "slices", "template"),
    [
        ({"castops.io/workload-type": "dev"}, 1, "castslice-1-of-4"),
        ({"castops.io/workload-type": "inference"}, 2, "castslice-2-of-4"),
        ({"castops.io/workload-type": "training"}, 4, "castslice-4-of-4"),
        ({"castops.io/slice-ratio": "3"}, 3, "castslice-3-of-4"),
        ({"castops.io/slice-ratio": "5"}, 5, "castslice-8-of-4"),
        ({"castops.io/slice-ratio": "8"}, 8, "castslice-8-of-4"),
        ({}, 1, "castslice-1-of-4"),
    ],
)
def test_each_gpu_container_claims_the_template_of_its_slice_count(
    make_client: Callable[..., TestClient], annotations: dict, slices: int, template: str
) -> None:
    client = make_client(**DRA)
    pod = dra_pod(opted_in(**annotations))
    response = review_response(client, make_review(pod))
    source = next(
        (s for s in ("slice-ratio", "workload-type") if f"castops.io/{s}" in annotations),
        "default",
    )
    want = applied(claimed(pod, [template]), slices, source, {"app": "1"}, backend="dra")
    assert apply_response(pod, response) == want
    validate(want)
    assert response["auditAnnotations"]["backend"] == "dra"


def test_every_gpu_container_gets_a_claim_of_its_own(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(**DRA)
    request_only = container("sidecar", requests={GPU: "1"})
    pod = make_pod(
        opted_in(**{"castops.io/workload-type": "inference"}),
        containers=[gpu_container("app"), container("plain", requests={"cpu": "1"}), request_only],
        init_containers=[{**gpu_container("proxy"), "restartPolicy": "Always"}],
    )
    response = review_response(client, make_review(pod))
    lists = ("initContainers", "containers")
    want = claimed(pod, ["castslice-2-of-4"] * 3, lists)
    want = applied(want, 2, "workload-type", {"proxy": "1", "app": "1", "sidecar": "1"}, "dra")
    assert apply_response(pod, response) == want
    validate(want)


def test_a_plain_init_container_uses_the_first_app_containers_claim(
    make_client: Callable[..., TestClient],
) -> None:
    """A model download before `training` costs no second GPU: the Pod holds max(init, app)."""
    client = make_client(**DRA)
    pod = make_pod(
        opted_in(**{"castops.io/workload-type": "training"}),
        containers=[gpu_container("trainer"), gpu_container("eval")],
        init_containers=[
            gpu_container("download"),
            {**gpu_container("proxy"), "restartPolicy": "Always"},
            gpu_container("warmup"),
        ],
    )
    response = review_response(client, make_review(pod))
    want = copy.deepcopy(pod)
    spec = want["spec"]
    for item, claim in zip(
        [*spec["initContainers"], *spec["containers"]],
        [
            "castslice-gpu-1",
            "castslice-gpu-0",
            "castslice-gpu-1",
            "castslice-gpu-1",
            "castslice-gpu-2",
        ],
        strict=True,
    ):
        for field in ("requests", "limits"):
            del item["resources"][field][GPU]
        item["resources"]["claims"] = [{"name": claim}]
    spec["resourceClaims"] = [
        {"name": f"castslice-gpu-{n}", "resourceClaimTemplateName": "castslice-4-of-4"}
        for n in range(3)
    ]
    original = {name: "1" for name in ("download", "proxy", "warmup", "trainer", "eval")}
    want = applied(want, 4, "workload-type", original, "dra")
    assert apply_response(pod, response) == want
    validate(want)


def test_plain_init_containers_without_a_gpu_app_container_share_one_claim(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(**DRA)
    pod = make_pod(
        opted_in(),
        containers=[container("app", requests={"cpu": "1"})],
        init_containers=[gpu_container("first"), gpu_container("second")],
    )
    patched = apply_response(pod, review_response(client, make_review(pod)))
    assert [c["resources"]["claims"] for c in patched["spec"]["initContainers"]] == [
        [{"name": "castslice-gpu-0"}]
    ] * 2
    assert patched["spec"]["resourceClaims"] == [
        {"name": "castslice-gpu-0", "resourceClaimTemplateName": "castslice-1-of-4"}
    ]


def test_an_empty_claims_list_is_appended_to(make_client: Callable[..., TestClient]) -> None:
    client = make_client(**DRA)
    pod = dra_pod(opted_in(), resourceClaims=[])
    response = review_response(client, make_review(pod))
    paths = [op["path"] for op in json.loads(_patch_text(response))]
    assert "/spec/resourceClaims/-" in paths
    assert apply_response(pod, response) == applied(
        claimed(pod, ["castslice-1-of-4"]), 1, "default", {"app": "1"}, backend="dra"
    )


def _patch_text(response: dict) -> str:
    import base64

    return base64.b64decode(response["patch"]).decode()


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (
            {"resourceClaims": [{"name": "mine", "resourceClaimTemplateName": "my-gpu"}]},
            "the Pod has its own resource claims; castslice left the Pod unchanged",
        ),
        ({"nodeName": "gpu-node-1"}, "spec.nodeName set by hand; castslice left the Pod unchanged"),
    ],
)
def test_a_pod_with_its_own_claims_or_node_is_left_alone(
    make_client: Callable[..., TestClient], spec: dict, reason: str
) -> None:
    client = make_client(**DRA)
    pod = dra_pod(opted_in(), **spec)
    response = review_response(client, make_review(pod))
    assert "patch" not in response
    assert response["warnings"] == [reason]


def test_a_container_claim_alone_also_means_the_pod_uses_dra(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(**DRA)
    own = gpu_container("app")
    own["resources"]["claims"] = [{"name": "mine"}]
    response = review_response(client, make_review(dra_pod(opted_in(), own)))
    assert "patch" not in response
    assert response["warnings"] == [
        "the Pod has its own resource claims; castslice left the Pod unchanged"
    ]


def test_a_fractional_share_warns_what_dra_does_not_give(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(**DRA)
    shared = review_response(client, make_review(dra_pod(opted_in())))
    assert shared["warnings"] == [
        "dra: the 1/4 GPU share is scheduler bookkeeping; sharing processes get no memory "
        "isolation from time-slicing"
    ]
    whole = dra_pod(opted_in(**{"castops.io/workload-type": "training"}))
    assert "warnings" not in review_response(client, make_review(whole))


@pytest.mark.parametrize(
    ("settings", "ratio", "missing"),
    [
        ({}, "8", "castslice-8-of-4"),
        ({}, "5", "castslice-8-of-4"),
        ({}, "3", None),
        ({}, "4", None),
        # Few enough reachable counts: every one is rendered.
        ({"CASTSLICE_MAX_SLICE_RATIO": "16"}, "16", None),
        ({"CASTSLICE_PRESETS": "training=8"}, "8", None),
    ],
)
def test_a_slice_ratio_without_a_rendered_template_warns_naming_it(
    make_client: Callable[..., TestClient], settings: dict, ratio: str, missing: str | None
) -> None:
    client = make_client(**DRA, **settings)
    pod = dra_pod(opted_in(**{"castops.io/slice-ratio": ratio}))
    warnings = review_response(client, make_review(pod)).get("warnings", [])
    named = [w for w in warnings if "is not among the claim templates" in w]
    if missing is None:
        assert named == []
    else:
        assert named == [
            f"dra: {missing} is not among the claim templates made for these settings (every "
            "share of a GPU and the counts of the presets, the default and the policy), so the "
            "Pod stays Pending unless its namespace has it: apply it with castslice "
            "claim-templates --slices, or lower castops.io/slice-ratio"
        ]
        config = load_config({**DRA, **settings})
        assert missing not in {template_name(config, c) for c in default_counts(config).counts}


def test_the_record_keeps_the_pod_from_being_changed_again(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(**DRA)
    pod = dra_pod(opted_in())
    once = apply_response(pod, review_response(client, make_review(pod)))
    assert json.loads(once["metadata"]["annotations"][APPLIED])["backend"] == "dra"
    again = review_response(client, make_review(once))
    assert again == {"uid": again["uid"], "allowed": True}


@pytest.mark.parametrize(
    ("per_gpu", "slices", "devices", "shares"),
    [
        (4, 1, 1, 1),
        (4, 3, 1, 3),
        (4, 4, 1, 4),
        (4, 5, 2, 4),
        (4, 8, 2, 4),
        (4, 9, 3, 4),
        (8, 2, 1, 2),
    ],
)
def test_fractional_shares_use_one_device_whole_ones_every_share(
    per_gpu: int, slices: int, devices: int, shares: int
) -> None:
    shape = claim_shape(Config(backend="dra", slices_per_gpu=per_gpu), slices)
    assert (shape.devices, shape.shares) == (devices, shares)


@pytest.mark.parametrize(
    ("memory", "slices", "asked"),
    [
        ("80Gi", 1, "20Gi"),
        ("80Gi", 2, "40Gi"),
        ("80Gi", 3, "60Gi"),
        ("15Gi", 1, "3840Mi"),
        # 1000 MiB / 3: rounded up to the driver's 1 MiB step, never below the share.
        ("1000Mi", 1, "334Mi"),
        ("80Gi", 4, None),
        ("80Gi", 8, None),
    ],
)
def test_memory_is_asked_in_proportion_and_never_for_whole_devices(
    memory: str, slices: int, asked: str | None
) -> None:
    per_gpu = 3 if memory == "1000Mi" else 4
    config = load_config(
        {
            **DRA,
            "CASTSLICE_DRA_GPU_MEMORY": memory,
            "CASTSLICE_SLICES_PER_GPU": str(per_gpu),
        }
    )
    requests = claim_template(config, slices)["spec"]["spec"]["devices"]["requests"]
    capacity = requests[0]["exactly"]["capacity"]["requests"]
    assert capacity.get("memory") == asked
    assert capacity["shares"] == str(min(slices, per_gpu))


def test_memory_quantities_stay_whole() -> None:
    assert [memory_quantity(size) for size in (2**40, 3 * 2**30, 3840 * 2**20, 3072, 1536)] == [
        "1Ti",
        "3Gi",
        "3840Mi",
        "3Ki",
        "1536",
    ]


def test_templates_are_valid_and_name_the_configured_class_and_capacity() -> None:
    config = load_config(
        {
            **DRA,
            "CASTSLICE_DRA_DEVICE_CLASS": "gpu.example.com",
            "CASTSLICE_DRA_CAPACITY": "example.com/slices",
            "CASTSLICE_DRA_GPU_MEMORY": "24Gi",
        }
    )
    templates = claim_templates(config, ["team-a", "team-b"], [1, 4])
    assert [(t["metadata"]["namespace"], t["metadata"]["name"]) for t in templates] == [
        ("team-a", "castslice-1-of-4"),
        ("team-a", "castslice-4-of-4"),
        ("team-b", "castslice-1-of-4"),
        ("team-b", "castslice-4-of-4"),
    ]
    for template in templates:
        validate(template)
    assert templates[0]["spec"] == {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.example.com",
                            "allocationMode": "ExactCount",
                            "count": 1,
                            "capacity": {"requests": {"example.com/slices": "1", "memory": "6Gi"}},
                            "tolerations": [
                                {"key": "castslice.castops.io/shared", "operator": "Exists"}
                            ],
                        },
                    }
                ]
            }
        }
    }


def test_the_webhook_and_the_templates_agree_on_every_name() -> None:
    """Every slice count a Pod can get names a template the renderer makes."""
    config = load_config({**DRA, "CASTSLICE_MAX_SLICE_RATIO": "40"})
    counts, note = default_counts(config)
    assert note is None
    rendered = {t["metadata"]["name"] for t in claim_templates(config, [None], counts)}
    assert {template_name(config, s) for s in range(1, 41)} == rendered


def test_too_many_reachable_counts_render_the_configured_ones_and_say_what_to_do() -> None:
    policy = "rules: [{name: big, optimize: true, slices: 12}]"
    config = load_config({**DRA, "CASTSLICE_POLICY": policy})
    assert len(reachable_counts(config)) > MAX_TEMPLATES
    counts, note = default_counts(config)
    assert counts == (1, 2, 3, 4, 12)
    assert note is not None
    assert "--slices" in note
    assert "CASTSLICE_MAX_SLICE_RATIO=12" in note
    assert load_policy(policy, config.presets, 1000) is not None


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "castslice", "claim-templates", *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        check=False,
    )


def test_the_command_prints_the_renderer_output() -> None:
    import yaml

    done = _cli("-n", "ml", "--slices", "2,1,5", **DRA)
    assert done.returncode == 0, done.stderr
    config = load_config(DRA)
    assert list(yaml.safe_load_all(done.stdout)) == claim_templates(config, ["ml"], [1, 2, 8])
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--slices", "1,x"), "--slices: 'x' is not a slice count"),
        (("--slices", "0"), "--slices: '0' is not a slice count"),
        (("-n", "Team_A"), "--namespace 'Team_A' is not a namespace name"),
        (("--dra-gpu-memory", "80G"), "--dra-gpu-memory='80G' must be one GPU's memory"),
        (("--dra-capacity", "9shares"), "--dra-capacity='9shares' is not a device capacity"),
        (("--helm-values", "-n", "ml"), "--helm-values renders every template"),
        (("--helm-values", "--slices", "8"), "--helm-values renders every template"),
    ],
)
def test_the_command_names_bad_input(args: tuple[str, ...], message: str) -> None:
    done = _cli(*args, **DRA)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_namespaces_the_policy_enrols_by_name_get_templates_like_listed_ones(
    tmp_path: Path,
) -> None:
    import yaml

    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "rules:\n"
        "  - {name: production, namespaces: [prod], optimize: false}\n"
        "  - {name: ml, namespaces: [ml, research, 'team-*'], optimize: true, slices: 8}\n"
    )
    env = {**DRA, "CASTSLICE_POLICY_FILE": str(policy)}
    done = _cli("-n", "ml", "-n", "lab", **env)
    assert done.returncode == 0, done.stderr
    found = [
        (t["metadata"]["namespace"], t["metadata"]["name"]) for t in yaml.safe_load_all(done.stdout)
    ]
    # The rule's 8 slices are two whole GPUs; `team-*` names no namespace yet.
    names = [f"castslice-{s}-of-4" for s in (1, 2, 3, 4, 8)]
    assert found == [(ns, name) for ns in ("ml", "lab", "research") for name in names]
    # Without -n the output is for `kubectl apply -n`, and says which namespaces to add.
    bare = _cli(**env)
    assert {t["metadata"].get("namespace") for t in yaml.safe_load_all(bare.stdout)} == {None}
    assert "the policy enrols ml, research by name; give -n" in bare.stderr
    refused = _cli("--helm-values", **env)
    assert refused.returncode == 2
    assert "castslice webhook --helm-values --policy FILE" in refused.stderr


def test_the_flags_set_what_the_environment_would() -> None:
    import yaml

    flags = ("--backend", "dra", "--slices-per-gpu", "8", "--dra-gpu-memory", "80Gi")
    flags += ("--dra-device-class", "gpu.example.com", "--dra-capacity", "example.com/slices")
    done = _cli(*flags, "--slices", "2")
    assert done.returncode == 0, done.stderr
    config = load_config(
        {
            **DRA,
            "CASTSLICE_SLICES_PER_GPU": "8",
            "CASTSLICE_DRA_GPU_MEMORY": "80Gi",
            "CASTSLICE_DRA_DEVICE_CLASS": "gpu.example.com",
            "CASTSLICE_DRA_CAPACITY": "example.com/slices",
        }
    )
    (template,) = yaml.safe_load_all(done.stdout)
    assert template == claim_template(config, 2)
    exactly = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["deviceClassName"] == "gpu.example.com"
    assert exactly["capacity"]["requests"] == {"example.com/slices": "2", "memory": "20Gi"}


def test_policy_mode_refuses_dra_with_the_reason() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "castslice", "policy"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **DRA},
        check=False,
    )
    assert done.returncode == 2
    assert "dra backend adds resource claims" in done.stderr
    assert "Traceback" not in done.stderr


def _slice(node: str, capacity: dict, shared: bool = True) -> dict:
    device = {"name": "gpu-0", "capacity": capacity}
    if shared:
        device["allowMultipleAllocations"] = True
    return {"spec": {"driver": "gpu.nvidia.com", "nodeName": node, "devices": [device]}}


SHARES_4 = {"shares": {"value": "4"}, "memory": {"value": "15Gi"}}


def test_doctor_finds_shareable_devices_or_says_what_to_install() -> None:
    from castslice.backends.dra.devices_check import assess_devices
    from castslice.contract.findings import Status

    config = load_config(DRA)
    device_class = {"metadata": {"name": "gpu.nvidia.com"}}
    good = assess_devices(config, device_class, [_slice("a", SHARES_4), _slice("b", SHARES_4)])
    assert (good.status, good.message) == (
        Status.OK,
        "2 shareable devices with shares on 2 nodes",
    )
    unshared = assess_devices(config, device_class, [_slice("a", SHARES_4, shared=False)])
    assert unshared.status == Status.FAILED
    assert "consumableShares=4" in unshared.fix
    no_class = assess_devices(config, None, [_slice("a", SHARES_4)])
    assert no_class.status == Status.FAILED
    assert "no DeviceClass gpu.nvidia.com" in no_class.message
    eight = assess_devices(config, device_class, [_slice("a", {"shares": {"value": "8"}})])
    assert eight.status == Status.WARNING
    assert "publish shares 8, not 4" in eight.message


def _rewritten_pod(namespace: str, name: str, template: str) -> dict:
    record = '{"slices":1,"source":"default","backend":"dra","original":{"app":"1"}}'
    return {
        "metadata": {"namespace": namespace, "name": name, "annotations": {APPLIED: record}},
        "spec": {
            "resourceClaims": [{"name": "castslice-gpu-0", "resourceClaimTemplateName": template}]
        },
    }


def test_doctor_names_the_missing_template_and_the_namespace() -> None:
    from castslice.backends.dra.templates_check import assess_templates
    from castslice.contract.findings import Status

    config = load_config(DRA)
    templates = [
        {"metadata": {"namespace": "ml", "name": f"castslice-{s}-of-4"}} for s in (1, 2, 3, 4)
    ]
    pods = [_rewritten_pod("ml", "a", "castslice-1-of-4")]
    assert assess_templates(config, pods, templates).status == Status.OK
    pods.append(_rewritten_pod("research", "b", "castslice-2-of-4"))
    result = assess_templates(config, pods, templates)
    assert result.status == Status.FAILED
    assert "research/castslice-2-of-4 (Pending: b)" in result.message
    assert result.fix.startswith("castslice claim-templates -n research | kubectl apply -f -")
    partial = assess_templates(config, pods[:1], templates[:1])
    assert partial.status == Status.WARNING
    assert "ml lacks castslice-2-of-4, castslice-3-of-4, castslice-4-of-4" in partial.message


def test_doctor_dry_run_summary_names_the_claim() -> None:
    from castslice.inspect.doctor.dry_run import _summary

    assert _summary(load_config(DRA), "default") == "a claim from castslice-1-of-4"


_gpu_counts = st.sampled_from(["1", "2", "4"])


@st.composite
def dra_pods(draw: st.DrawFn) -> dict:
    """Valid Pods with GPU and other containers, request-only or limit-only GPUs."""
    lists: dict[str, list[dict]] = {}
    index = 0
    for list_name in ("initContainers", "containers"):
        items = []
        for _ in range(draw(st.integers(1 if list_name == "containers" else 0, 3))):
            index += 1
            shape = draw(st.sampled_from(["both", "limits", "requests", "none"]))
            count = draw(_gpu_counts)
            requests = {"cpu": "1"} if draw(st.booleans()) else {}
            limits: dict[str, str] = {}
            if shape in ("both", "limits"):
                limits[GPU] = count
            if shape in ("both", "requests"):
                requests[GPU] = count
            if shape == "requests":
                limits[GPU] = count  # the API server requires a limit for extended resources
            items.append(container(f"c{index}", requests=requests or None, limits=limits or None))
        if items:
            lists[list_name] = items
    annotations = opted_in()
    ratio = draw(st.none() | st.integers(1, 12))
    if ratio is not None:
        annotations["castops.io/slice-ratio"] = str(ratio)
    pod = make_pod(
        annotations,
        containers=lists["containers"],
        init_containers=lists.get("initContainers"),
    )
    if draw(st.booleans()):
        pod["spec"]["resourceClaims"] = []
    return pod


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pod=dra_pods())
def test_every_dra_patch_applies_validates_and_is_final(
    make_client: Callable[..., TestClient], pod: dict
) -> None:
    client = make_client(**DRA)
    response = review_response(client, make_review(pod))
    patched = apply_response(pod, response)
    validate(patched)
    spec = patched["spec"]
    gpu_users = [
        item
        for name in ("initContainers", "containers")
        for item in spec.get(name) or ()
        if item.get("resources", {}).get("claims")
    ]
    for item in gpu_users:
        for field in ("requests", "limits"):
            assert GPU not in (item["resources"].get(field) or {})
    entries = [entry["name"] for entry in spec.get("resourceClaims") or ()]
    assert len(set(entries)) == len(entries)
    assert {c["name"] for item in gpu_users for c in item["resources"]["claims"]} == set(entries)
    # Containers that run side by side (apps, sidecars) never share a claim; a plain init
    # container, which runs before them all, uses an app container's, or the first plain one's.
    plain_init = [
        item["resources"]["claims"]
        for item in spec.get("initContainers") or ()
        if item.get("resources", {}).get("claims") and item.get("restartPolicy") != "Always"
    ]
    long_lived = [
        item["resources"]["claims"]
        for name in ("initContainers", "containers")
        for item in spec.get(name) or ()
        if item.get("resources", {}).get("claims")
        and (name == "containers" or item.get("restartPolicy") == "Always")
    ]
    assert len({c[0]["name"] for c in long_lived}) == len(long_lived)
    apps = [
        item["resources"]["claims"]
        for item in spec.get("containers") or ()
        if item.get("resources", {}).get("claims")
    ]
    for claims in plain_init:
        assert claims == (apps[0] if apps else plain_init[0])
    if not gpu_users:
        assert "patch" not in response
        return
    record = json.loads(patched["metadata"]["annotations"][APPLIED])
    config = load_config(DRA)
    names = {entry["resourceClaimTemplateName"] for entry in spec.get("resourceClaims") or ()}
    assert names <= {template_name(config, record["slices"])}
    again = review_response(client, make_review(patched))
    assert "patch" not in again


def _driver_slice(node: str, devices: int = 1) -> dict:
    """A ResourceSlice as the NVIDIA DRA driver publishes it with --consumable-shares=4."""
    from tests.e2e.dra import resource_slice

    return resource_slice(node, "uid", devices)


def test_doctor_fails_while_the_charts_device_class_reaches_untainted_shareable_devices() -> None:
    from castslice.backends.dra.claim_templates import device_taint_rule
    from castslice.backends.dra.devices_check import assess_guard
    from castslice.contract.findings import Status
    from tests.e2e.dra import device_class

    classes = [device_class()]
    slices = [_driver_slice("a", 2), _driver_slice("b")]
    unsafe = assess_guard(classes, slices, [])
    assert unsafe.status == Status.FAILED
    assert unsafe.message.startswith("3 shareable devices (a/gpu-0, a/gpu-1, b/gpu-0) without")
    assert "DeviceClass gpu.nvidia.com (nvidia.com/gpu)" in unsafe.message
    assert "infra/gpu-sharing/dra/device-taint-rule.yaml" in unsafe.fix

    safe = assess_guard(classes, slices, [device_taint_rule()])
    assert safe.status == Status.OK
    assert safe.message.startswith("3 shareable devices tainted castslice.castops.io/shared")

    # A rule for one pool guards only that pool; a rule of another driver or key, none.
    pool_a = device_taint_rule()
    pool_a["spec"]["deviceSelector"]["pool"] = "a"
    other_key = device_taint_rule()
    other_key["spec"]["taint"]["key"] = "example.com/other"
    other_driver = device_taint_rule("gpu.example.com")
    partly = assess_guard(classes, slices, [pool_a, other_key, other_driver])
    assert partly.status == Status.FAILED
    assert partly.message.startswith("1 shareable device (b/gpu-0) without")

    # A taint the driver publishes on the device itself guards it too.
    tainted = _driver_slice("a")
    tainted["spec"]["devices"][0]["taints"] = [
        {"key": "castslice.castops.io/shared", "effect": "NoSchedule"}
    ]
    assert assess_guard(classes, [tainted], []).status == Status.OK

    # A node that also runs the classic device plugin hands the same GPUs out twice.
    plugged = {"metadata": {"name": "a"}, "status": {"allocatable": {"nvidia.com/gpu": "2"}}}
    unplugged = {"metadata": {"name": "b"}, "status": {"allocatable": {"cpu": "8"}}}
    both = assess_guard(classes, slices, [device_taint_rule()], [plugged, unplugged])
    assert both.status == Status.FAILED
    assert both.message.startswith("node a advertises nvidia.com/gpu from a device plugin")
    assert "devicePlugin.enabled=false" in both.fix
    assert assess_guard(classes, slices, [device_taint_rule()], [unplugged]).status == Status.OK

    # Without extendedResourceName only claims reach the devices.
    plain_class = device_class()
    del plain_class["spec"]["extendedResourceName"]
    assert assess_guard([plain_class], slices, []).status == Status.OK


def test_the_shipped_taint_rule_is_the_one_the_templates_tolerate() -> None:
    from pathlib import Path

    import yaml

    from castslice.backends.dra.claim_templates import SHARED_TAINT, device_taint_rule

    shipped = yaml.safe_load(
        (Path(__file__).parent.parent / "infra/gpu-sharing/dra/device-taint-rule.yaml").read_text()
    )
    assert shipped == device_taint_rule()
    validate(shipped)
    config = load_config(DRA)
    for template in claim_templates(config, [None], [1, 4, 8]):
        [request] = template["spec"]["spec"]["devices"]["requests"]
        assert request["exactly"]["tolerations"] == [{"key": SHARED_TAINT, "operator": "Exists"}]


def test_doctor_warns_when_the_gpu_memory_setting_exceeds_what_devices_publish() -> None:
    from castslice.backends.dra.devices_check import assess_devices
    from castslice.contract.findings import Status
    from tests.e2e.dra import device_class

    # The fake devices publish a T4's 15Gi.
    slices = [_driver_slice("a")]
    fits = assess_devices(
        load_config({**DRA, "CASTSLICE_DRA_GPU_MEMORY": "15Gi"}), device_class(), slices
    )
    assert fits.status == Status.OK
    big = assess_devices(
        load_config({**DRA, "CASTSLICE_DRA_GPU_MEMORY": "80Gi"}), device_class(), slices
    )
    assert big.status == Status.WARNING
    assert "some publish memory 15Gi, less than CASTSLICE_DRA_GPU_MEMORY 80Gi" in big.message
    assert "CASTSLICE_DRA_GPU_MEMORY" in big.fix


def test_preview_diff_shows_the_init_container_using_the_apps_claim(tmp_path: Path) -> None:
    pod = make_pod(
        opted_in(**{"castops.io/workload-type": "training"}),
        containers=[gpu_container("train")],
        init_containers=[gpu_container("download")],
    )
    manifest = tmp_path / "trainer.yaml"
    manifest.write_text(json.dumps(pod))
    done = subprocess.run(
        [sys.executable, "-m", "castslice", "preview", "--diff", "-f", str(manifest)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **DRA},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    added = [line for line in done.stdout.splitlines() if line.startswith("+")]
    assert added.count("+      - name: castslice-gpu-0") == 2
    assert "+  - name: castslice-gpu-0" in added
    assert not any("castslice-gpu-1" in line for line in added)
