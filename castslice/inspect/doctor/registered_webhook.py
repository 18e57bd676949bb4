"""Check: the MutatingWebhookConfiguration exists and has the settings CastSlice generates.

clientConfig is left out (every installation points somewhere else); the
endpoint check looks at it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from castslice.contract import Manifest
from castslice.contract.findings import Result, failed, passed
from castslice.render.webhook_configuration import RegistrationError, webhook_configuration
from castslice.settings.config import Config

CHECK = "registration"
NAMESPACE_LABEL = "kubernetes.io/metadata.name"
# The checks never compare clientConfig; the generator still wants somewhere to point.
PLACEHOLDER_URL = "https://castslice.invalid/"
# What the API server stores when a field is left out (admissionregistration/v1 defaults).
_DEFAULTS = {
    "failurePolicy": "Fail",
    "matchPolicy": "Equivalent",
    "reinvocationPolicy": "Never",
    "timeoutSeconds": 10,
}
_SCALARS = ("failurePolicy", "sideEffects", "timeoutSeconds", "matchPolicy", "reinvocationPolicy")
# Why a difference matters, where it is not obvious from the setting itself.
_CONSEQUENCES = {
    ("failurePolicy", "Fail"): "Pod creation stops whenever CastSlice cannot answer",
    ("sideEffects", "Some"): "server-side dry runs skip it",
    ("sideEffects", "Unknown"): "server-side dry runs skip it",
}


def expected_configuration(config: Config, live: Manifest | None = None) -> Manifest:
    """What `castslice webhook` renders for `config` and the installation `live` shows.

    An in-cluster installation's own namespace (excluded from the webhooks) is
    where its Service is.
    """
    service = _service(live) if live else None
    if service:
        try:
            return webhook_configuration(
                config,
                service=(service["namespace"], service["name"], service.get("path") or "/"),
                own_namespace=service["namespace"],
            )
        except (RegistrationError, KeyError):
            pass  # a Service the generator would not write: compare with the default
    return webhook_configuration(config, url=PLACEHOLDER_URL)


def check_registration(
    name: str, live: Manifest | None, expected: Manifest, others: Sequence[str] = ()
) -> Result:
    """Compare the cluster's configuration `live` (None: not found) with `expected`.

    `others` names configurations that hold CastSlice's webhooks under another name.
    """
    if live is None:
        fix = "register CastSlice: castslice webhook --url URL | kubectl apply -f -"
        if others:
            fix = f"run castslice doctor --name {others[0]} (it has CastSlice's webhooks), or {fix}"
        return failed(
            CHECK,
            f"MutatingWebhookConfiguration {name} not found: no Pod is rewritten",
            fix,
        )
    webhooks = {webhook.get("name"): webhook for webhook in live.get("webhooks") or []}
    problems: list[str] = []
    names = []
    for want in expected.get("webhooks") or []:
        names.append(want["name"])
        have = webhooks.get(want["name"])
        if have is None:
            problems.append(f"webhook {want['name']} is missing")
            continue
        problems += [f"{want['name']}: {problem}" for problem in webhook_differences(want, have)]
    if problems:
        return failed(
            CHECK,
            f"MutatingWebhookConfiguration {name} differs from the generated one: "
            + "; ".join(problems),
            f"re-apply it: {_render_command(live)} | kubectl apply -f -",
        )
    return passed(
        CHECK,
        f"MutatingWebhookConfiguration {name} has the expected settings ({', '.join(names)})",
    )


def castslice_webhook_names(expected: Manifest) -> list[str]:
    return [webhook["name"] for webhook in expected.get("webhooks") or []]


def holders_of(configurations: Iterable[Manifest], webhook_names: Sequence[str]) -> list[str]:
    """Names of the configurations that contain any of `webhook_names`."""
    return [
        configuration["metadata"]["name"]
        for configuration in configurations
        if any(
            webhook.get("name") in webhook_names for webhook in configuration.get("webhooks") or []
        )
    ]


def webhook_differences(want: Manifest, have: Manifest) -> list[str]:
    """What in `have` differs from `want`, one phrase each, in the order of the spec."""
    problems = []
    for field in _SCALARS:
        expected_value = want.get(field, _DEFAULTS.get(field))
        value = have.get(field, _DEFAULTS.get(field))
        if value != expected_value:
            problem = f"{field} is {value}, expected {expected_value}"
            consequence = _CONSEQUENCES.get((field, str(value)))
            problems.append(f"{problem} ({consequence})" if consequence else problem)
    if _rules(have) != _rules(want):
        problems.append(f"rules are {_rules_text(have) or 'empty'}, expected {_rules_text(want)}")
    missing = _excluded_namespaces(want) - _excluded_namespaces(have)
    if missing:
        problems.append(
            f"namespaceSelector does not exclude {', '.join(sorted(missing))}"
            " (their Pods are sent to CastSlice)"
        )
    problems += _condition_differences(want, have)
    return problems


def _rules(webhook: Manifest) -> list[tuple[Any, ...]]:
    return sorted(
        (
            tuple(sorted(rule.get("operations") or [])),
            tuple(sorted(rule.get("apiGroups") or [])),
            tuple(sorted(rule.get("apiVersions") or [])),
            tuple(sorted(rule.get("resources") or [])),
            rule.get("scope") or "*",
        )
        for rule in webhook.get("rules") or []
    )


def _rules_text(webhook: Manifest) -> str:
    return ", ".join(
        f"{'/'.join(operations)} {','.join(resources)}"
        f" ({','.join(group or 'core' for group in groups)}/{','.join(versions)})"
        for operations, groups, versions, resources, _ in _rules(webhook)
    )


def _excluded_namespaces(webhook: Manifest) -> set[str]:
    selector = webhook.get("namespaceSelector") or {}
    excluded: set[str] = set()
    for expression in selector.get("matchExpressions") or []:
        if expression.get("key") == NAMESPACE_LABEL and expression.get("operator") == "NotIn":
            excluded.update(expression.get("values") or [])
    return excluded


def _conditions(webhook: Manifest) -> dict[str, str]:
    # YAML folding and indentation change the whitespace of the same CEL expression.
    return {
        condition.get("name", ""): " ".join(str(condition.get("expression", "")).split())
        for condition in webhook.get("matchConditions") or []
    }


def _condition_differences(want: Manifest, have: Manifest) -> list[str]:
    wanted, present = _conditions(want), _conditions(have)
    if wanted == present:
        return []
    if wanted and not present:
        return ["matchConditions are missing (every Pod creation waits for CastSlice)"]
    details = []
    if missing := [name for name in wanted if name not in present]:
        details.append(f"missing {', '.join(missing)}")
    if changed := [name for name in wanted if name in present and present[name] != wanted[name]]:
        details.append(f"changed {', '.join(changed)}")
    if extra := [name for name in present if name not in wanted]:
        details.append(f"unexpected {', '.join(extra)}")
    return [f"matchConditions differ ({'; '.join(details)})"]


def _service(live: Manifest) -> Manifest | None:
    for webhook in live.get("webhooks") or []:
        service = (webhook.get("clientConfig") or {}).get("service")
        if service:
            return service
    return None


def _render_command(live: Manifest) -> str:
    service = _service(live)
    if service:
        return f"castslice webhook --service {service.get('namespace')}/{service.get('name')}"
    return "castslice webhook --url URL"
