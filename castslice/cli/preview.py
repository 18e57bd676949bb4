"""`castslice preview`: manifests as CastSlice would leave the Pods they create; offline.

Each Pod, and the Pod each workload's template would produce, goes through the
function's own code: an AdmissionReview is built as the API server would send
it, decoded and decided by the same modules, and the function's patch is applied
with jsonpatch. A workload is shown with its template replaced by the Pod
template as CastSlice leaves it, so users see their own manifest as it will
behave. Objects of other kinds pass through untouched.

Exit status: 0 done, 1 warnings with --strict, 2 bad input (a file, a document
or the configuration; the message names it).
"""

from __future__ import annotations

import argparse
import copy
import difflib
import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import jsonpatch
import msgspec

from castslice.cli import EXIT_OK, EXIT_PROBLEM, CommandError
from castslice.cli.flags import config_from
from castslice.cli.manifests import (
    Document,
    ManifestError,
    is_list,
    objects,
    read_documents,
)
from castslice.contract.definitions import CONTAINER_LISTS, WorkloadKind, templates
from castslice.contract.patch import gpu_containers, quantity_value, refused_requirements
from castslice.contract.review import (
    POD_KIND,
    GroupVersionKind,
    UnreadableObject,
    decode_review,
    encode_json,
)
from castslice.decision.admission import Admission
from castslice.decision.outcome import Outcome
from castslice.decision.slices import is_opted_in, shorten
from castslice.decision.workloads import kind_of, own_annotations
from castslice.render.selection import sends_pod, sends_workload
from castslice.render.yaml_text import dump_yaml

DEFAULT_NAMESPACE = "default"
CANNOT_PREVIEW = "sliced at admission, cannot preview"
_UID = "castslice-preview"
_OBJECT_PATH = re.compile(r"\$\.request\.object\.?")

Status = Literal["sliced", "unchanged", "passed through", "not understood"]
STATUSES: tuple[Status, ...] = ("sliced", "unchanged", "passed through", "not understood")
# API groups served by Kubernetes itself; an object of any other group is a custom resource.
BUILT_IN_GROUPS = frozenset(
    (
        "",
        "apps",
        "batch",
        "autoscaling",
        "policy",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "internal.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
        "storagemigration.k8s.io",
    )
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "Warnings and a one-line summary go to stderr. Exit status: 0 done, 1 warnings with "
        "--strict, 2 bad input (the message names the file and document) or configuration."
    )
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE|DIR|-",
        help="a YAML or JSON manifest, a directory of *.yaml, *.yml and *.json (sorted), "
        "or - for stdin; repeatable",
    )
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json"),
        default="yaml",
        help="yaml: the documents as given (default); json: one v1 List of every object",
    )
    shown.add_argument(
        "--diff", action="store_true", help="a unified diff of each object CastSlice changes"
    )
    parser.add_argument(
        "-n",
        "--namespace",
        help="namespace of objects that name none (default: default); it decides which "
        "enrolment policy rules apply",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit with status 1 when there are warnings"
    )


@dataclass
class Preview:
    """One object before and after, and what the function would say about it."""

    reference: str
    before: dict[str, Any]
    after: dict[str, Any]
    status: Status
    warnings: list[str] = field(default_factory=list)
    # Why the API server would never send it (or its Pods) to CastSlice, when it would not.
    not_sent: str | None = None
    # Set for an operator's resource (PyTorchJob, RayCluster…), counted by kind in the summary.
    operator_kind: str | None = None
    # Pods CastSlice rewrites at admission that the preview cannot show, and why.
    cannot_preview: list[str] = field(default_factory=list)


def run(args: argparse.Namespace) -> int:
    config = config_from(args)
    admission = Admission(config)
    try:
        documents = read_documents(args.filename, sys.stdin.buffer)
        previews = [
            [preview(admission, where, item, args.namespace) for where, item in objects(document)]
            for document in documents
        ]
    except ManifestError as error:
        raise CommandError(str(error)) from None

    flat = [item for previewed in previews for item in previewed]
    if args.diff:
        sys.stdout.write(diff(flat, admission.backend.name))
    elif args.output == "json":
        listed = {"apiVersion": "v1", "kind": "List", "items": [item.after for item in flat]}
        sys.stdout.write(msgspec.json.format(encode_json(listed), indent=2).decode() + "\n")
    else:
        shown = zip(documents, previews, strict=True)
        sys.stdout.write("---\n".join(dump_yaml(_document_after(*pair)) for pair in shown))
    sys.stdout.flush()

    for item in flat:
        for warning in item.warnings:
            print(f"Warning: {item.reference}: {warning}", file=sys.stderr)
        for note in item.cannot_preview:
            print(f"Note: {item.reference}: {note}", file=sys.stderr)
        if item.not_sent:
            print(
                f"Note: {item.reference}: not sent to CastSlice: {item.not_sent}", file=sys.stderr
            )
    print(summary(flat, admission.backend.name), file=sys.stderr)
    return EXIT_PROBLEM if args.strict and any(item.warnings for item in flat) else EXIT_OK


def preview(
    admission: Admission, where: str, manifest: dict[str, Any], namespace: str | None
) -> Preview:
    """`manifest` as CastSlice would leave it; `where` names it in errors."""
    kind = manifest_kind(manifest)
    namespace = _namespace(where, manifest, namespace)
    reference = f"{manifest['kind']} {namespace}/{_name(manifest)}"
    config = admission.config
    if kind == POD_KIND:
        refused = refused_gpu_counts(manifest, config.gpu_resource)
        if refused and refused.unreadable:
            # The API server cannot even decode it: CastSlice never sees it.
            return Preview(reference, manifest, manifest, "unchanged", [refused_text(refused)])
        outcome, after = _review_pod(admission, where, manifest, namespace, "")
        selection = sends_pod(config, manifest, namespace)
        shared = admission.backend.shared_resource
        left = [refused_gpu_counts(after, name) for name in (config.gpu_resource, shared)]
        if refused and (not selection.sent or any(left)):
            # Validation follows mutating admission: what CastSlice leaves is what is refused.
            warning = refused_text(refused)
            return Preview(reference, manifest, manifest, "unchanged", [warning], selection.why_not)
        if not selection.sent:
            return Preview(reference, manifest, manifest, "unchanged", [], selection.why_not)
        warnings = _warnings(outcome)
        if refused:
            warnings.append(
                f"{refused.text}: the API server would refuse that, but castslice's rewrite "
                "replaces the count, so the Pod is admitted"
            )
        return Preview(reference, manifest, after, _status(outcome), warnings)

    workload = kind_of(kind)
    if workload is None:
        status: Status = "passed through" if kind["group"] in BUILT_IN_GROUPS else "not understood"
        return Preview(reference, manifest, manifest, status)
    checked = _review(admission, where, kind, manifest, namespace, "")
    # The workload and the Pods it creates are separate requests, each sent or not on its own.
    sent = sends_workload(manifest, kind["group"], kind["version"], kind["kind"], namespace)
    warnings = _warnings(checked) if sent.sent else []
    return _preview_templates(
        admission, where, manifest, namespace, reference, workload, warnings, sent.why_not
    )


def _preview_templates(
    admission: Admission,
    where: str,
    manifest: dict[str, Any],
    namespace: str,
    reference: str,
    workload: WorkloadKind,
    warnings: list[str],
    workload_not_sent: str | None,
) -> Preview:
    """Each Pod template rewritten, in the workload's own shape, as the Pods made from it."""
    operator_kind = workload.kind if workload.custom_resource else None
    sites = templates(workload, manifest)
    own = own_annotations(workload, manifest)
    after, sliced = manifest, False
    unsent: list[str] = []
    cannot_preview: list[str] = []
    for site in sites:
        made = site.location.shape.pod(site.node, own)
        pod = {"apiVersion": "v1", "kind": "Pod", **copy.deepcopy(made.template)}
        pod["metadata"] = pod.get("metadata") or {}
        pod["spec"] = pod.get("spec") or {}
        named = f"{site.label}: " if site.label else ""
        refused = refused_gpu_counts(pod, admission.config.gpu_resource)
        if refused:
            # The API server validates the template when the workload is created: no Pod.
            warnings = [*warnings, named + refused_text(refused, manifest["kind"])]
            continue
        outcome, pod_after = _review_pod(admission, where, pod, namespace, site.where)
        selection = sends_pod(admission.config, pod, namespace)
        if (
            made.unseen is not None
            and is_opted_in(pod["metadata"].get("annotations") or {})
            and not gpu_containers(pod["spec"], admission.config.gpu_resource)
        ):
            cannot_preview.append(
                f"{named}its Pods' containers come from {made.unseen}; any "
                f"{admission.config.gpu_resource} they ask for is {CANNOT_PREVIEW}"
            )
        if not selection.sent:
            unsent.append(selection.why_not or "")
            continue
        sliced = sliced or outcome.decision == "mutated"
        if pod_after != pod:
            if after is manifest:
                after = copy.deepcopy(manifest)
            node = site.node_in(after)
            unwritable = site.location.shape.write_back(node, pod, pod_after)
            if unwritable:
                cannot_preview.append(f"{named}{CANNOT_PREVIEW}: {unwritable}")
    # The workload's own review matters only when it has no Pods to show; of the Pods, said
    # only when none is sent (a CPU head left out while its workers are sliced is no news).
    not_sent = workload_not_sent if not sites else None
    if unsent and len(unsent) == len(sites):
        not_sent = f"its Pods: {unsent[0]}"
    status: Status = "sliced" if sliced else "unchanged"
    return Preview(
        reference, manifest, after, status, warnings, not_sent, operator_kind, cannot_preview
    )


class Refused(NamedTuple):
    """Why the API server refuses a Pod's GPU counts; `unreadable` when one is no quantity
    at all, so that it cannot even decode the object."""

    text: str
    unreadable: bool


def refused_gpu_counts(pod: dict[str, Any], gpu: str) -> Refused | None:
    """Why the API server refuses the Pod's counts of `gpu`, an extended resource: a
    quantity it cannot parse, a negative or fractional count, a request without a limit or
    unequal to it; None when it takes them."""
    spec = pod.get("spec")
    for list_name in CONTAINER_LISTS:
        listed = spec.get(list_name) if isinstance(spec, dict) else None
        for index, container in enumerate(listed if isinstance(listed, list) else ()):
            if not isinstance(container, dict):
                continue
            resources = container.get("resources")
            if not isinstance(resources, dict):
                continue
            why = refused_requirements(resources, gpu)
            if why:
                name = container.get("name") or f"{list_name}[{index}]"
                counts = [
                    values[gpu]
                    for values in (resources.get("limits"), resources.get("requests"))
                    if isinstance(values, dict) and gpu in values
                ]
                unreadable = any(quantity_value(count) is None for count in counts)
                return Refused(f"container {shorten(str(name))}: {why}", unreadable)
    return None


def refused_text(refused: Refused, kind: str = "Pod") -> str:
    """The warning for an object the API server refuses, as CastSlice would leave it."""
    return f"the API server refuses this {kind}, {refused.text}; castslice leaves it unchanged"


def diff(previews: list[Preview], backend: str) -> str:
    """A unified diff of each object CastSlice changes, in YAML."""
    return "".join(
        "".join(
            difflib.unified_diff(
                dump_yaml(item.before).splitlines(keepends=True),
                dump_yaml(item.after).splitlines(keepends=True),
                fromfile=item.reference,
                tofile=f"{item.reference} (castslice, {backend} backend)",
            )
        )
        for item in previews
        if item.after != item.before
    )


def summary(previews: list[Preview], backend: str) -> str:
    counts = {status: 0 for status in STATUSES}
    operators: dict[str, int] = {}
    for item in previews:
        counts[item.status] += 1
        if item.operator_kind:
            operators[item.operator_kind] = operators.get(item.operator_kind, 0) + 1
    warnings = sum(len(item.warnings) for item in previews)
    not_sent = sum(1 for item in previews if item.not_sent)
    unsent = f" ({not_sent} not sent to CastSlice)" if not_sent else ""
    text = (
        f"{_count(len(previews), 'object')}: {counts['sliced']} sliced, "
        f"{counts['unchanged']} left unchanged{unsent}, {counts['passed through']} passed "
        "through (no Pods)"
    )
    if counts["not understood"]:
        unknown = {
            item.reference.split(" ", 1)[0] for item in previews if item.status == "not understood"
        }
        text += f", {counts['not understood']} not understood ({', '.join(sorted(unknown))})"
    if operators:
        text += "; operator resources: " + ", ".join(f"{n} {kind}" for kind, n in operators.items())
    return f"{text}; {_count(warnings, 'warning')}; {backend} backend"


def _review_pod(
    admission: Admission, where: str, pod: dict[str, Any], namespace: str, path: str
) -> tuple[Outcome, dict[str, Any]]:
    outcome = _review(admission, where, POD_KIND, pod, namespace, path)
    patch = outcome.response.get("patch")
    if patch is None:
        return outcome, pod
    return outcome, jsonpatch.JsonPatch(json.loads(patch)).apply(pod)


def _review(
    admission: Admission,
    where: str,
    kind: GroupVersionKind,
    manifest: dict[str, Any],
    namespace: str,
    path: str,
) -> Outcome:
    # Through the wire format, as the API server sends it: the same decoding as the function.
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": _UID,
            "kind": kind,
            "operation": "CREATE",
            "namespace": namespace,
            "name": _metadata(manifest).get("name"),
            "object": manifest,
            "dryRun": True,
        },
    }
    try:
        request = decode_review(encode_json(review))
    except UnreadableObject as error:
        detail = _OBJECT_PATH.sub(f"{path}." if path else "", str(error))
        if "Expected `str`, got" in detail:
            # YAML reads true, yes, on and 1 as other types; Kubernetes wants strings there.
            detail += '; quote such values in YAML ("true", "1")'
        raise ManifestError(f"{where}: not a valid {manifest['kind']}: {detail}") from None
    return admission.review(request)


def _document_after(document: Document, previews: list[Preview]) -> dict[str, Any]:
    if not is_list(document.content):
        return previews[0].after
    if document.content.get("items") is None:
        return document.content
    # The same List, each item as CastSlice leaves it.
    return {**document.content, "items": [item.after for item in previews]}


def manifest_kind(manifest: dict[str, Any]) -> GroupVersionKind:
    group, _, version = manifest["apiVersion"].rpartition("/")
    return {"group": group, "version": version, "kind": manifest["kind"]}


def _namespace(where: str, manifest: dict[str, Any], given: str | None) -> str:
    own = _metadata(manifest).get("namespace")
    if own and given and own != given:
        # As kubectl refuses it: the object would not go where the user thinks.
        raise ManifestError(
            f"{where}: the object's namespace {own!r} does not match --namespace {given!r}"
        )
    return own or given or DEFAULT_NAMESPACE


def _name(manifest: dict[str, Any]) -> str:
    metadata = _metadata(manifest)
    if metadata.get("name"):
        return str(metadata["name"])
    if metadata.get("generateName"):
        return f"{metadata['generateName']}*"
    return "(no name)"


def _metadata(manifest: dict[str, Any]) -> dict[str, Any]:
    # Only read for names here; a malformed one is reported by the typed decoding.
    metadata = manifest.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _status(outcome: Outcome) -> Status:
    return "sliced" if outcome.decision == "mutated" else "unchanged"


def _warnings(outcome: Outcome) -> list[str]:
    return list(outcome.response.get("warnings", ()))


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")
