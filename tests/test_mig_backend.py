"""The `mig` backend: the smallest MIG instance that holds a share, written for each stack,
and what the Pod really gets said in the record, the audit annotation and the warnings.

Every patch is applied with jsonpatch and the whole Pod compared. The profile table itself
is checked against NVIDIA's sources in test_mig_profiles.py; here the rule that picks from
it is checked on every model, and the Pods on the issue's examples.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import kubernetes_validate
import pytest
from starlette.testclient import TestClient

from castslice.backends.mig.profiles import MODELS, Profile
from castslice.backends.mig.stacks import STACKS
from castslice.backends.tools import tools_for
from castslice.environment import load_config
from castslice.settings.config import MIG_STACKS, ConfigError
from tests.factories import (
    APPLIED,
    GPU,
    apply_response,
    gpu_container,
    make_pod,
    make_review,
    review_response,
)

PRODUCT = "nvidia.com/gpu.product"
PARTITION = "cloud.google.com/gke-gpu-partition-size"
GKE_SHARING = "cloud.google.com/gke-gpu-sharing-strategy"
GKE_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def mig(**env: str) -> dict[str, str]:
    return {"CASTSLICE_BACKEND": "mig", "CASTSLICE_SLICES_PER_GPU": "8", **env}


def pod_of(slices: int) -> dict:
    annotations = {"castops.io/optimize": "true", "castops.io/slice-ratio": str(slices)}
    return make_pod(annotations, containers=[gpu_container("app", "1")])


def rewritten(pod: dict, resource: str, quantity: str, record: dict, affinity=None) -> dict:
    want = copy.deepcopy(pod)
    want["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1", resource: quantity},
        "limits": {resource: quantity},
    }
    if affinity is not None:
        want["spec"]["affinity"] = {
            "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": affinity}]}}
        }
    want["metadata"]["annotations"][APPLIED] = json.dumps(record, separators=(",", ":"))
    return want


def record(slices: int, instance: str | None) -> dict:
    found = {
        "slices": slices,
        "source": "slice-ratio",
        "backend": "mig",
        "original": {"app": "1"},
    }
    if instance:
        found["instance"] = instance
    return found


# Each GPU model, each share of S = 8: the profile memory-first and strict pick.
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("slices", range(1, 8))
@pytest.mark.parametrize("fit", ["memory", "strict"])
def test_the_smallest_instance_that_holds_the_share(model: str, slices: int, fit: str) -> None:
    config = load_config(mig(CASTSLICE_MIG_GPU_MODELS=model, CASTSLICE_MIG_FIT=fit))
    gpu = MODELS[model]
    share = Fraction(slices, 8)
    placement = tools_for(config).place(slices)
    name = placement.resource.removeprefix("nvidia.com/mig-")
    profile = gpu.profile(name)
    assert profile is not None, placement
    # A share is of what MIG makes usable: each memory slice at a one-slice instance's MiB,
    # each compute slice at the fewest SMs a one-slice instance has.
    mib = min(p.memory_mib for p in gpu.profiles if p.memory_slices == 1) * gpu.memory_total
    sms = min(p.sms for p in gpu.profiles if p.compute_slices == 1) * gpu.compute_total

    def holds(other: Profile) -> bool:
        if other.memory_mib < share * mib:
            return False
        return fit == "memory" or other.sms >= share * sms

    # It holds the share...
    assert holds(profile)
    # ...and no smaller profile of the model does.
    for other in gpu.profiles:
        if holds(other):
            assert (other.memory_slices, other.compute_slices) >= (
                profile.memory_slices,
                profile.compute_slices,
            )
    assert placement.instance is not None and placement.instance.startswith(f"{name}: ")


# The examples on an A100-80GB: no profile is exactly a quarter or a half.
@pytest.mark.parametrize(
    ("fit", "slices", "profile", "instance"),
    [
        ("memory", 1, "1g.10gb", "1g.10gb: 9.62 GiB, 14 of 98 SMs"),
        ("memory", 2, "1g.20gb", "1g.20gb: 19.5 GiB, 14 of 98 SMs"),
        ("strict", 2, "2g.20gb", "2g.20gb: 19.5 GiB, 28 of 98 SMs"),
        ("memory", 4, "3g.40gb", "3g.40gb: 39.25 GiB, 42 of 98 SMs"),
        ("strict", 4, "4g.40gb", "4g.40gb: 39.25 GiB, 56 of 98 SMs"),
    ],
)
def test_mixed_asks_for_the_instance_and_says_what_it_is(
    make_client: Callable[..., TestClient], fit: str, slices: int, profile: str, instance: str
) -> None:
    client = make_client(**mig(CASTSLICE_MIG_FIT=fit))
    pod = pod_of(slices)
    response = review_response(client, make_review(pod))
    assert apply_response(pod, response) == rewritten(
        pod, f"nvidia.com/mig-{profile}", "1", record(slices, instance)
    )
    assert response["auditAnnotations"]["instance"] == instance
    assert f"mig: the Pod gets a MIG instance, {instance}" in response["warnings"]


def test_single_selects_the_gfd_product_label_of_every_model(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(
        **mig(CASTSLICE_MIG_STACK="single", CASTSLICE_MIG_GPU_MODELS="A100-80GB,H200")
    )
    pod = pod_of(4)
    response = review_response(client, make_review(pod))
    products = [
        "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",
        "NVIDIA-A100-PCIE-80GB-MIG-3g.40gb",
        "NVIDIA-H200-MIG-3g.71gb",
        "NVIDIA-H200-141GB-HBM3e-MIG-3g.71gb",
    ]
    instance = "A100-80GB 3g.40gb: 39.25 GiB, 42 of 98 SMs; H200 3g.71gb: 69.75 GiB, 60 of 132 SMs"
    assert apply_response(pod, response) == rewritten(
        pod,
        GPU,
        "1",
        record(4, instance),
        [{"key": PRODUCT, "operator": "In", "values": products}],
    )


NOT_TIME_SHARED = [{"key": GKE_SHARING, "operator": "DoesNotExist"}]


def test_gke_selects_the_partition_size(make_client: Callable[..., TestClient]) -> None:
    client = make_client(**mig(CASTSLICE_MIG_STACK="gke", CASTSLICE_MIG_GPU_MODELS="H100-80GB"))
    pod = pod_of(1)
    response = review_response(client, make_review(pod))
    # A partition of its own: never one a time-shared pool shares out.
    want = rewritten(
        pod,
        GPU,
        "1",
        record(1, "1g.10gb: 9.75 GiB, 16 of 132 SMs"),
        NOT_TIME_SHARED,
    )
    want["spec"]["nodeSelector"] = {PARTITION: "1g.10gb"}
    assert apply_response(pod, response) == want


# GKE partitions time-shared on top (GKE, "Share GPUs with multiple workloads using
# time-sharing": a partition pool created with gpu-partition-size, gpu-sharing-strategy=
# time-sharing and max-shared-clients-per-gpu=n carries all three node labels).
TIME_SHARED_1G = "1g.10gb: 9.62 GiB, 14 of 98 SMs, time-shared by up to 4 clients without isolation"


@pytest.mark.parametrize(
    ("fit", "slices", "selector", "instance", "affinity"),
    [
        # 1/32 of a GPU: a quarter of the smallest partition, 1g.10gb (an eighth), holds
        # it, so it shares one with up to 3 others.
        (
            "memory",
            1,
            {PARTITION: "1g.10gb", GKE_SHARING: "time-sharing", GKE_CLIENTS: "4"},
            TIME_SHARED_1G,
            None,
        ),
        # Strict: a quarter of 1g.10gb's SMs (1/7 of them) holds 1/32 too.
        (
            "strict",
            1,
            {PARTITION: "1g.10gb", GKE_SHARING: "time-sharing", GKE_CLIENTS: "4"},
            TIME_SHARED_1G,
            None,
        ),
        # 1/16 is smaller than 1g.10gb, but a quarter of it is not 1/16: shared by 4, the
        # Pod would get less than its share. A partition of its own, off time-shared pools.
        (
            "memory",
            2,
            {PARTITION: "1g.10gb"},
            "1g.10gb: 9.62 GiB, 14 of 98 SMs",
            NOT_TIME_SHARED,
        ),
        # 1/8 fills 1g.10gb's memory.
        (
            "memory",
            4,
            {PARTITION: "1g.10gb"},
            "1g.10gb: 9.62 GiB, 14 of 98 SMs",
            NOT_TIME_SHARED,
        ),
        (
            "memory",
            16,
            {PARTITION: "3g.40gb"},
            "3g.40gb: 39.25 GiB, 42 of 98 SMs",
            NOT_TIME_SHARED,
        ),
    ],
)
def test_a_pod_smaller_than_the_smallest_partition_time_shares_one_and_is_told(
    make_client: Callable[..., TestClient],
    fit: str,
    slices: int,
    selector: dict,
    instance: str,
    affinity: list | None,
) -> None:
    client = make_client(
        **mig(
            CASTSLICE_MIG_STACK="gke",
            CASTSLICE_SLICES_PER_GPU="32",
            CASTSLICE_MIG_FIT=fit,
            CASTSLICE_MIG_TIME_SHARED_CLIENTS="4",
        )
    )
    pod = pod_of(slices)
    response = review_response(client, make_review(pod))
    want = rewritten(pod, GPU, "1", record(slices, instance), affinity)
    want["spec"]["nodeSelector"] = selector
    assert apply_response(pod, response) == want
    assert response["auditAnnotations"]["instance"] == instance
    intro = "the Pod shares" if GKE_CLIENTS in selector else "the Pod gets a MIG instance,"
    assert response["warnings"] == [f"mig: {intro} {instance}"]
    assert all(len(warning) <= 120 for warning in response["warnings"])


def test_the_smallest_partition_the_settings_offer_is_the_one_shared() -> None:
    config = load_config(
        mig(
            CASTSLICE_MIG_STACK="gke",
            CASTSLICE_SLICES_PER_GPU="16",
            CASTSLICE_MIG_PROFILES="2g.20gb,3g.40gb",
            CASTSLICE_MIG_TIME_SHARED_CLIENTS="2",
        )
    )
    backend = tools_for(config)
    # Half of 2g.20gb (19.5 GiB, a little over a quarter of what MIG makes usable) holds
    # 1/16 and 2/16; not 3/16, which gets a partition of its own, as 4/16 does.
    for slices in (1, 2):
        placement = backend.place(slices)
        assert dict(placement.node_selector) == {
            PARTITION: "2g.20gb",
            GKE_SHARING: "time-sharing",
            GKE_CLIENTS: "2",
        }
        stated = backend.notes(placement)[0]
        assert stated.startswith("mig: the Pod shares 2g.20gb: "), stated
        assert len(stated) <= 120, stated
    for slices in (3, 4):
        assert dict(backend.place(slices).node_selector) == {PARTITION: "2g.20gb"}


def test_a_time_shared_partition_never_gives_a_pod_less_than_its_share() -> None:
    """A tenth of an A100-80GB (7.9 GiB of what MIG makes usable) is smaller than its
    1g.10gb, but 48 clients of one 1g.10gb get 0.2 GiB each: it gets a partition of its own."""
    config = load_config(
        mig(
            CASTSLICE_MIG_STACK="gke",
            CASTSLICE_SLICES_PER_GPU="10",
            CASTSLICE_MIG_TIME_SHARED_CLIENTS="48",
        )
    )
    assert dict(tools_for(config).place(1).node_selector) == {PARTITION: "1g.10gb"}


def test_time_shared_partitions_change_nothing_off_the_gke_stack() -> None:
    shared = {"CASTSLICE_SLICES_PER_GPU": "16", "CASTSLICE_MIG_TIME_SHARED_CLIENTS": "4"}
    plain = tools_for(load_config(mig(CASTSLICE_SLICES_PER_GPU="16")))
    backend = tools_for(load_config(mig(**shared)))
    assert [backend.place(s) for s in range(1, 17)] == [plain.place(s) for s in range(1, 17)]


@pytest.mark.parametrize(
    ("stack", "absent"),
    [
        ("mixed", []),
        ("single", ["nvidia.com/gpu.slices.gi"]),
        ("gke", [GKE_SHARING, PARTITION]),
    ],
)
def test_whole_gpus_never_land_on_a_mig_instance(
    make_client: Callable[..., TestClient], stack: str, absent: list[str]
) -> None:
    client = make_client(**mig(CASTSLICE_MIG_STACK=stack))
    pod = pod_of(16)
    pod["spec"]["containers"][0]["resources"] = {"requests": {GPU: "2"}, "limits": {GPU: "2"}}
    response = review_response(client, make_review(pod))
    affinity = [{"key": key, "operator": "DoesNotExist"} for key in absent] or None
    want = rewritten(pod, GPU, "2", {**record(16, None), "original": {"app": "2"}}, affinity)
    del want["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    assert apply_response(pod, response) == want


def test_whole_gpu_on_7g_instances_where_the_admin_says_so(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(**mig(CASTSLICE_MIG_WHOLE_GPU="7g"))
    pod = pod_of(8)
    response = review_response(client, make_review(pod))
    instance = "7g.80gb: 78.5 GiB, 98 of 98 SMs"
    assert apply_response(pod, response) == rewritten(
        pod, "nvidia.com/mig-7g.80gb", "1", record(8, instance)
    )


def test_a_profile_the_settings_leave_out_is_named(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(**mig(CASTSLICE_MIG_PROFILES="1g.10gb,3g.40gb,7g.80gb"))
    pod = pod_of(2)
    response = review_response(client, make_review(pod))
    assert apply_response(pod, response)["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/mig-3g.40gb": "1"
    }
    assert (
        "mig: A100-80GB's 1g.20gb would hold 1/4 but CASTSLICE_MIG_PROFILES leaves it out"
        in response["warnings"]
    )


def test_a_share_no_offered_profile_holds_gets_a_whole_gpu_and_is_told(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(**mig(CASTSLICE_MIG_PROFILES="1g.10gb"))
    pod = pod_of(4)
    response = review_response(client, make_review(pod))
    limits = apply_response(pod, response)["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {GPU: "1"}
    assert any("no MIG instance the settings offer holds 1/2" in w for w in response["warnings"])


def test_mixed_with_two_models_names_the_one_it_leaves_out(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(**mig(CASTSLICE_MIG_GPU_MODELS="A100-80GB,H200"))
    pod = pod_of(1)
    response = review_response(client, make_review(pod))
    limits = apply_response(pod, response)["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/mig-1g.10gb": "1"}
    assert any(
        "H200 nodes (where 1/8 takes 1g.18gb) are not used" in w for w in response["warnings"]
    )


def test_a_name_two_models_give_different_shares_is_kept_to_its_model(
    make_client: Callable[..., TestClient],
) -> None:
    # 1g.10gb is a quarter of an A100-40GB's memory and an eighth of an A100-80GB's.
    client = make_client(**mig(CASTSLICE_MIG_GPU_MODELS="A100-40GB,A100-80GB"))
    pod = pod_of(2)
    patched = apply_response(pod, review_response(client, make_review(pod)))
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/mig-1g.10gb": "1"
    }
    assert patched["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {
                    "key": PRODUCT,
                    "operator": "In",
                    "values": ["NVIDIA-A100-SXM4-40GB", "A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"],
                }
            ]
        }
    ]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"CASTSLICE_MIG_GPU_MODELS": "A100"}, "'A100' is not one of"),
        ({"CASTSLICE_MIG_GPU_MODELS": "H200,H200"}, "H200 is listed twice"),
        ({"CASTSLICE_MIG_PROFILES": "3g.40gb,3g.41gb"}, "'3g.41gb' is not one of"),
        ({"CASTSLICE_MIG_STACK": "hami"}, "CASTSLICE_MIG_STACK='hami' must be one of"),
        ({"CASTSLICE_MIG_FIT": "compute"}, "CASTSLICE_MIG_FIT='compute' must be one of"),
        # A model in the wrong case, or nearly spelt, is answered with the name.
        ({"CASTSLICE_MIG_GPU_MODELS": "h200"}, "'h200' is not one of"),
        ({"CASTSLICE_MIG_GPU_MODELS": "h200"}, "; did you mean H200?"),
        ({"CASTSLICE_MIG_GPU_MODELS": "H100-NLV"}, "; did you mean H100-NVL?"),
        ({"CASTSLICE_MIG_STACK": "Single"}, "; did you mean single?"),
        # Profiles of no model listed: every Pod would get a whole GPU.
        (
            {"CASTSLICE_MIG_GPU_MODELS": "H200", "CASTSLICE_MIG_PROFILES": "1g.10gb,3g.40gb"},
            r"1g.10gb, 3g.40gb are profiles of no model in CASTSLICE_MIG_GPU_MODELS \(H200\); "
            "their profiles are 1g.18gb, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb",
        ),
        # A GH200 is no H200: refused, and nothing suggested.
        ({"CASTSLICE_MIG_GPU_MODELS": "GH200"}, r"B200, A30 \(comma-separated\)$"),
        ({"CASTSLICE_MIG_PRODUCT_NAMES": "h200=NVIDIA H200 NVL"}, "did you mean H200?"),
        ({"CASTSLICE_MIG_PRODUCT_NAMES": "NVIDIA H200 NVL"}, "not of the form MODEL=NAME"),
        (
            {"CASTSLICE_MIG_PRODUCT_NAMES": "H200=NVIDIA H200 NVL,H100-NVL=NVIDIA H200 NVL"},
            "'NVIDIA H200 NVL' is given to H200 already",
        ),
    ],
)
def test_bad_mig_settings_are_refused_by_name(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_config(mig(**env))


UPSTREAM = Path(__file__).parent / "upstream"


def test_dra_claims_the_instance_by_the_nvidia_drivers_attributes(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(**mig(CASTSLICE_MIG_STACK="dra"))
    pod = pod_of(4)
    response = review_response(client, make_review(pod))
    want = copy.deepcopy(pod)
    want["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1"},
        "limits": {},
        "claims": [{"name": "castslice-gpu-0"}],
    }
    want["spec"]["resourceClaims"] = [
        {"name": "castslice-gpu-0", "resourceClaimTemplateName": "castslice-mig-4-of-8"}
    ]
    # Where no 3g.40gb is free, the claim falls back to the larger instances that hold half
    # a GPU too, and the record says which.
    instance = (
        "3g.40gb: 39.25 GiB, 42 of 98 SMs; if none is free, the first free of 4g.40gb, 7g.80gb"
    )
    want["metadata"]["annotations"][APPLIED] = json.dumps(
        record(4, instance), separators=(",", ":")
    )
    assert apply_response(pod, response) == want
    assert response["auditAnnotations"]["instance"] == instance
    assert response["warnings"] == [
        "mig: the Pod gets a MIG instance, 3g.40gb: 39.25 GiB, 42 of 98 SMs; "
        "if none is free, the first free of 4g.40gb, 7g.80gb",
    ]
    templates = tools_for(load_config(mig(CASTSLICE_MIG_STACK="dra"))).claim_templates()
    assert templates is not None
    (template,) = templates.manifests([None], [4])
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    # resource.k8s.io/v1 DeviceRequest.firstAvailable (DRAPrioritizedList, GA in 1.36): the
    # allocator takes the first subrequest it can satisfy, in order.
    assert request == {
        "name": "gpu",
        "firstAvailable": [
            {
                "name": name.replace(".", "-"),
                "deviceClassName": "mig.nvidia.com",
                "allocationMode": "ExactCount",
                "count": 1,
                "selectors": [
                    {
                        "cel": {
                            "expression": f"device.attributes['gpu.nvidia.com'].profile == '{name}'"
                        }
                    }
                ],
            }
            for name in ("3g.40gb", "4g.40gb", "7g.80gb")
        ],
    }


def test_a_dra_claim_of_the_one_instance_that_holds_its_share_has_no_alternatives() -> None:
    # 3/4 of an A100-80GB: only 7g.80gb holds it.
    templates = tools_for(load_config(mig(CASTSLICE_MIG_STACK="dra"))).claim_templates()
    assert templates is not None
    (request,) = templates.manifests([None], [6])[0]["spec"]["spec"]["devices"]["requests"]
    assert list(request) == ["name", "exactly"]
    assert "'7g.80gb'" in request["exactly"]["selectors"][0]["cel"]["expression"]


def test_the_dra_names_are_the_nvidia_drivers() -> None:
    # The DeviceClass the claims name, and the attributes their CEL reads, as the NVIDIA DRA
    # driver v25.12.0 ships and publishes them.
    device_class = (UPSTREAM / "k8s-dra-driver-gpu-v25.12.0-deviceclass-mig.yaml").read_text()
    assert "  name: mig.nvidia.com\n" in device_class
    assert "device.attributes['gpu.nvidia.com'].type == 'mig'" in device_class
    info = (UPSTREAM / "k8s-dra-driver-gpu-v25.12.0-deviceinfo.go.txt").read_text()
    mig_device = info.split("func (d *MigDeviceInfo) GetDevice() resourceapi.Device {")[1]
    for attribute in ('"profile": {', '"productName": {', '"type": {'):
        assert attribute in mig_device.split("Capacity:")[0]
    assert "StringValue: &d.parent.productName" in mig_device


def test_dra_keeps_models_apart_where_a_profile_name_is_ambiguous() -> None:
    config = load_config(
        mig(CASTSLICE_MIG_STACK="dra", CASTSLICE_MIG_GPU_MODELS="A100-40GB,H100-80GB")
    )
    templates = tools_for(config).claim_templates()
    assert templates is not None
    (template,) = templates.manifests(["ml"], [2])
    assert template["metadata"] == {
        "name": "castslice-mig-2-of-8",
        "namespace": "ml",
        "labels": {"app.kubernetes.io/part-of": "castslice"},
    }
    alternatives = template["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    attributes = "device.attributes['gpu.nvidia.com']"
    a100 = "['NVIDIA A100-SXM4-40GB', 'A100-SXM4-40GB', 'NVIDIA A100-PCIE-40GB']"
    h100 = "['NVIDIA H100 80GB HBM3']"
    # Each model's smallest instance that holds a quarter, then each one's next larger.
    (first,) = alternatives[0]["selectors"]
    assert first["cel"]["expression"] == (
        f"({attributes}.profile == '1g.10gb' && {attributes}.productName in {a100}) || "
        f"({attributes}.profile == '1g.20gb' && {attributes}.productName in {h100})"
    )
    (second,) = alternatives[1]["selectors"]
    assert second["cel"]["expression"] == (
        f"({attributes}.profile == '2g.10gb' && {attributes}.productName in {a100}) || "
        f"({attributes}.profile == '2g.20gb' && {attributes}.productName in {h100})"
    )
    names = [alternative["name"] for alternative in alternatives]
    assert names[:2] == ["1g-10gb", "2g-10gb"] and len(set(names)) == len(names) <= 8
    whole = templates.manifests([None], [8])[0]["spec"]["spec"]["devices"]["requests"][0]
    assert whole["exactly"] == {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 1,
    }


@pytest.mark.parametrize("version", ["1.36.0", "1.37.0"])
@pytest.mark.parametrize("models", ["A100-80GB", "A100-40GB,H100-80GB", "H200,B200"])
def test_every_dra_template_is_a_valid_resource_claim_template(version: str, models: str) -> None:
    config = load_config(mig(CASTSLICE_MIG_STACK="dra", CASTSLICE_MIG_GPU_MODELS=models))
    templates = tools_for(config).claim_templates()
    assert templates is not None
    counts, _ = templates.default_counts()
    for template in templates.manifests(["ml"], counts):
        kubernetes_validate.validate(template, version, strict=True)
        for request in template["spec"]["spec"]["devices"]["requests"]:
            assert len(request.get("firstAvailable", ())) <= 8


def test_product_names_the_settings_add_are_selected_on_every_stack() -> None:
    env = {
        "CASTSLICE_MIG_GPU_MODELS": "H200",
        "CASTSLICE_MIG_PRODUCT_NAMES": "H200=NVIDIA H200 NVL",
    }
    single = tools_for(load_config(mig(CASTSLICE_MIG_STACK="single", **env))).place(1)
    assert single.labels_in == (
        (
            PRODUCT,
            (
                "NVIDIA-H200-MIG-1g.18gb",
                "NVIDIA-H200-141GB-HBM3e-MIG-1g.18gb",
                "NVIDIA-H200-NVL-MIG-1g.18gb",
            ),
        ),
    )
    # Where a profile name means other shares on another model listed (A100-40GB's
    # 1g.10gb), a DRA claim names the products, NVML's names as the driver publishes them.
    a100 = {
        "CASTSLICE_MIG_STACK": "dra",
        "CASTSLICE_MIG_GPU_MODELS": "A100-40GB,A100-80GB",
        "CASTSLICE_MIG_PRODUCT_NAMES": "A100-80GB=NVIDIA A100 80GB PCIe",
    }
    templates = tools_for(load_config(mig(**a100))).claim_templates()
    assert templates is not None
    cel = json.dumps(templates.manifests([None], [1]))
    assert "productName in ['NVIDIA A100-SXM4-80GB', 'NVIDIA A100-PCIE-80GB', " in cel
    assert "'NVIDIA A100 80GB PCIe']" in cel


@pytest.mark.parametrize(
    ("env", "slices"),
    [
        ({"CASTSLICE_MIG_GPU_MODELS": "H200", "CASTSLICE_MIG_STACK": "single"}, 1),
        (
            {
                "CASTSLICE_MIG_STACK": "gke",
                "CASTSLICE_SLICES_PER_GPU": "32",
                "CASTSLICE_MIG_TIME_SHARED_CLIENTS": "4",
            },
            1,
        ),
        (
            {
                "CASTSLICE_MIG_GPU_MODELS": "H200",
                "CASTSLICE_MIG_PROFILES": "1g.18gb,2g.35gb,3g.71gb,7g.141gb",
            },
            2,
        ),
        (
            {
                "CASTSLICE_SLICES_PER_GPU": "4",
                "CASTSLICE_MIG_PROFILES": "1g.10gb,3g.40gb",
            },
            3,
        ),
        ({"CASTSLICE_MIG_GPU_MODELS": "A100-80GB,H200"}, 2),
    ],
)
def test_operate_md_explains_each_mig_warning(env: dict[str, str], slices: int) -> None:
    """docs/operate.md's Warnings table has a row for each warning the mig backend gives."""
    operate = (Path(__file__).parent.parent / "docs" / "operate.md").read_text()
    warnings_table = operate.split("### Warnings", 1)[1].split("## ", 1)[0]
    backend = tools_for(load_config(mig(**env)))
    # The last: the instance line, or the caveat that follows it.
    note = backend.notes(backend.place(slices))[-1]
    assert f"| `{note}` |" in warnings_table, note
    pending = operate.split("### A Pod is Pending", 1)[1].split("### ", 1)[0]
    for message in ("Insufficient nvidia.com/mig-", "-MIG-<profile>", "gke-gpu-partition-size"):
        assert message in pending


def test_each_stack_the_setting_offers_is_one_class_chosen_once_from_the_settings() -> None:
    """CASTSLICE_MIG_STACK names a class that answers for its stack; the placer holds it."""
    assert tuple(STACKS) == MIG_STACKS
    for name in MIG_STACKS:
        backend = tools_for(load_config(mig(CASTSLICE_MIG_STACK=name)))
        assert type(backend.stack) is STACKS[name]
        assert backend.stack.name == name
        assert f"stack {name}," in backend.describe()
