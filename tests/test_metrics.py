"""Prometheus metrics (CASTSLICE_METRICS=true): counted by the real servers, scraped from
their own port, never on the webhook's, and refused where the URL is public."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from castslice.environment import load_config
from castslice.serve.core import Webhook
from castslice.settings.config import ConfigError
from tests.factories import apply_response, container, make_pod, make_review, opted_in
from tests.helpers import client_context, image_app, new_pair
from tests.procs import free_port
from tests.served import (
    ROOT,
    TARGETS,
    Served,
    environment,
    functions_framework_command,
    refused_start,
    serving,
    tls_command,
)

REQUESTS = "castslice_admission_requests"
DURATION = "castslice_admission_review_duration_seconds"
Labels = tuple[str, str, str, str]  # decision, reason, source, backend

# Reviews of known outcomes, each with the labels it must be counted under.
KINDS: dict[str, tuple[dict, Labels]] = {
    "training": (
        make_review(make_pod(opted_in(**{"castops.io/workload-type": "training"}))),
        ("mutated", "", "workload-type", "resource"),
    ),
    "ratio": (
        make_review(make_pod(opted_in(**{"castops.io/slice-ratio": "2"}))),
        ("mutated", "", "slice-ratio", "resource"),
    ),
    "not-opted-in": (make_review(make_pod()), ("skipped", "not opted in", "", "resource")),
    "update": (
        make_review(make_pod(opted_in()), operation="UPDATE"),
        ("skipped", "not a CREATE", "", "resource"),
    ),
    "no-gpu": (
        make_review(make_pod(opted_in(), containers=[container()])),
        ("unchanged", "no GPU request to rewrite", "", "resource"),
    ),
}


# --- configuration ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "metrics", "port"),
    [
        ({}, False, 9090),
        ({"CASTSLICE_METRICS": "true"}, True, 9090),
        ({"CASTSLICE_METRICS": " TRUE ", "CASTSLICE_METRICS_PORT": "9464"}, True, 9464),
        ({"CASTSLICE_METRICS": "false", "K_SERVICE": "castslice"}, False, 9090),
    ],
)
def test_metrics_settings(environ: dict[str, str], metrics: bool, port: int) -> None:
    config = load_config(environ)
    assert (config.metrics, config.metrics_port) == (metrics, port)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"CASTSLICE_METRICS": "yes"}, "CASTSLICE_METRICS='yes' must be true or false"),
        ({"CASTSLICE_METRICS": " "}, "CASTSLICE_METRICS is set but empty"),
        ({"CASTSLICE_METRICS_PORT": "0"}, "CASTSLICE_METRICS_PORT='0' must be a whole number"),
        ({"CASTSLICE_METRICS_PORT": "65536"}, "from 1 to 65535"),
        ({"CASTSLICE_METRICS_PORT": "http"}, "CASTSLICE_METRICS_PORT='http'"),
    ],
)
def test_bad_metrics_settings_name_their_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_config(environ)


@pytest.mark.parametrize(
    "variable", ["K_SERVICE", "K_REVISION", "K_CONFIGURATION", "CLOUD_RUN_JOB"]
)
def test_metrics_are_refused_on_cloud_run_and_knative(variable: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config({"CASTSLICE_METRICS": "true", variable: "castslice"})
    assert str(raised.value).startswith(
        f"CASTSLICE_METRICS=true is refused on Cloud Run and Knative ({variable} is set)"
    )


# --- the real servers, metrics on ------------------------------------------------


class MetricsServer:
    def __init__(self, served: Served, metrics_port: int) -> None:
        self.served = served
        self.metrics_port = metrics_port

    def review(self, kind: str, index: int) -> None:
        review, _ = KINDS[kind]
        review = {**review, "request": {**review["request"], "uid": f"{kind}-{index}"}}
        status, _, raw = self.served.request("POST", body=json.dumps(review))
        assert status == 200 and json.loads(raw)["response"]["uid"] == f"{kind}-{index}"

    def scrape(self) -> dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
        """Every sample of the metrics page, by family: {(sample name, labels): value}."""
        connection = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            connection.request("GET", "/metrics")
            reply = connection.getresponse()
            assert reply.status == 200
            body = reply.read()
        finally:
            connection.close()
        return {
            family.name: {
                (sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for sample in family.samples
            }
            for family in text_string_to_metric_families(body.decode())
        }

    def counts(self) -> tuple[Counter[Labels], float, float]:
        """Reviews counted by labels, and the duration histogram's count and +Inf bucket."""
        families = self.scrape()
        counted: Counter[Labels] = Counter()
        for (name, labels), value in families[REQUESTS].items():
            if name == REQUESTS + "_total":
                by_name = dict(labels)
                key = tuple(by_name[label] for label in ("decision", "reason", "source", "backend"))
                counted[key] = int(value)
        duration = families[DURATION]
        return (
            counted,
            duration[(DURATION + "_count", ())],
            duration[(DURATION + "_bucket", (("le", "+Inf"),))],
        )


def _functions_framework(
    tmp: Path, env: dict[str, str]
) -> contextlib.AbstractContextManager[Served]:
    return serving("castslice-ff", functions_framework_command, tmp, env)


def _in_cluster(tmp: Path, env: dict[str, str]) -> contextlib.AbstractContextManager[Served]:
    pair = new_pair(1)
    (tmp / "tls.crt").write_bytes(pair.cert)
    (tmp / "tls.key").write_bytes(pair.key)
    return serving(
        "castslice-tls",
        lambda port: tls_command(port, tmp / "tls.crt", tmp / "tls.key"),
        tmp,
        env,
        cwd=image_app(tmp),
        context=client_context(),
    )


SERVERS = {"functions-framework": _functions_framework, "in-cluster-tls": _in_cluster}


@pytest.fixture(scope="module", params=list(SERVERS))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MetricsServer]:
    port = free_port()
    env = environment(CASTSLICE_METRICS="true", CASTSLICE_METRICS_PORT=str(port))
    with SERVERS[request.param](tmp_path_factory.mktemp(request.param), env) as served:
        yield MetricsServer(served, port)


def test_counts_match_the_reviews_sent_one_by_one_and_at_once(server: MetricsServer) -> None:
    before, before_count, _ = server.counts()
    sent: Counter[Labels] = Counter()
    for index, kind in enumerate(KINDS):
        server.review(kind, index)
        sent[KINDS[kind][1]] += 1
    jobs = [(kind, index) for index in range(40) for kind in KINDS]
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda job: server.review(*job), jobs))
    for kind, _ in jobs:
        sent[KINDS[kind][1]] += 1

    # Scraped at once: a review is counted before its answer is sent.
    after, after_count, after_inf = server.counts()
    assert after - before == sent
    assert after_count - before_count == sum(sent.values())
    assert after_inf == after_count


def test_durations_fall_in_buckets_from_microseconds_to_seconds(server: MetricsServer) -> None:
    server.review("training", 0)
    buckets = {
        dict(labels)["le"]: value
        for (name, labels), value in server.scrape()[DURATION].items()
        if name == DURATION + "_bucket"
    }
    bounds = [float(bound) for bound in buckets]
    assert min(bounds) <= 0.0001 and 5.0 in bounds and "+Inf" in buckets
    assert buckets["5.0"] == buckets["+Inf"]  # a review faster than the API server's timeout


def test_the_webhook_port_answers_metrics_as_any_other_path(server: MetricsServer) -> None:
    status, content_type, raw = server.served.request("GET", "/metrics")
    assert (status, content_type) == (200, "application/json")
    assert json.loads(raw)["status"] == "ok"
    assert REQUESTS.encode() not in raw


# --- answers without a decision, and failures after one ----------------------------

INTERNAL_ERROR = "castslice could not process this Pod (internal error); it was admitted unchanged"
LIMIT = 7 * 1024 * 1024


def unreadable_review() -> dict:
    pod = make_pod(opted_in())
    pod["spec"]["containers"] = "not-a-list"
    return make_review(pod, uid="unreadable")


def declare_too_large(served: Served) -> int:
    """The status of a POST that declares a body past the limit; not a byte of it is sent."""
    connection = served.connection()
    try:
        connection.putrequest("POST", "/?timeout=5s")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(LIMIT + 1))
        connection.endheaders()
        reply = connection.getresponse()
        reply.read()
        return reply.status
    finally:
        connection.close()


def test_failed_open_and_refused_answers_are_counted_by_reason(server: MetricsServer) -> None:
    before, before_count, _ = server.counts()
    status, _, raw = server.served.request("POST", body=json.dumps(unreadable_review()))
    assert status == 200
    assert json.loads(raw)["response"] == {
        "uid": "unreadable",
        "allowed": True,
        "warnings": [INTERNAL_ERROR],
    }
    training = json.dumps(KINDS["training"][0])
    assert server.served.request("POST", body=training, content_type="text/plain")[0] == 415
    assert declare_too_large(server.served) == 413

    after, after_count, _ = server.counts()
    assert after - before == Counter(
        {
            ("failed-open", "unreadable object", "", ""): 1,
            ("refused", "not JSON", "", ""): 1,
            ("refused", "body too large", "", ""): 1,
        }
    )
    # The duration is a decision's: an answer without one is not in it.
    assert after_count == before_count


# main.py with one part of what follows a decision raising, as a bug there would; planted
# once main.py has started, so its start line is written as usual.
SABOTAGED_MAIN = """
from pathlib import Path

from castslice.serve import log, metrics


class Raising:
    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"planted failure: {{name}}")


exec(compile(Path({main!r}).read_text(), {main!r}, "exec"))
{sabotage}
"""
SABOTAGES = {
    "counter": "metrics.REQUESTS = Raising()",
    "log writer": "log._encoder = Raising()",
}


@pytest.mark.parametrize("face", sorted(TARGETS))
@pytest.mark.parametrize("broken", sorted(SABOTAGES))
def test_a_failure_after_the_decision_still_answers_the_decision(
    tmp_path: Path, broken: str, face: str
) -> None:
    main = str(ROOT / "main.py")
    source = tmp_path / "sabotaged_main.py"
    source.write_text(SABOTAGED_MAIN.format(sabotage=SABOTAGES[broken], main=main))
    port = free_port()
    env = environment(CASTSLICE_METRICS="true", CASTSLICE_METRICS_PORT=str(port))
    pod = make_pod(opted_in(**{"castops.io/slice-ratio": "2"}))
    body = json.dumps(make_review(pod, uid="after-the-decision"))

    def command(http_port: int) -> list[str]:
        return [sys.executable, "-m", "functions_framework", f"--target={TARGETS[face]}",
                f"--source={source}", "--host=127.0.0.1", f"--port={http_port}"]  # fmt: skip

    with serving("castslice-sabotaged", command, tmp_path, env) as served:
        status, content_type, raw = served.request("POST", body=body)
        counted = MetricsServer(served, port).counts()[0] if broken != "counter" else None
        lines = [json.loads(text) for text in served.request_log.read_text().splitlines()]

    assert (status, content_type) == (200, "application/json")
    document = json.loads(raw)
    assert (document["apiVersion"], document["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    # The very answer an unbroken webhook gives, patch included, and the patch applies.
    unbroken = Webhook(load_config(environment()), log_review=lambda record: None)
    assert document == json.loads(unbroken.answer(body.encode()).body)
    limits = apply_response(pod, document["response"])["spec"]["containers"][0]["resources"]
    assert limits["limits"] == {"nvidia.com/gpu-shared": "2"}
    if broken == "counter":
        errors = [line["message"] for line in lines if line["severity"] == "ERROR"]
        assert any(
            message.startswith("review answered mutated after an error: RuntimeError")
            for message in errors
        ), errors
    else:
        # The log cannot tell; the counter does.
        assert counted is not None
        assert counted[("error", "after the decision", "", "")] == 1


# --- metrics off, and refusals ------------------------------------------------------


def listening_ports(pids: list[int]) -> set[int]:
    """TCP ports that one of `pids` listens on (from /proc, Linux)."""
    inodes: set[str] = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd) if fd.is_symlink() else ""
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rpartition(":")[2], 16))
    return ports


def process_group(leader: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[2]) == leader:
                members.append(int(entry.name))
    return members


def test_metrics_off_opens_no_port(tmp_path: Path) -> None:
    metrics_port = free_port()
    env = environment(CASTSLICE_METRICS_PORT=str(metrics_port))
    with _functions_framework(tmp_path, env) as served:
        served.request("POST", body=json.dumps(KINDS["training"][0]))
        assert listening_ports(process_group(served.process.pid)) == {served.port}
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", metrics_port), timeout=5).close()


def test_metrics_off_loads_nothing_of_prometheus_client() -> None:
    program = "import sys, functions_framework.aio, main; print('prometheus_client' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, env=environment(), capture_output=True,
        text=True, check=True, timeout=60,
    )  # fmt: skip
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("variable", ["K_SERVICE", "CLOUD_RUN_JOB"])
def test_on_cloud_run_the_process_refuses_to_start_with_metrics_on(variable: str) -> None:
    env = environment(CASTSLICE_METRICS="true", **{variable: "castslice"})
    done = refused_start(functions_framework_command(free_port()), env)
    assert done.returncode != 0
    assert (
        "castslice: invalid configuration: CASTSLICE_METRICS=true is refused on Cloud Run and "
        f"Knative ({variable} is set)"
    ) in done.stderr
    assert "Traceback" not in done.stderr


def test_a_second_worker_stops_the_server_rather_than_count_apart(tmp_path: Path) -> None:
    pair = new_pair(2)
    (tmp_path / "tls.crt").write_bytes(pair.cert)
    (tmp_path / "tls.key").write_bytes(pair.key)
    env = environment(CASTSLICE_METRICS="true", CASTSLICE_METRICS_PORT=str(free_port()))
    commands = {
        "functions-framework": (functions_framework_command(free_port()), {"WORKERS": "2"}),
        "gunicorn --workers=2": (
            [*tls_command(free_port(), tmp_path / "tls.crt", tmp_path / "tls.key"), "--workers=2"],
            {},
        ),
    }
    for name, (command, extra) in commands.items():
        done = refused_start(command, {**env, **extra})
        assert done.returncode != 0, name
        lines = [json.loads(text) for text in done.stdout.splitlines()]
        # Any line before the refusal is the start line (castslice/serve/start.py).
        *started, line = lines
        assert [start["message"] for start in started] in ([], ["castslice starting"]), name
        assert line["severity"] == "ERROR"
        assert "(CASTSLICE_METRICS_PORT)" in line["message"], name
        assert "needs one worker process" in line["message"], name
