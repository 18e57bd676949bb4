"""CastSlice's MutatingWebhookConfiguration, generated from the configuration and its policy.

Two webhooks, one endpoint: `pods.castslice.castops.io` rewrites Pods, and
`workloads.castslice.castops.io` only warns about annotated workloads. Their
matchConditions (CEL, evaluated by the API server) decide which requests reach
the function at all: exactly the Pods the enrolment policy enrols or that are
annotated, and the workloads that carry CastSlice annotations. Every shipped
configuration and `castslice webhook` are this module's output.
"""

from __future__ import annotations

import base64
import copy
import re
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from . import cel
from .config import MIN_PATH_TOKEN_LENGTH, Config
from .enrolment import NamespacePattern, Policy, Requirement, Rule, glob_regex
from .manifests import dump_yaml
from .operator_kinds import OPERATOR_KINDS, TemplateLocation
from .patch import CONTAINER_LISTS
from .slices import MIRROR, OPTIMIZE

Manifest = dict[str, Any]

POD_WEBHOOK = "pods.castslice.castops.io"
WORKLOAD_WEBHOOK = "workloads.castslice.castops.io"
DEFAULT_NAME = "castslice"
DEFAULT_NAMESPACE = "castslice"
# Never sent to CastSlice, whatever the policy says: the cluster's own machinery.
SYSTEM_NAMESPACES = ("kube-system", "kube-node-lease")
# The policy a registration was generated from, as JSON: what the function must run with.
POLICY_ANNOTATION = "castslice.castops.io/policy"
ANNOTATION_PREFIX = "castops.io/"
# The API server accepts at most this many matchConditions per webhook.
MAX_MATCH_CONDITIONS = 64
# cel-go's default parser limit on one expression.
MAX_EXPRESSION_CODE_POINTS = 100_000

WORKLOAD_RESOURCES = {
    ("apps", "v1"): ("deployments", "statefulsets", "daemonsets", "replicasets"),
    ("batch", "v1"): ("jobs", "cronjobs"),
}
# Where each workload kind keeps the metadata of the Pods it creates.
POD_TEMPLATE_METADATA = (
    "object.spec.template.metadata",
    "object.spec.jobTemplate.spec.template.metadata",
)

ANNOTATIONS = "object.metadata.annotations"
LABELS = "object.metadata.labels"
NAMESPACE = "request.namespace"

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_PATH_TOKEN = re.compile(r"[A-Za-z0-9._~-]+")


class RegistrationError(ValueError):
    """The registration cannot be generated as asked; the message says which input is wrong."""


def webhook_configuration(
    config: Config,
    *,
    url: str | None = None,
    service: tuple[str, str, str] | None = None,
    token: str | None = None,
    name: str = DEFAULT_NAME,
    ca_bundle: bytes | None = None,
    own_namespace: str = DEFAULT_NAMESPACE,
) -> Manifest:
    """The MutatingWebhookConfiguration for `config`, calling `url` or `service`
    (namespace, name, path), with `token` as the last path segment."""
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise RegistrationError(f"the name {name!r} is not a valid Kubernetes object name")
    if not _DNS_LABEL.fullmatch(own_namespace):
        raise RegistrationError(f"the namespace {own_namespace!r} is not a valid namespace name")
    client = client_config(url=url, service=service, token=token, ca_bundle=ca_bundle)
    namespaces = namespace_selector(own_namespace)
    # Each webhook gets its own copies: a consumer editing one must not change the other.
    metadata: Manifest = {"name": name, "labels": {"app.kubernetes.io/name": "castslice"}}
    if config.policy is not None and config.policy.document:
        metadata["annotations"] = {POLICY_ANNOTATION: config.policy.document}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": [
            pod_webhook(config, copy.deepcopy(client), copy.deepcopy(namespaces)),
            workload_webhook(client, namespaces),
        ],
    }


def pod_webhook(config: Config, client: Manifest, namespaces: Manifest) -> Manifest:
    return {
        "name": POD_WEBHOOK,
        **_common_settings(client),
        "rules": [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "scope": "*",
            }
        ],
        "namespaceSelector": namespaces,
        "matchConditions": pod_match_conditions(config),
    }


def workload_rules() -> list[Manifest]:
    """CREATE and UPDATE of every built-in workload kind (Deployment, Job…)."""
    return [
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": [group],
            "apiVersions": [version],
            "resources": list(resources),
            "scope": "Namespaced",
        }
        for (group, version), resources in WORKLOAD_RESOURCES.items()
    ]


def operator_rules() -> list[Manifest]:
    """CREATE and UPDATE of the operators' resources that hold Pod templates, one rule a group.

    The API server accepts rules for groups it does not serve; they match once the
    operator's CRDs are installed.
    """
    groups: dict[str, tuple[dict[str, None], dict[str, None]]] = {}
    for entry in OPERATOR_KINDS:
        versions, resources = groups.setdefault(entry.group, ({}, {}))
        versions.update(dict.fromkeys(entry.versions))
        resources[entry.resource] = None
    return [
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": [group],
            "apiVersions": list(versions),
            "resources": list(resources),
            # Some are cluster-scoped (ClusterTrainingRuntime, ClusterWorkflowTemplate).
            "scope": "*",
        }
        for group, (versions, resources) in groups.items()
    ]


def workload_webhook(client: Manifest, namespaces: Manifest, operators: bool = True) -> Manifest:
    """The workload webhook; `operators=False` leaves out the operators' kinds (policy mode)."""
    return {
        "name": WORKLOAD_WEBHOOK,
        **_common_settings(client),
        "rules": [*workload_rules(), *(operator_rules() if operators else ())],
        "namespaceSelector": namespaces,
        "matchConditions": [
            _condition("castslice-annotations", carries_castslice_annotations(operators))
        ],
    }


def _common_settings(client: Manifest) -> Manifest:
    return {
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        # CastSlice never blocks: if it cannot answer, the request goes on unchanged.
        "failurePolicy": "Ignore",
        "matchPolicy": "Equivalent",
        "reinvocationPolicy": "Never",
        "timeoutSeconds": 5,
        "clientConfig": client,
    }


def namespace_selector(own_namespace: str) -> Manifest:
    excluded = list(dict.fromkeys([*SYSTEM_NAMESPACES, own_namespace]))
    return {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded}
        ]
    }


def client_config(
    *,
    url: str | None = None,
    service: tuple[str, str, str] | None = None,
    token: str | None = None,
    ca_bundle: bytes | None = None,
) -> Manifest:
    """`clientConfig`: a URL or a Service, the path token appended, the CA if one is given."""
    if (url is None) == (service is None):
        raise RegistrationError("give either a URL or a Service, not both or neither")
    if token is not None and (
        len(token) < MIN_PATH_TOKEN_LENGTH or not _PATH_TOKEN.fullmatch(token)
    ):
        raise RegistrationError(
            f"the path token must be at least {MIN_PATH_TOKEN_LENGTH} characters from "
            "A-Z a-z 0-9 . _ ~ -"
        )
    client: Manifest
    if url is not None:
        client = {"url": _with_token(_checked_url(url), token)}
    else:
        assert service is not None
        namespace, service_name, path = service
        if not _DNS_LABEL.fullmatch(namespace) or not _DNS_LABEL.fullmatch(service_name):
            raise RegistrationError(
                f"the Service {namespace}/{service_name} is not a valid namespace/name"
            )
        if not path.startswith("/"):
            raise RegistrationError(f"the Service path {path!r} must start with '/'")
        client = {
            "service": {
                "namespace": namespace,
                "name": service_name,
                "path": _with_token(path, token),
                "port": 443,
            }
        }
    if ca_bundle is not None:
        client["caBundle"] = base64.b64encode(ca_bundle).decode("ascii")
    return client


def _checked_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is what validates it
    except ValueError as error:
        raise RegistrationError(f"the URL {url!r} is not valid: {error}") from None
    if parts.scheme != "https" or not parts.hostname:
        raise RegistrationError(f"the URL {url!r} must be https://HOST[/PATH]")
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise RegistrationError(f"the URL {url!r} must have no query and no fragment")
    if parts.username or parts.password:
        raise RegistrationError(f"the URL {url!r} must not carry a user or password")
    return url


def _with_token(path_or_url: str, token: str | None) -> str:
    if token is None:
        return path_or_url
    return path_or_url.rstrip("/") + "/" + token


# The Pod webhook's matchConditions -------------------------------------------------


def pod_match_conditions(config: Config) -> list[Manifest]:
    """Only Pods that CastSlice would rewrite, or whose annotations ask for it, are sent.

    Without a policy (or with one that enrols no one) that is the annotated Pods;
    with one, also the unannotated GPU Pods its first matching rule enrols.
    Opted-out Pods (`castops.io/optimize: "false"`) and mirror Pods never are.
    """
    policy = config.policy
    if policy is None or not policy.enrols_anyone:
        conditions = [
            ("opted-in", opted_in()),
            ("not-a-mirror-pod", not_a_mirror_pod()),
        ]
    else:
        enrolled = cel.all_of(
            [requests_gpu(config.gpu_resource), policy_enrols(policy)], separator="\n"
        )
        conditions = [
            ("not-opted-out", not_opted_out()),
            ("opted-in-or-enrolled", cel.any_of([opted_in(), enrolled], separator="\n")),
            ("not-a-mirror-pod", not_a_mirror_pod()),
        ]
    return [_condition(name, expression) for name, expression in conditions]


def _condition(name: str, expression: str) -> Manifest:
    expression = cel.unwrap(expression)
    if len(expression) > MAX_EXPRESSION_CODE_POINTS:
        raise RegistrationError(
            f"the matchCondition {name} would be {len(expression)} characters, more than the "
            f"API server's {MAX_EXPRESSION_CODE_POINTS}; use fewer rules or globs"
        )
    return {"name": name, "expression": expression}


def opted_in() -> str:
    return cel.value_in(ANNOTATIONS, OPTIMIZE, ["true"])


def not_opted_out() -> str:
    return cel.negate(cel.value_in(ANNOTATIONS, OPTIMIZE, ["false"]))


def not_a_mirror_pod() -> str:
    # The kubelet owns mirror Pods; the API server refuses any change to them.
    return cel.lacks_key(ANNOTATIONS, MIRROR)


def requests_gpu(gpu: str) -> str:
    """Some container of any kind names `gpu` in its requests or limits."""
    resources = [f"c.resources.{field}" for field in ("requests", "limits")]
    names_gpu = cel.all_of(
        [
            "has(c.resources)",
            cel.any_of(cel.all_of([f"has({m})", f"{cel.string(gpu)} in {m}"]) for m in resources),
        ]
    )
    in_kinds = cel.any_of(
        (
            cel.all_of(
                [f"has(object.spec.{kind})", cel.exists(f"object.spec.{kind}", "c", names_gpu)]
            )
            for kind in CONTAINER_LISTS
        ),
        separator="\n",
    )
    return cel.all_of(["has(object.spec)", in_kinds])


def policy_enrols(policy: Policy) -> str:
    """Whether the first rule that matches the Pod enrols it (false when none matches).

    Consecutive rules with the same verdict form one group: `(a || b || rest)`
    for enrolling rules and `!(c || d) && rest` for excluding ones. Rules after
    the last enrolling one cannot enrol anyone and are left out.
    """
    groups: list[tuple[bool, list[Rule]]] = []
    for rule in policy.rules:
        if groups and groups[-1][0] == rule.optimize:
            groups[-1][1].append(rule)
        else:
            groups.append((rule.optimize, [rule]))
    expression = cel.FALSE
    for optimize, rules in reversed(groups):
        matches = [rule_matches(rule) for rule in rules]
        if optimize:
            expression = cel.any_of([*matches, expression], separator="\n")
        else:
            expression = cel.all_of([cel.negate(cel.any_of(matches)), expression], separator="\n")
    return expression


def rule_matches(rule: Rule) -> str:
    return cel.all_of(
        [
            cel.TRUE if rule.namespaces is None else namespace_matches(rule.namespaces),
            cel.TRUE if rule.selector is None else selector_matches(rule.selector),
        ]
    )


def namespace_matches(patterns: Sequence[NamespacePattern]) -> str:
    """`request.namespace` is one of the names, or matches one of the globs."""
    names = [pattern.text for pattern in patterns if pattern.regex is None]
    return cel.any_of(
        [
            cel.equals_any(NAMESPACE, names),
            *(glob_matches(NAMESPACE, pattern.text) for pattern in patterns if pattern.regex),
        ]
    )


def glob_matches(subject: str, glob: str) -> str:
    """A shell-style glob as CEL: startsWith/endsWith where a lone `*` allows, else a regex."""
    stem = glob.strip("*")
    if not any(char in stem for char in "*?["):
        if glob == "*" * len(glob):
            return cel.TRUE
        if glob.endswith("*") and not glob.startswith("*"):
            return cel.starts_with(subject, stem)
        if glob.startswith("*") and not glob.endswith("*"):
            return cel.ends_with(subject, stem)
    return cel.matches(subject, glob_regex(glob))


def selector_matches(requirements: Iterable[Requirement]) -> str:
    """A label selector over the Pod's labels, as Kubernetes evaluates it."""
    return cel.all_of(requirement_matches(requirement) for requirement in requirements)


def requirement_matches(requirement: Requirement) -> str:
    key, operator, values = requirement
    if operator == "In":
        return cel.value_in(LABELS, key, values)
    if operator == "NotIn":
        # As in Kubernetes, a Pod without the label is "not in" any set of values.
        return cel.negate(cel.value_in(LABELS, key, values))
    if operator == "Exists":
        return cel.has_key(LABELS, key)
    return cel.lacks_key(LABELS, key)


# The workload webhook's matchCondition -----------------------------------------------


def carries_castslice_annotations(operators: bool = True) -> str:
    """Any `castops.io/` annotation on the workload itself or on the Pods it creates."""
    prefix = cel.string(ANNOTATION_PREFIX)
    # The object's own metadata is always there; a Pod template's may not be.
    places = [("object.metadata", "object.metadata")]
    places += [(metadata, "object") for metadata in POD_TEMPLATE_METADATA]
    terms = [
        cel.all_of(
            [
                *cel.has_path_terms(f"{metadata}.annotations", known),
                cel.exists(f"{metadata}.annotations", "k", f"k.startsWith({prefix})"),
            ]
        )
        for metadata, known in places
    ]
    covered = {f"{metadata}.annotations" for metadata, _ in places}
    locations = _operator_locations() if operators else []
    for path in dict.fromkeys(_annotations_path(location) for location in locations):
        if f"object.{path}" not in covered:
            terms.append(_annotated_at("object", path.split("."), prefix, 0))
    return cel.any_of(terms, separator="\n")


def _operator_locations() -> list[TemplateLocation]:
    return [location for entry in OPERATOR_KINDS for location in entry.templates]


def _annotations_path(location: TemplateLocation) -> str:
    tail = "annotations" if location.shape == "pod-spec" else "metadata.annotations"
    return f"{location.path}.{tail}"


_LIST_SEGMENT = re.compile(r"(?P<field>[^.\[\]]+)\[[^.\[\]]+\]")


def _annotated_at(base: str, segments: list[str], prefix: str, depth: int) -> str:
    """Some `castops.io/` annotation at the wildcard path `segments` below `base`.

    Every field is tested with has() before it is read, and each wildcard becomes
    an exists() over the map's keys or the list's items.
    """
    terms: list[str] = []
    current = base
    for index, segment in enumerate(segments):
        rest = segments[index + 1 :]
        listed = _LIST_SEGMENT.fullmatch(segment)
        field = listed["field"] if listed else segment
        if field == "*":
            continue
        terms.append(f"has({current}.{field})")
        current = f"{current}.{field}"
        variable = f"v{depth}"
        if rest and rest[0] == "*":
            inner = _annotated_at(f"{current}[{variable}]", rest[1:], prefix, depth + 1)
            return cel.all_of([*terms, cel.exists(current, variable, inner)])
        if listed:
            inner = _annotated_at(variable, rest, prefix, depth + 1)
            return cel.all_of([*terms, cel.exists(current, variable, inner)])
    return cel.all_of([*terms, cel.exists(current, "k", f"k.startsWith({prefix})")])


# Rendering -----------------------------------------------------------------------------


def to_yaml(document: Manifest, header: Sequence[str] = ()) -> str:
    """`document` as YAML, multi-line expressions as literal blocks, after `header` comments."""
    comments = "".join(f"# {line}\n" if line else "#\n" for line in header)
    return comments + dump_yaml(document)
