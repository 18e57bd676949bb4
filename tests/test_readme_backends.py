"""The README's table of what each backend gives a Pod is what CastSlice does.

Each cell is compared with a description of the Pod as the API server would store it
after CastSlice's answer (the patch applied), written from the Pod alone: a wrong cell,
or a backend that changed what it gives, fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from castslice.environment import load_config
from castslice.serve.core import Webhook
from tests.factories import apply_response, gpu_container, make_pod, make_review, opted_in
from tests.markdown import markdown_table

README = Path(__file__).resolve().parent.parent / "README.md"
HEADER = "| the Pod says (slices) |"


def readme_table() -> tuple[list[str], list[list[str]]]:
    header, rows = markdown_table(README, HEADER)
    return [cell.strip(" `") for cell in header[1:]], rows


def annotations_and_degrees(says: str) -> tuple[dict[str, str], str | None]:
    """`workload-type: inference` (2), degrees `2,4` -> the annotations and the degrees."""
    match = re.fullmatch(r'`([a-z-]+): "?([a-z0-9]+)"?` \(\d+\)(?:, degrees `([0-9,]+)`)?', says)
    assert match, f"unreadable row: {says}"
    key, value, degrees = match.groups()
    return opted_in(**{f"castops.io/{key}": value}), degrees


def described(pod: dict) -> str:
    """What the stored Pod's container asks for and where it may run, in the README's words."""
    spec = pod["spec"]
    (resources,) = [c.get("resources", {}) for c in spec["containers"]]
    if spec.get("resourceClaims"):
        (claim,) = spec["resourceClaims"]
        slices, per_gpu = map(int, re.fullmatch(
            r"castslice-(\d+)-of-(\d+)", claim["resourceClaimTemplateName"]
        ).groups())  # fmt: skip
        assert [c["name"] for c in resources["claims"]] == [claim["name"]]
        if slices < per_gpu:
            return f"a claim for {slices} of one GPU's {per_gpu} shares"
        gpus = slices // per_gpu
        if gpus == 1:
            return f"a claim for 1 whole GPU (all {per_gpu} shares)"
        return f"a claim for {gpus} whole GPUs"
    limits = {k: v for k, v in resources["limits"].items() if k != "cpu"}
    ((resource, quantity),) = limits.items()
    text = f"`{resource}: {quantity}`"
    selector = spec.get("nodeSelector") or {}
    affinity = json.dumps(spec.get("affinity") or {})
    if "nvidia.com/gpu.replicas" in selector:
        text += f" on nodes with {selector['nvidia.com/gpu.replicas']} replicas per GPU"
    elif "cloud.google.com/gke-max-shared-clients-per-gpu" in selector:
        clients = selector["cloud.google.com/gke-max-shared-clients-per-gpu"]
        text += f" on a pool with {clients} clients per GPU"
    elif selector.get("nvidia.com/gpu.sharing-strategy") == "none" or (
        "cloud.google.com/gke-gpu-sharing-strategy" in affinity and "DoesNotExist" in affinity
    ):
        text += " on a non-sharing node"
    return text


BACKENDS, ROWS = readme_table()


def test_the_table_covers_every_backend() -> None:
    assert sorted(BACKENDS) == ["dra", "gke", "nvidia", "resource"]
    assert len(ROWS) >= 5


@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
@pytest.mark.parametrize("backend", BACKENDS)
def test_each_cell_is_what_castslice_gives(row: list[str], backend: str) -> None:
    annotations, degrees = annotations_and_degrees(row[0])
    environment = {"CASTSLICE_BACKEND": backend}
    if degrees:
        environment["CASTSLICE_SHARING_DEGREES"] = degrees
    webhook = Webhook(load_config(environment), log_review=lambda record: None)
    pod = make_pod(annotations, [gpu_container("app")])
    reply = webhook.answer_body(json.dumps(make_review(pod)).encode())
    response = json.loads(reply.body)["response"]
    assert response["allowed"] is True
    cell = row[1 + BACKENDS.index(backend)]
    assert described(apply_response(pod, response)) == cell
