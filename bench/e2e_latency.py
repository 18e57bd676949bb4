"""What admission adds to a Pod create, side by side, through a real kube-apiserver.

`python -m bench.e2e_latency` (part of `python -m bench`) starts the end-to-end
suite's control plane and times Pod creates from a client, alternating one by one
between six set-ups, all live at once, each selecting a namespace of its own:

- none: no webhook, no admission policy;
- castslice: CastSlice as deployed, functions-framework (gunicorn) behind nginx TLS;
- castslice flask: the same on functions-framework's default server (`--target=mutate`,
  Flask on gunicorn's threads), what `functions-framework --target=mutate` serves;
- go: bench/reference/main.go, Go's standard library doing the same rewrite,
  behind the same nginx TLS front end, registered with the same configuration;
- policy: `castslice policy`'s admission policies, run by the API server itself;
- policy floor: what the API server spends on any MutatingAdmissionPolicy for the
  same Pods: policy mode's, with its variables removed and a patch that changes
  nothing (a `test` operation).

Each set-up is timed with server-side dry runs (admission without storage) and
real creates. Then a burst: a Deployment of opted-in Pods scaled out at once,
the time until all its Pods exist, with and without CastSlice.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes.client
import yaml

from castslice.environment import load_config
from castslice.render.webhook_configuration import POD_WEBHOOK
from tests.e2e import apiserver_metrics, burst, tools
from tests.e2e.castslice_server import CastSliceServer
from tests.e2e.cluster import LocalControlPlane
from tests.e2e.kubectl import Kubectl
from tests.e2e.pods import create_namespace
from tests.e2e.registration import configuration_for
from tests.procs import wait_until
from tests.served import TARGETS

from . import bodies
from .report import Spread, load_average
from .servers import REPO

DEFAULT_OUTPUT = REPO / "bench" / "results" / "e2e-latest.md"
REFERENCE = REPO / "bench" / "reference"
# Built outside the tree, once per source version (go build caches the rest).
REFERENCE_BINARY = Path.home() / ".cache" / "castslice" / "bench" / "reference"
FLASK_TARGET = TARGETS["flask"]
SETUPS = ("none", "castslice", "castslice flask", "go", "policy", "policy floor")
# The set-ups that rewrite the Pod; the others store it as sent.
MUTATING = ("castslice", "castslice flask", "go", "policy")
FLOOR_POLICY = "floor.bench.castslice.castops.io"
# The set-ups the API server runs itself, by the name of their MutatingAdmissionPolicy.
POLICIES = {"policy": POD_WEBHOOK, "policy floor": FLOOR_POLICY}
MODES = ("dry run", "create")
APPLIED = burst.APPLIED.encode()
# Untimed steps at the start of each round: the API server's first calls open connections.
WARMUP_PODS = 5
# The namespace label each set-up's registration or policy binding selects.
SETUP = "bench.castslice.castops.io/setup"
# Targets: CastSlice's added latency over the Go reference's, the policy's over CastSlice's.
VERSUS_GO_TARGET = 1.1
POLICY_TARGET = 0.4


@dataclass
class Samples:
    """Create latencies in seconds per (set-up, mode), and per-round medians."""

    latencies: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    round_medians: list[dict[tuple[str, str], float]] = field(default_factory=list)
    # The API server's own timing of the webhook calls or the policy: (sum, count) per set-up.
    webhook_calls: dict[str, tuple[float, float]] = field(default_factory=dict)

    def percentile(self, setup: str, mode: str, percent: float) -> float:
        return percentile(self.latencies[setup, mode], percent)

    def added(self, setup: str, mode: str, percent: float) -> float:
        return self.percentile(setup, mode, percent) - self.percentile("none", mode, percent)


class Setups:
    """All set-ups live at once, each in a namespace of its own.

    Every registration and policy binding selects only its own namespace (by a
    label), so which namespace a Pod is created in decides what admits it. The
    creates of the set-ups then alternate one by one: a moment of machine noise
    hits all of them alike, instead of whichever set-up was being measured.
    """

    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        servers: dict[str, CastSliceServer],
        kubectl: Kubectl,
        policy: str | None,
    ) -> None:
        self.api = api
        self.servers = servers
        self.available = [name for name in SETUPS if name not in POLICIES or policy is not None]
        self.namespaces = {name: f"bench-{_label(name)}" for name in self.available}
        for name, namespace in self.namespaces.items():
            core = kubernetes.client.CoreV1Api(api)
            labels = {SETUP: _label(name)}
            core.create_namespace({"metadata": {"name": namespace, "labels": labels}})
            create_namespace(api, namespace)  # waits for its default ServiceAccount
        admission = kubernetes.client.AdmissionregistrationV1Api(api)
        for name, server in servers.items():
            admission.create_mutating_webhook_configuration(_registration(name, server))
        if policy is not None:
            kubectl.run("apply", "-f", "-", stdin=_bound_to_namespace(policy))
            kubectl.run("apply", "-f", "-", stdin=_floor_policy(policy))
        self._pool = api.rest_client.pool_manager
        pod = bodies.typical_pod()
        for key in ("ownerReferences", "generateName", "namespace"):
            pod["metadata"].pop(key)
        pod.pop("status", None)
        # Left Pending and out of the scheduler's way: this measures admission alone.
        pod["spec"]["schedulerName"] = burst.UNSCHEDULED
        self._pod = pod
        wait_until(self._settled, timeout=60, what="every set-up to admit its Pods")

    def create(self, setup: str, dry_run: bool) -> float:
        """One create in `setup`'s namespace, timed from the client; its answer checked."""
        payload = self._payload()
        url = self._url(setup) + ("?dryRun=All" if dry_run else "")
        started = time.perf_counter()
        response = self._pool.request(
            "POST",
            url,
            body=payload,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        elapsed = time.perf_counter() - started
        if response.status != 201:
            raise RuntimeError(f"create answered {response.status}: {response.data[:300]!r}")
        if (APPLIED in response.data) != (setup in MUTATING):
            raise RuntimeError(f"a Pod came back rewritten or not against the set-up {setup}")
        return elapsed

    def delete_pods(self) -> None:
        core = kubernetes.client.CoreV1Api(self.api)
        for namespace in self.namespaces.values():
            core.delete_collection_namespaced_pod(namespace)

    def _settled(self) -> bool:
        """Whether each namespace's probe was admitted by its own set-up, and only by it."""
        for setup in self.available:
            before = {name: _access_log_size(server) for name, server in self.servers.items()}
            response = self._pool.request(
                "POST",
                self._url(setup) + "?dryRun=All",
                body=self._payload(),
                headers={"Content-Type": "application/json"},
            )
            called = {
                name
                for name, server in self.servers.items()
                if _access_log_size(server) > before[name]
            }
            mutated = response.status == 201 and APPLIED in response.data
            expected = {setup} & set(self.servers)
            if called != expected or mutated != (setup in MUTATING):
                return False
        return True

    def _url(self, setup: str) -> str:
        return f"{self.api.configuration.host}/api/v1/namespaces/{self.namespaces[setup]}/pods"

    def _payload(self) -> bytes:
        # Serialized before the clock starts, so the client's own work stays out of the timing.
        self._pod["metadata"]["name"] = f"bench-{uuid.uuid4().hex[:12]}"
        return json.dumps(self._pod, separators=(",", ":")).encode()


def _registration(setup: str, server: CastSliceServer) -> dict[str, Any]:
    """The generated configuration for `server`, named for `setup` and selecting only its
    namespace; the others' webhooks renamed, so the API server's metrics tell them apart."""
    document = configuration_for(server.url(), server.ca_pem, load_config(server.settings))
    document["metadata"]["name"] = f"castslice-bench-{_label(setup)}"
    for hook in document["webhooks"]:
        hook["namespaceSelector"].setdefault("matchLabels", {})[SETUP] = _label(setup)
        hook["name"] = _webhook_name(setup, hook["name"])
    return document


def _webhook_name(setup: str, name: str) -> str:
    """A webhook's name for `setup`: CastSlice's as generated, the others' renamed for theirs."""
    if setup == "castslice":
        return name
    return name.replace("castslice", "go-reference" if setup == "go" else _label(setup))


def _bound_to_namespace(policy: str) -> str:
    """`castslice policy`'s objects, their bindings selecting only the policy namespace."""
    documents = [document for document in yaml.safe_load_all(policy) if document]
    for document in documents:
        if document["kind"].endswith("Binding"):
            resources = document["spec"].setdefault("matchResources", {})
            selector = resources.setdefault("namespaceSelector", {})
            selector.setdefault("matchLabels", {})[SETUP] = _label("policy")
    return yaml.safe_dump_all(documents)


def _label(setup: str) -> str:
    """The set-up's name as a label value (and namespace suffix): no spaces."""
    return setup.replace(" ", "-")


def _floor_policy(policy: str) -> str:
    """Policy mode's MutatingAdmissionPolicy as a floor: the same matching, no variables,
    and a patch that changes nothing, bound to the floor's namespace only."""
    documents = [document for document in yaml.safe_load_all(policy) if document]
    mutating = next(d for d in documents if d["kind"] == "MutatingAdmissionPolicy")
    mutating["metadata"]["name"] = FLOOR_POLICY
    mutating["spec"]["variables"] = []
    unchanged = '[JSONPatch{op: "test", path: "/kind", value: "Pod"}]'
    mutating["spec"]["mutations"] = [
        {"patchType": "JSONPatch", "jsonPatch": {"expression": unchanged}}
    ]
    binding = {
        "apiVersion": mutating["apiVersion"],
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": FLOOR_POLICY},
        "spec": {
            "policyName": FLOOR_POLICY,
            "matchResources": {
                "namespaceSelector": {"matchLabels": {SETUP: _label("policy floor")}}
            },
        },
    }
    return yaml.safe_dump_all([mutating, binding])


def measure(setups: Setups, rounds: int, count: int) -> Samples:
    samples = Samples()
    names = setups.available
    before = {name: _admission_time(setups.api, name) for name in names if name != "none"}
    for round_index in range(rounds):
        timings: dict[tuple[str, str], list[float]] = {}
        for step in range(WARMUP_PODS + count):
            # Rotating the order keeps any set-up from always going first.
            order = names[step % len(names) :] + names[: step % len(names)]
            for mode in MODES:
                for setup in order:
                    elapsed = setups.create(setup, mode == "dry run")
                    if step >= WARMUP_PODS:
                        timings.setdefault((setup, mode), []).append(elapsed)
        for key, values in timings.items():
            samples.latencies.setdefault(key, []).extend(values)
        samples.round_medians.append({key: statistics.median(v) for key, v in timings.items()})
        setups.delete_pods()
        medians = samples.round_medians[-1]
        _progress(
            f"round {round_index + 1}/{rounds}: p50 ms "
            + ", ".join(f"{s} {medians[s, 'dry run'] * 1000:.2f}" for s in names)
        )
    for name, (seconds, calls) in before.items():
        now_seconds, now_calls = _admission_time(setups.api, name)
        samples.webhook_calls[name] = (now_seconds - seconds, now_calls - calls)
    return samples


def measure_bursts(setups: Setups, rounds: int, replicas: int) -> dict[str, list[float]]:
    """Seconds until all Pods of a scaled-out Deployment exist, without and with CastSlice."""
    seconds: dict[str, list[float]] = {"none": [], "castslice": []}
    for round_index in range(rounds):
        order = ["none", "castslice"] if round_index % 2 == 0 else ["castslice", "none"]
        for setup in order:
            namespace = setups.namespaces[setup]
            name = f"burst-{uuid.uuid4().hex[:6]}"
            elapsed, pods = burst.timed_burst(setups.api, namespace, name, replicas)
            rewritten = sum(burst.mutated(pod) for pod in pods)
            if rewritten != (replicas if setup == "castslice" else 0):
                raise RuntimeError(f"{rewritten} of {replicas} burst Pods rewritten with {setup}")
            seconds[setup].append(elapsed)
            _progress(f"burst {round_index + 1}/{rounds} {setup:>9}: {elapsed:.1f} s")
            burst.remove_burst(setups.api, namespace, name)
            wait_until(
                lambda namespace=namespace: not burst.pods_in(setups.api, namespace),
                timeout=120,
                what="the burst's Pods to be deleted",
            )
    return seconds


def render(
    samples: Samples,
    bursts: dict[str, list[float]],
    settings: Settings,
    load: tuple[str, str],
    fail_opens: float,
) -> str:
    setups = [setup for setup in SETUPS if (setup, MODES[0]) in samples.latencies]
    rows = []
    for mode in MODES:
        for setup in setups:
            p50, p99 = (samples.percentile(setup, mode, p) for p in (50, 99))
            added = "– | –"
            if setup != "none":
                added = " | ".join(f"**{_ms(samples.added(setup, mode, p))}**" for p in (50, 99))
            rows.append(f"| {mode} | {setup} | {_ms(p50)} | {_ms(p99)} | {added} |")
    ratio_rows = [
        *_ratio_rows(samples, "castslice", "go", "CastSlice ÷ Go reference", VERSUS_GO_TARGET),
        *_ratio_rows(samples, "castslice flask", "go", "CastSlice on Flask ÷ Go reference"),
    ]
    if "policy" in setups:
        ratio_rows += _ratio_rows(
            samples, "policy", "castslice", "policy ÷ CastSlice", POLICY_TARGET
        )
        ratio_rows += _ratio_rows(samples, "policy floor", "castslice", "policy floor ÷ CastSlice")
    calls = [
        f"| {setup} | {total / count * 1000:.2f} | {count:.0f} |"
        for setup, (total, count) in samples.webhook_calls.items()
        if count
    ]
    burst_rows = [
        f"| {setup} | {Spread.of(values).median:.1f} | "
        f"{Spread.of(values).low:.1f}–{Spread.of(values).high:.1f} |"
        for setup, values in bursts.items()
        if values
    ]
    lines = [
        "# Pod creation latency, end to end",
        "",
        f"`{settings.command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
        f"{settings.pods} timed creates per set-up, mode and round, {settings.rounds} rounds. "
        "All set-ups are live at once, each in its own namespace, and their creates "
        "alternate one by one; each create is timed by the client (sequential, keep-alive) "
        "against kube-apiserver on 127.0.0.1; the typical opted-in Pod (bench/bodies.py). "
        f"Load average at start {load[0]}, at end {load[1]}.",
        "",
        "| mode | admission | p50 | p99 | added p50 | added p99 |",
        "|---|---|---:|---:|---:|---:|",
        *rows,
        "",
        "Milliseconds; *added* is the set-up's percentile minus the same percentile without "
        "admission, same mode.",
        "",
        "| ratio of added latency | mode | p50 | p99 | per-round p50 (min–max) | target | met |",
        "|---|---|---:|---:|---:|---:|---|",
        *ratio_rows,
        "",
        "The API server's own timing, over the timed creates: of each call to the webhook "
        f"(`{apiserver_metrics.DURATION}`), of each evaluation of the "
        f"MutatingAdmissionPolicy in policy mode (`{apiserver_metrics.POLICY_DURATION}`):",
        "",
        "| set-up | mean ms | calls or evaluations |",
        "|---|---:|---:|",
        *calls,
        "",
        f"Calls that failed open during the run (`{apiserver_metrics.FAIL_OPEN}`): "
        f"{fail_opens:.0f}.",
        "",
    ]
    if burst_rows:
        lines += [
            f"## Burst: a Deployment of {settings.burst_pods} opted-in Pods",
            "",
            "Seconds from creating the Deployment until all its Pods exist "
            f"({settings.burst_rounds} alternating rounds); the controller-manager creates "
            "them with its default client rate limit (20 requests/s, bursts of 30).",
            "",
            "| admission | median s | min–max s |",
            "|---|---:|---:|",
            *burst_rows,
            "",
        ]
    return "\n".join(lines)


def _ratio_rows(
    samples: Samples, mine: str, base: str, label: str, target: float | None = None
) -> list[str]:
    rows = []
    for mode in MODES:
        ratios = [samples.added(mine, mode, p) / samples.added(base, mode, p) for p in (50, 99)]
        per_round = [
            (medians[mine, mode] - medians["none", mode])
            / (medians[base, mode] - medians["none", mode])
            for medians in samples.round_medians
        ]
        goal, met = "–", "–"
        if target is not None:
            goal, met = f"≤ {target}", "yes" if max(ratios) <= target else "**no**"
        rows.append(
            f"| {label} | {mode} | {ratios[0]:.2f} | {ratios[1]:.2f} "
            f"| {Spread.of(per_round).ratio()} | {goal} | {met} |"
        )
    return rows


def percentile(values: list[float], percent: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(percent / 100 * len(ordered)) - 1))
    return ordered[index]


def reference_binary() -> Path:
    """bench/reference built with `go build` into the cache (a no-op when up to date)."""
    REFERENCE_BINARY.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["go", "build", "-o", str(REFERENCE_BINARY), "."],
        cwd=REFERENCE,
        check=True,
        timeout=600,
    )
    return REFERENCE_BINARY


def policy_manifests() -> str | None:
    """`castslice policy` as a user runs it, defaults only; None where it does not exist."""
    done = subprocess.run(
        [sys.executable, "-m", "castslice", "policy"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout if done.returncode == 0 else None


@contextmanager
def environment() -> Iterator[
    tuple[kubernetes.client.ApiClient, dict[str, CastSliceServer], Kubectl]
]:
    nginx, binaries, kubectl = tools.nginx(), tools.kube_binaries(), tools.kubectl()
    go = reference_binary()
    with ExitStack() as stack:
        plane = stack.enter_context(LocalControlPlane(binaries))
        servers = {
            "castslice": stack.enter_context(CastSliceServer(nginx, log_through_pipe=True)),
            "castslice flask": stack.enter_context(
                CastSliceServer(nginx, log_through_pipe=True, target=FLASK_TARGET)
            ),
            "go": stack.enter_context(CastSliceServer(nginx, program=[str(go)])),
        }
        yield plane.api_client(), servers, Kubectl(kubectl, plane.kubeconfig)


@dataclass(frozen=True)
class Settings:
    rounds: int = 8
    pods: int = 150
    burst_rounds: int = 2
    burst_pods: int = 500
    command: str = "python -m bench.e2e_latency"


def run(arguments: Settings) -> str:
    """Measure, and return the Markdown report."""
    load_start = load_average()
    with environment() as (api, servers, kubectl):
        setups = Setups(api, servers, kubectl, policy_manifests())
        fail_opens = apiserver_metrics.fail_open_count(api)
        samples = measure(setups, arguments.rounds, arguments.pods)
        bursts: dict[str, list[float]] = {}
        if arguments.burst_rounds:
            bursts = measure_bursts(setups, arguments.burst_rounds, arguments.burst_pods)
        fail_opens = apiserver_metrics.fail_open_count(api) - fail_opens
    return render(samples, bursts, arguments, (load_start, load_average()), fail_opens)


def add_arguments(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """The end-to-end options; `prefix` sets them apart among `python -m bench`'s."""
    defaults = Settings()
    parser.add_argument(
        f"--{prefix}rounds", type=int, default=defaults.rounds, help="rounds through the set-ups"
    )
    parser.add_argument(
        f"--{prefix}pods", type=int, default=defaults.pods, help="timed creates per mode, round"
    )
    parser.add_argument(
        "--burst-rounds", type=int, default=defaults.burst_rounds, help="bursts per set-up"
    )
    parser.add_argument(
        "--burst-pods", type=int, default=defaults.burst_pods, help="Pods in one burst"
    )


def settings_from(arguments: argparse.Namespace, command: str, prefix: str = "") -> Settings:
    options = vars(arguments)
    return Settings(
        rounds=options[f"{prefix}rounds"],
        pods=options[f"{prefix}pods"],
        burst_rounds=arguments.burst_rounds,
        burst_pods=arguments.burst_pods,
        command=command,
    )


def write(report: str, output: Path = DEFAULT_OUTPUT) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report)
    _progress(f"wrote {output}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e_latency", description=__doc__)
    add_arguments(parser)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    arguments = parser.parse_args(argv)
    command = " ".join(["python -m bench.e2e_latency", *(sys.argv[1:] if argv is None else argv)])
    try:
        report = run(settings_from(arguments, command))
    except tools.MissingTool as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(report)
    write(report, arguments.output)
    return 0


def _admission_time(api: kubernetes.client.ApiClient, setup: str) -> tuple[float, float]:
    """(seconds, count) the API server has spent on calls to `setup`'s Pod webhook, or on
    evaluating the MutatingAdmissionPolicy in policy mode, as it measures them."""
    if setup in POLICIES:
        name = POLICIES[setup]
        family, label = apiserver_metrics.POLICY_DURATION, "policy"
        samples = apiserver_metrics.webhook_samples(api, prefix=family)
    else:
        family, label = apiserver_metrics.DURATION, "name"
        name = _webhook_name(setup, POD_WEBHOOK)
        samples = apiserver_metrics.webhook_samples(api)
    return (
        apiserver_metrics.total(samples, family, name, part="_sum", label=label),
        apiserver_metrics.total(samples, family, name, part="_count", label=label),
    )


def _access_log_size(server: CastSliceServer) -> int:
    path = server.workdir / "logs" / "nginx-access.log"
    return path.stat().st_size if path.exists() else 0


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
