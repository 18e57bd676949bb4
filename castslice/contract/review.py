"""The AdmissionReview v1 envelope: decoding requests and building responses.

Only this module knows the wire format; the policy and the patch never see it.
"""

from __future__ import annotations

from typing import Any, Generic, Literal, NotRequired, TypedDict, TypeVar

import msgspec

from castslice.contract.definitions import WORKLOAD_KIND_NAMES, WORKLOADS, WorkloadKind, templates
from castslice.contract.kube import OperatorResource, Pod, PodTemplateSpec, Workload
from castslice.contract.patch import PatchOperation

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


class GroupVersionKind(TypedDict, total=False):
    group: str
    version: str
    kind: str


POD_KIND: GroupVersionKind = {"group": "", "version": "v1", "kind": "Pod"}

# The object's shape: a Pod, or a workload whose Pod template is read.
ObjectT = TypeVar("ObjectT", Pod, Workload, OperatorResource, dict[str, Any])


class AdmissionRequest(TypedDict, Generic[ObjectT], total=False):
    uid: str
    kind: GroupVersionKind | None
    subResource: str | None
    operation: str | None
    namespace: str | None
    name: str | None
    dryRun: bool | None
    object: ObjectT | None


class _IncomingReview(TypedDict, Generic[ObjectT], total=False):
    apiVersion: str
    kind: str
    request: AdmissionRequest[ObjectT] | None


class _UidOnlyRequest(TypedDict, total=False):
    uid: str


class _UidOnlyReview(TypedDict, total=False):
    request: _UidOnlyRequest | None


class AdmissionResponse(TypedDict):
    uid: str
    allowed: Literal[True]
    patchType: NotRequired[Literal["JSONPatch"]]
    # JSON Patch bytes; like the API's []byte, they are base64 in the encoded review.
    patch: NotRequired[bytes]
    warnings: NotRequired[list[str]]
    auditAnnotations: NotRequired[dict[str, str]]


class InvalidReview(ValueError):
    """The body is not an AdmissionReview v1 request; the message says why."""


class UnreadableObject(ValueError):
    """The review is valid but its object is not a Pod CastSlice can read."""

    def __init__(self, uid: str, detail: str) -> None:
        super().__init__(detail)
        self.uid = uid


_review_decoder = msgspec.json.Decoder(_IncomingReview[Pod])
_workload_review_decoder = msgspec.json.Decoder(_IncomingReview[Workload])
_uid_decoder = msgspec.json.Decoder(_UidOnlyReview)
_encoder = msgspec.json.Encoder()


def decode_review(body: bytes) -> AdmissionRequest:
    """The request of an AdmissionReview v1 body.

    Decoding is typed: only the fields CastSlice reads are built, the rest of
    the Pod (env lists, volumes…) is skipped, which is what keeps large Pods
    cheap. The object of a workload review (Deployment, Job…) is a Workload
    instead, read down to its Pod template. Raises InvalidReview, or
    UnreadableObject when only `request.object` is at fault.
    """
    if not body:
        raise InvalidReview("the request body is empty; expected an AdmissionReview")
    try:
        review = _review_decoder.decode(body)
    except RecursionError:
        raise InvalidReview("the JSON body is nested too deeply") from None
    except msgspec.ValidationError as error:
        if "at `$.request.object" in str(error):
            # An operator's resource may have fields named like a Pod's, with other types.
            operator_request = _operator_request(body)
            if operator_request is not None:
                return operator_request
            raise UnreadableObject(_uid_of(body), str(error)) from None
        raise InvalidReview(f"not an AdmissionReview: {error}") from None
    except msgspec.DecodeError as error:
        raise InvalidReview(f"the body is not valid JSON: {error}") from None

    api_version, kind = review.get("apiVersion"), review.get("kind")
    if api_version != API_VERSION:
        raise InvalidReview(f"apiVersion must be {API_VERSION!r}, got {_short(api_version)}")
    if kind != KIND:
        raise InvalidReview(f"kind must be {KIND!r}, got {_short(kind)}")
    request = review.get("request")
    if request is None:
        raise InvalidReview("the AdmissionReview has no request")
    if not request.get("uid"):
        raise InvalidReview("request.uid is missing or empty")
    object_kind = request.get("kind")
    # The kind's name first: it settles a Pod without building the tuple.
    if object_kind is not None and object_kind.get("kind") in WORKLOAD_KIND_NAMES:
        # The API server always sends all three; no workload is in the core group "".
        workload = WORKLOADS.get(
            (
                object_kind.get("group", ""),
                object_kind.get("version", ""),
                object_kind.get("kind", ""),
            )
        )
        if workload is not None and workload.custom_resource:
            return _operator_request(body) or request
        if workload is not None:
            return _workload_request(body, request["uid"], workload)
    return request


def _workload_request(body: bytes, uid: str, workload: WorkloadKind) -> AdmissionRequest[Workload]:
    # A second pass, down to the Pod templates, only for workloads: they are rare, and
    # Pods stay a single pass. The envelope was checked by the first one.
    if any(location.has_wildcards for location in workload.templates):
        return _templated_request(body, uid, workload)
    try:
        request = _workload_review_decoder.decode(body).get("request")
    except msgspec.ValidationError as error:
        raise UnreadableObject(uid, str(error)) from None
    if request is None:  # the first pass read one: only a changed body lands here
        raise InvalidReview("the AdmissionReview has no request")
    return request


# Any object, as it came: the templates in it are typed in place afterwards.
_any_object_decoder = msgspec.json.Decoder(_IncomingReview[dict[str, Any]])


def _templated_request(body: bytes, uid: str, workload: WorkloadKind) -> AdmissionRequest:
    """A workload whose templates sit in maps or lists (`*`, `[]` in the table): the object
    as it came, each Pod template read as a typed template in place."""
    try:
        request: Any = _any_object_decoder.decode(body)["request"]
    except msgspec.ValidationError as error:
        raise UnreadableObject(uid, str(error)) from None
    workload_object = request.get("object") or {}
    for site in templates(workload, workload_object):
        try:
            typed = msgspec.convert(site.node, PodTemplateSpec)
        except msgspec.ValidationError as error:
            where = "$.request.object." + ".".join(site.path)
            raise UnreadableObject(uid, str(error).replace("`$", f"`{where}")) from None
        parent: Any = workload_object
        for step in site.steps[:-1]:
            parent = parent[step]
        parent[site.steps[-1]] = typed
    request["object"] = workload_object
    return request


class _IncomingOperatorReview(TypedDict, total=False):
    apiVersion: str
    kind: str
    request: AdmissionRequest[OperatorResource] | None


_operator_review_decoder = msgspec.json.Decoder(_IncomingOperatorReview)


def _operator_request(body: bytes) -> AdmissionRequest[OperatorResource] | None:
    """The request of an operator's resource, read whole; None when it is not one."""
    try:
        review = _operator_review_decoder.decode(body)
    except (msgspec.MsgspecError, RecursionError):
        return None
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        return None
    request = review.get("request")
    if request is None:
        return None
    kind = request.get("kind") or {}
    workload = WORKLOADS.get((kind.get("group", ""), kind.get("version", ""), kind.get("kind", "")))
    if not request.get("uid") or workload is None or not workload.custom_resource:
        return None
    return request


def _uid_of(body: bytes) -> str:
    # Only reached when the Pod could not be read: the uid is still needed to answer.
    try:
        request = _uid_decoder.decode(body).get("request") or {}
    except (msgspec.MsgspecError, RecursionError):
        request = {}
    uid = request.get("uid")
    if not uid:
        raise InvalidReview("request.uid is missing or empty")
    return uid


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def allowed(uid: str, warnings: list[str] | None = None) -> AdmissionResponse:
    response: AdmissionResponse = {"uid": uid, "allowed": True}
    if warnings:
        response["warnings"] = warnings
    return response


def patched(
    uid: str,
    operations: list[PatchOperation],
    warnings: list[str] | None = None,
    audit_annotations: dict[str, str] | None = None,
) -> AdmissionResponse:
    """An allowed response carrying `operations`; with none it is plain `allowed`."""
    response = allowed(uid, warnings)
    if operations:
        response["patchType"] = "JSONPatch"
        response["patch"] = _encoder.encode(operations)
    if audit_annotations:
        response["auditAnnotations"] = audit_annotations
    return response


def encode_review(response: AdmissionResponse) -> bytes:
    return _encoder.encode({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def encode_json(document: object) -> bytes:
    return _encoder.encode(document)
