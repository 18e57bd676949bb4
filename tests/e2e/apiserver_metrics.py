"""The API server's own view of CastSlice's webhooks, read from kube-apiserver's /metrics.

kube-apiserver counts every call it makes to an admission webhook, labelled with
the webhook's name (`pods.castslice.castops.io`, `workloads.castslice.castops.io`):

- `apiserver_admission_webhook_fail_open_count{name, type="admit"}`: calls that
  failed (refused, reset, timed out, an error status, an unreadable answer) and were
  ignored because of `failurePolicy: Ignore`; each one is a Pod admitted unchanged;
- `apiserver_admission_webhook_admission_duration_seconds{name, operation, rejected,
  type}`: a histogram of how long the API server waited for each call, failed ones
  included;
- `apiserver_admission_webhook_request_total{code, name, operation, rejected, type}`:
  the calls by HTTP status: 200 answered, the front end's own error status (502...),
  503 for a call that got no answer (refused, reset, timed out);
- `apiserver_admission_webhook_rejection_count{error_type, name, operation,
  rejection_code, type}`: calls that refused the request. CastSlice never refuses, and
  a failed call ignored by `failurePolicy: Ignore` is no rejection, so CastSlice's
  webhooks have no series here unless registered with `Fail`, where a failed call
  refuses the Pod (error_type="calling_webhook_error").

A series exists only once its first event happened, so an absent one counts zero.
prometheus_client's parser names every counter sample `<family>_total`; here a sample
is found by its family's name as exposed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import kubernetes.client
from prometheus_client.parser import text_string_to_metric_families

from castslice.render.webhook_configuration import POD_WEBHOOK

FAIL_OPEN = "apiserver_admission_webhook_fail_open_count"
DURATION = "apiserver_admission_webhook_admission_duration_seconds"
REJECTION = "apiserver_admission_webhook_rejection_count"
WEBHOOK_PREFIX = "apiserver_admission_webhook_"
# What the API server measures of each MutatingAdmissionPolicy (policy mode).
POLICY_DURATION = "apiserver_mutating_admission_policy_check_duration_seconds"


REQUESTS = "apiserver_admission_webhook_request_total"
# Every request the API server answered, by verb, resource and HTTP status.
API_REQUESTS = "apiserver_request_total"


@dataclass(frozen=True)
class Sample:
    """One sample: its family as exposed, its own name (`_bucket`, `_count`...), labels."""

    family: str
    name: str
    labels: Mapping[str, str]
    value: float

    @property
    def part(self) -> str:
        """What the sample is of its family: `_sum`, `_count`, `_bucket`, or "" for a value."""
        suffix = self.name.removeprefix(self.family)
        return "" if suffix == "_total" else suffix


def webhook_samples(api: kubernetes.client.ApiClient, prefix: str = WEBHOOK_PREFIX) -> list[Sample]:
    """Every sample of a family named `prefix...` kube-apiserver exposes right now
    (by default its `apiserver_admission_webhook_*` families)."""
    response = api.rest_client.pool_manager.request(
        "GET", f"{api.configuration.host}/metrics", headers={"Accept": "text/plain"}
    )
    if response.status != 200:
        raise RuntimeError(f"GET /metrics answered {response.status}: {response.data[:300]!r}")
    text = response.data.decode()
    declared = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    found = []
    for family in text_string_to_metric_families(text):
        # The parser drops a counter's `_total`; the name as exposed is what users type.
        exposed = family.name if family.name in declared else f"{family.name}_total"
        if exposed.startswith(prefix):
            found += [
                Sample(exposed, sample.name, dict(sample.labels), sample.value)
                for sample in family.samples
                if not sample.name.endswith("_created")
            ]
    return found


def total(
    samples: list[Sample],
    family: str,
    webhook: str = POD_WEBHOOK,
    part: str = "",
    label: str = "name",
) -> float:
    """The sum over all other labels of `family`'s samples (of `part`) whose `label` is
    `webhook` (`policy` for an admission policy's families)."""
    return sum(
        s.value
        for s in samples
        if s.family == family and s.part == part and s.labels.get(label) == webhook
    )


def fail_open_count(api: kubernetes.client.ApiClient, webhook: str = POD_WEBHOOK) -> float:
    """How many calls to `webhook` have failed open since the API server started."""
    return total(webhook_samples(api), FAIL_OPEN, webhook)


def failed_pod_creates(api: kubernetes.client.ApiClient) -> float:
    """How many Pod creates the API server has answered with anything but 201 Created.

    Some fail after admission: before Kubernetes 1.31 a name made from `generateName`
    that is already taken is refused with 409 AlreadyExists once the webhooks have
    answered, and the controller creates the Pod again, so it is reviewed twice.
    """
    return sum(
        sample.value
        for sample in webhook_samples(api, API_REQUESTS)
        if sample.family == API_REQUESTS
        and sample.labels.get("verb") == "POST"
        and sample.labels.get("resource") == "pods"
        and not sample.labels.get("subresource")
        and sample.labels.get("code") != "201"
    )


def series_of(samples: list[Sample], webhook: str) -> dict[str, set[tuple[str, ...]]]:
    """For each family with a series for `webhook`: the label names it carries (a
    histogram's `le` left out)."""
    found: dict[str, set[tuple[str, ...]]] = {}
    for sample in samples:
        if sample.labels.get("name") == webhook:
            labels = tuple(sorted(key for key in sample.labels if key != "le"))
            found.setdefault(sample.family, set()).add(labels)
    return found
