"""CEL building the webhook's JSON Patch: resources, placement and the decision record.

Mirrors castslice.contract.patch operation for operation (same paths, same conditions),
so the API server stores the same Pod whichever engine ran.
"""

from __future__ import annotations

from castslice.contract.definitions import APPLIED, CONTAINER_LISTS, DecisionRecord, json_string
from castslice.contract.patch import escape_pointer_token
from castslice.render import cel
from castslice.render.admission_policies.placement import PlacementCel
from castslice.render.admission_policies.variables import (
    REQUIRED_AFFINITY,
    containers_of,
    gpu_requested,
    required_node_terms,
)
from castslice.render.cel import Expr, jsonpatch, string, variable
from castslice.settings.config import Config

_BACKSLASH, _QUOTE = "\\", '"'


def resource_operations(container: Expr, path: Expr, gpu: str, resource: str | None) -> Expr:
    """CEL list of patch.resource_operations for one container at `path`.

    `resource` None: the container keeps `gpu` with a new count; otherwise `gpu`
    becomes `resource`. The quantity is `variables.quantity`.
    """
    quantity = variable("quantity")
    target = gpu if resource is None else resource
    gpu_key, target_key = string(gpu), string(target)
    requests = cel.optional_map(f"{container}.?resources.?requests")
    limits = cel.optional_map(f"{container}.?resources.?limits")

    def field_path(field: str, key: str) -> Expr:
        return f"{path} + {string(f'/resources/{field}/' + escape_pointer_token(key))}"

    parts = []
    for field, values in (("requests", requests), ("limits", limits)):
        replace = jsonpatch("replace", field_path(field, target), quantity)
        differs = f"string({values}[{target_key}]) != {quantity}"
        if resource is None:
            parts.append(cel.if_else(f"{gpu_key} in {values} && {differs}", f"[{replace}]", "[]"))
        else:
            rename = [
                jsonpatch("remove", field_path(field, gpu)),
                jsonpatch("add", field_path(field, target), quantity),
            ]
            parts.append(
                cel.if_else(
                    f"{gpu_key} in {values}",
                    "[" + ", ".join(rename) + "]",
                    cel.if_else(f"{target_key} in {values} && {differs}", f"[{replace}]", "[]"),
                )
            )
    # The API server requires a limit for extended resources: a request-only GPU
    # container gets one.
    add_limit = cel.if_else(
        f"has({container}.resources.limits)",
        jsonpatch("add", field_path("limits", target), quantity),
        jsonpatch(
            "add", f"{path} + {string('/resources/limits')}", f"{{{target_key}: {quantity}}}"
        ),
    )
    parts.append(
        cel.if_else(
            f"{gpu_key} in {requests} && !({gpu_key} in {limits}) && !({target_key} in {limits})",
            f"[{add_limit}]",
            "[]",
        )
    )
    return cel.concat(parts)


def gpu_containers(config: Config, root: str = "object") -> Expr:
    """CEL list of the GPU containers of every kind, as patch.gpu_containers finds them.

    Each is `{"path": JSON pointer, "name": name or kind[index], "container": object}`.
    """
    lists = []
    for kind in CONTAINER_LISTS:
        path = f"{string(f'/spec/{kind}/')} + string(index)"
        name = cel.if_else(
            "container.?name.orValue('') != ''",
            "container.name",
            f"{string(kind + '[')} + string(index) + {string(']')}",
        )
        entry = f'{{"path": dyn({path}), "name": dyn({name}), "container": dyn(container)}}'
        lists.append(
            f"{containers_of(kind, root)}.transformList(index, container, "
            f"{gpu_requested('container', config.gpu_resource)}, {entry})"
        )
    return cel.concat(lists)


def all_resource_operations(config: Config, placement: PlacementCel) -> Expr:
    """CEL list of the resource operations of every GPU container, in order."""
    gpu = config.gpu_resource
    renamed = placement.renamed()

    def operations(resource: str | None) -> Expr:
        return resource_operations("found.container", "found.path", gpu, resource)

    if renamed == "true":
        body = operations(placement.resource)
    elif renamed == "false":
        body = operations(None)
    else:
        body = cel.if_else(renamed, operations(placement.resource), operations(None))
    return f"{variable('gpuContainers')}.map(found, {body}).flatten()"


def node_selector_operations() -> Expr:
    """CEL list of patch.node_selector_operations for `variables.selector`."""
    selector = variable("selector")
    whole = jsonpatch("add", string("/spec/nodeSelector"), selector)
    each = jsonpatch("add", f"{string('/spec/nodeSelector/')} + jsonpatch.escapeKey(key)", "value")
    differs = "!(key in object.spec.nodeSelector) || object.spec.nodeSelector[key] != value"
    return cel.if_else(
        f"size({selector}) == 0",
        "[]",
        cel.if_else(
            "has(object.spec.nodeSelector)",
            f"{selector}.transformList(key, value, {differs}, {each})",
            f"[{whole}]",
        ),
    )


def asked_quantity(gpu_resource: str) -> Expr:
    """CEL for patch.asked_quantity of `found` (a gpuContainers entry): limit, else request."""
    gpu = string(gpu_resource)
    return cel.if_else(
        f"{gpu} in {cel.optional_map('found.container.?resources.?limits')}",
        f"string(found.container.resources.limits[{gpu}])",
        f"string(found.container.resources.requests[{gpu}])",
    )


def absent_labels_operations() -> Expr:
    """CEL list of patch.absent_labels_operations for `variables.absentLabels`.

    Each label becomes a DoesNotExist term ANDed into every required node affinity
    term; without any, the required affinity is added at the first missing level.
    """
    absent = variable("absentLabels")
    required_path = f"/spec/affinity/nodeAffinity/{REQUIRED_AFFINITY}"
    terms = required_node_terms()
    term_path = f"{string(required_path + '/nodeSelectorTerms/')} + string(index)"
    extend = cel.if_else(
        "size(term.?matchExpressions.orValue([])) > 0",
        "wanted.map(e, "
        + jsonpatch("add", f"{term_path} + {string('/matchExpressions/-')}", "e")
        + ")",
        "[" + jsonpatch("add", f"{term_path} + {string('/matchExpressions')}", "wanted") + "]",
    )
    required = '{"nodeSelectorTerms": [{"matchExpressions": wanted}]}'
    node_affinity = f"{{{string(REQUIRED_AFFINITY)}: {required}}}"
    added = cel.if_else(
        "!has(object.spec.affinity)",
        "["
        + jsonpatch("add", string("/spec/affinity"), f'{{"nodeAffinity": {node_affinity}}}')
        + "]",
        cel.if_else(
            "!has(object.spec.affinity.nodeAffinity)",
            "[" + jsonpatch("add", string("/spec/affinity/nodeAffinity"), node_affinity) + "]",
            "[" + jsonpatch("add", string(required_path), required) + "]",
        ),
    )
    body = cel.if_else(
        f"size({terms}) > 0",
        f"{terms}.transformList(index, term, true, {extend}).flatten()",
        added,
    )
    wanted = f'{absent}.map(k, {{"key": string(k), "operator": "DoesNotExist"}})'
    return cel.if_else(f"size({absent}) == 0", "[]", cel.let("wanted", wanted, body))


def original_entries(config: Config) -> Expr:
    """CEL list of the record's `"name":"quantity"` members, in container order.

    What each container asked for: its GPU limit, or its request without one.
    Names the API server accepts (DNS labels) need no JSON escaping beyond `\\` and `"`.
    """
    asked = asked_quantity(config.gpu_resource)
    escaped = (
        f"found.name.replace({string(_BACKSLASH)}, {string(_BACKSLASH * 2)})"
        f".replace({string(_QUOTE)}, {string(_BACKSLASH + _QUOTE)})"
    )
    quote, separator = string(_QUOTE), string(_QUOTE + ":" + _QUOTE)
    member = f"{quote} + {escaped} + {separator} + {asked} + {quote}"
    return f"{variable('gpuContainers')}.map(found, {member})"


def record(backend: str) -> Expr:
    """CEL for the decision record, byte for byte DecisionRecord.encode(); its last member,
    `instance`, is `variables.instanceMember` ("" when the record leaves it out)."""
    slices, source, backend_field, original = map(json_string, DecisionRecord.__struct_fields__[:4])
    before_slices = "{" + slices + ":"
    before_source = "," + source + ":"
    before_original = f",{backend_field}:{json_string(backend)},{original}:{{"
    return (
        f"{string(before_slices)} + string({variable('slices')}) + "
        f"{string(before_source)} + {variable('sourceJson')} + {string(before_original)} + "
        f"{variable('original')}.join(',') + {string('}')} + {variable('instanceMember')} + "
        f"{string('}')}"
    )


def patch(config: Config, placement: PlacementCel) -> Expr:
    """The JSONPatch mutation: resources, nodeSelector, then the record annotation."""
    record_value = variable("record")
    # An enrolled Pod may have no annotations at all: then the whole map is added.
    annotation = cel.if_else(
        "has(object.metadata.annotations)",
        jsonpatch(
            "add", string("/metadata/annotations/" + escape_pointer_token(APPLIED)), record_value
        ),
        jsonpatch("add", string("/metadata/annotations"), f"{{{string(APPLIED)}: {record_value}}}"),
    )
    return cel.concat(
        [
            all_resource_operations(config, placement),
            node_selector_operations(),
            absent_labels_operations(),
            f"[{annotation}]",
        ]
    )
