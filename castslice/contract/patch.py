"""RFC 6902 operations that give a Pod's GPU containers their new resources and placement.

Every path the operations name exists in the object as given (the API server
rejects a Pod whose patch does not apply), and keys are escaped per RFC 6901.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

from castslice.contract.definitions import CONTAINER_LISTS
from castslice.contract.kube import Container, ObjectMeta, PodSpec, ResourceRequirements

# A Kubernetes quantity whose digits are all 0, with any suffix: "0", "0.0", "0Ki", "0e3".
_ZERO_QUANTITY = re.compile(r"[+-]?(?:0+(?:\.0*)?|\.0+)(?:[eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?")

# A quantity as the API server parses one (k8s.io/apimachinery v0.37.2,
# pkg/api/resource/quantity.go, parseQuantityString and its suffixer): a sign, ASCII digits
# with an optional fraction, then a binary suffix, a decimal one or a decimal exponent.
# Go's parser compares bytes with '0'..'9', so "¹" or "١" is no digit to it; Python's
# [0-9] is ASCII only too (unlike \d or str.isdigit()).
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?=\.?[0-9])(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<decimal>[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
_BINARY = {prefix: 1024**power for power, prefix in enumerate("KMGTPE", start=1)}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Go's parser refuses exponents beyond this size; it also keeps 10**exponent cheap here.
_MAX_EXPONENT = 1000


def quantity_value(quantity: object) -> Fraction | None:
    """The value of a Kubernetes quantity ("2", "500m", "1e3", "-1"), or None when the API
    server cannot parse it as one ("one", "¹", "1.5.0")."""
    if isinstance(quantity, bool) or not isinstance(quantity, str | int | float):
        return None
    found = _QUANTITY.fullmatch(str(quantity).strip())
    if found is None:
        return None
    fraction = found["fraction"] or ""
    value = Fraction(int((found["whole"] or "0") + fraction), 10 ** len(fraction))
    if found["binary"]:
        value *= _BINARY[found["binary"][0]]
    elif found["decimal"]:
        value *= Fraction(10) ** _DECIMAL[found["decimal"]]
    elif found["exponent"]:
        exponent = int(found["exponent"])
        if abs(exponent) > _MAX_EXPONENT:
            return None
        value *= Fraction(10) ** exponent
    return -value if found["sign"] == "-" else value


def refused_count(quantity: object) -> str | None:
    """Why the API server refuses `quantity` as an extended resource's count, or None when it
    takes it (k8s.io/kubernetes v1.37.2, pkg/apis/core/validation/validation.go,
    ValidateResourceQuantityValue: non-negative, and an integer for extended resources)."""
    value = quantity_value(quantity)
    if value is None:
        return "is not a quantity"
    if value < 0:
        return "must be greater than or equal to 0"
    if value.denominator != 1:
        return "must be an integer"
    return None


def refused_requirements(resources: Mapping[str, Any], resource: str) -> str | None:
    """Why the API server refuses a container's requests and limits of the extended resource
    `resource`, or None (validation.go, validateResourceRequirements: each count valid, a
    request needs a limit, and the two are equal)."""
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    for field, values in (("limits", limits), ("requests", requests)):
        if isinstance(values, Mapping) and resource in values:
            why = refused_count(values[resource])
            if why:
                return f"{field} {resource} {_shown(values[resource])} {why}"
    if isinstance(requests, Mapping) and resource in requests:
        if not isinstance(limits, Mapping) or resource not in limits:
            return f"requests {resource} without a limit (a limit must be set)"
        if quantity_value(requests[resource]) != quantity_value(limits[resource]):
            return (
                f"requests {resource} {_shown(requests[resource])} must equal its limit "
                f"{_shown(limits[resource])}"
            )
    return None


def _shown(quantity: object) -> str:
    text = ascii(str(quantity))[1:-1].replace('"', '\\"')
    return f'"{text[:17] + "..." if len(text) > 20 else text}"'


class PatchOperation(TypedDict):
    op: Literal["add", "remove", "replace"]
    path: str
    value: NotRequired[Any]


class GpuContainer(NamedTuple):
    """A container that asks for the GPU resource, and where it sits in the Pod."""

    path: str
    name: str
    resources: ResourceRequirements
    manifest: Container


@lru_cache(maxsize=64)
def escape_pointer_token(token: str) -> str:
    """Escape one JSON Pointer reference token (RFC 6901: `~` first, then `/`)."""
    return token.replace("~", "~0").replace("/", "~1")


def gpu_containers(spec: PodSpec, gpu: str) -> list[GpuContainer]:
    """The containers of every kind that ask for `gpu`: name it with a count other than 0."""
    found: list[GpuContainer] = []
    for list_name in CONTAINER_LISTS:
        for index, container in enumerate(spec.get(list_name) or ()):
            resources = (container or {}).get("resources")
            if not resources:
                continue
            if gpu in (resources.get("requests") or {}) or gpu in (resources.get("limits") or {}):
                name = container.get("name") or f"{list_name}[{index}]"
                found_container = GpuContainer(
                    f"/spec/{list_name}/{index}", name, resources, container
                )
                # Templates write `gpu: 0` for "no GPU": such a container keeps what it has.
                if not is_zero_quantity(asked_quantity(found_container, gpu)):
                    found.append(found_container)
    return found


def is_zero_quantity(quantity: str) -> bool:
    return _ZERO_QUANTITY.fullmatch(quantity.strip()) is not None


def asked_quantity(container: GpuContainer, gpu: str) -> str:
    """What the container asked for: its GPU limit, or its request when it has no limit."""
    limits = container.resources.get("limits") or {}
    requests = container.resources.get("requests") or {}
    return str(limits[gpu] if gpu in limits else requests[gpu])


def resource_operations(
    container: GpuContainer, gpu: str, resource: str, quantity: int
) -> list[PatchOperation]:
    """Make `container` ask for `quantity` of `resource` instead of `gpu`.

    `resource` may be `gpu` itself (only the count changes). Requests and limits
    end equal, as the API server requires for extended resources.
    """
    path = f"{container.path}/resources"
    resources = container.resources
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    value = str(quantity)
    gpu_token, token = escape_pointer_token(gpu), escape_pointer_token(resource)
    operations: list[PatchOperation] = []
    for field, values in (("requests", requests), ("limits", limits)):
        if resource == gpu:
            if gpu in values and str(values[gpu]) != value:
                operations.append(
                    {"op": "replace", "path": f"{path}/{field}/{token}", "value": value}
                )
        elif gpu in values:
            operations.append({"op": "remove", "path": f"{path}/{field}/{gpu_token}"})
            operations.append({"op": "add", "path": f"{path}/{field}/{token}", "value": value})
        elif resource in values and str(values[resource]) != value:
            # A value already in the other map follows the new count.
            operations.append({"op": "replace", "path": f"{path}/{field}/{token}", "value": value})

    if gpu in requests and gpu not in limits and resource not in limits:
        # The API server requires a limit for extended resources; a request-only
        # GPU container would otherwise be rejected.
        if resources.get("limits") is None:
            operations.append({"op": "add", "path": f"{path}/limits", "value": {resource: value}})
        else:
            operations.append({"op": "add", "path": f"{path}/limits/{token}", "value": value})
    return operations


def map_entries_operations(
    parent: str, current: Mapping[str, str] | None, entries: Mapping[str, str]
) -> list[PatchOperation]:
    """Set `entries` in the string map at `parent` (a nodeSelector, annotations)."""
    if not entries:
        return []
    if current is None:
        return [{"op": "add", "path": parent, "value": dict(entries)}]
    return [
        {"op": "add", "path": f"{parent}/{escape_pointer_token(key)}", "value": value}
        for key, value in entries.items()
        if current.get(key) != value
    ]


def node_selector_operations(spec: PodSpec, selector: Mapping[str, str]) -> list[PatchOperation]:
    return map_entries_operations("/spec/nodeSelector", spec.get("nodeSelector"), selector)


def scheduler_operations(spec: PodSpec, scheduler: str) -> list[PatchOperation]:
    """Name `scheduler` in spec.schedulerName (replaced where the Pod has one)."""
    if spec.get("schedulerName") == scheduler:
        return []
    op: Literal["add", "replace"] = "replace" if "schedulerName" in spec else "add"
    return [{"op": op, "path": "/spec/schedulerName", "value": scheduler}]


def annotation_operations(metadata: ObjectMeta, entries: Mapping[str, str]) -> list[PatchOperation]:
    return map_entries_operations("/metadata/annotations", metadata.get("annotations"), entries)


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def required_node_terms(spec: PodSpec) -> list[dict[str, Any]]:
    """The Pod's required node affinity terms (ORed); empty when it has none."""
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    return (node_affinity.get(_REQUIRED) or {}).get("nodeSelectorTerms") or []


def absent_labels_operations(spec: PodSpec, keys: tuple[str, ...]) -> list[PatchOperation]:
    """Require nodes without the labels `keys`, ANDed into every existing required term."""
    return required_expressions_operations(
        spec, [{"key": key, "operator": "DoesNotExist"} for key in keys]
    )


def label_in_expressions(
    labels: Sequence[tuple[str, tuple[str, ...]]],
) -> list[dict[str, Any]]:
    """Node selector requirements: each label's value one of its values."""
    return [{"key": key, "operator": "In", "values": list(values)} for key, values in labels]


def required_expressions_operations(
    spec: PodSpec, expressions: list[dict[str, Any]]
) -> list[PatchOperation]:
    """Require nodes matching `expressions`, ANDed into every existing required term."""
    if not expressions:
        return []
    terms = required_node_terms(spec)
    required_path = f"/spec/affinity/nodeAffinity/{_REQUIRED}"
    operations: list[PatchOperation] = []
    for index, term in enumerate(terms):
        path = f"{required_path}/nodeSelectorTerms/{index}/matchExpressions"
        if term.get("matchExpressions"):
            operations += [{"op": "add", "path": f"{path}/-", "value": e} for e in expressions]
        else:
            operations.append({"op": "add", "path": path, "value": expressions})
    if operations:
        return operations
    # The affinity is added whole at the first level that is missing, so every path exists.
    required = {"nodeSelectorTerms": [{"matchExpressions": expressions}]}
    affinity = spec.get("affinity")
    if affinity is None:
        return [
            {
                "op": "add",
                "path": "/spec/affinity",
                "value": {"nodeAffinity": {_REQUIRED: required}},
            }
        ]
    if affinity.get("nodeAffinity") is None:
        return [
            {"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {_REQUIRED: required}}
        ]
    return [{"op": "add", "path": required_path, "value": required}]
