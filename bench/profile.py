"""Where CastSlice's time goes: `python -m bench.profile [--body typical]`.

Three views of the same request:

- in process: each step of a review timed alone (best of several repeats, so
  machine noise mostly drops out), next to the floor's whole request;
- layers, side by side: CastSlice cut off after each layer (bench/layers/) is
  served next to the floor, both on one CPU, each loaded by its own wrk on
  another CPU at the same time. Sharing the CPU, each gets the same share of it,
  so the ratio of their throughputs is the ratio of their costs, and machine
  noise, which slows both at once, cancels out of it. A calibration layer, the
  floor plus a fixed loop of pure Python timed in process, gives the scale:
  what a microsecond of handler time costs in throughput;
- live: py-spy samples the gunicorn worker while wrk loads it, counting the
  samples in which a thread holds the GIL (the worker's real bottleneck), split
  into CastSlice's own functions and the framework around them.

Needs py-spy for the live view (`pip install py-spy`); without it only the
in-process view is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import timeit
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import functions_framework
from werkzeug.test import EnvironBuilder

from castslice.admission import review_pod
from castslice.config import load_config
from castslice.log import write_record
from castslice.review import decode_review, encode_review
from castslice.webhook import JSON, Webhook, _review_record

from . import bodies
from .layers.calibration import busy_work
from .load import LoadSettings, _run_wrk
from .servers import FLOOR, FUNCTION, REPO, FunctionSource, Server, _process_tree

FRAMEWORK = "framework (gunicorn, Flask, functions-framework)"
READING_THE_BODY = "reading the body (gunicorn, as in the floor)"
DEFAULT_OUTPUT = REPO / "bench" / "results" / "profile.md"
_LAYERS = REPO / "bench" / "layers"
# The floor against itself shows the method's noise and the calibration layer the price of a
# microsecond; from routing on, each row adds one CastSlice layer to the one before.
LAYERS = [
    ("the floor again (the method's own noise)", FLOOR),
    (
        "the floor + pure-Python work timed in process above (the price of a µs)",
        FunctionSource("calibration", _LAYERS / "calibration.py"),
    ),
    (
        "routing: limits, reading the body, the JSON answer",
        FunctionSource("routing", _LAYERS / "routing.py"),
    ),
    ("+ decoding the review", FunctionSource("decoding", _LAYERS / "decoding.py")),
    ("+ policy, patch and encoded answer", FunctionSource("unlogged", _LAYERS / "unlogged.py")),
    ("+ the log line: all of CastSlice", FUNCTION),
]
SERVER_CPU, LOAD_CPU = 0, 1


def time_call(call: Callable[[], object], repeat: int = 7) -> float:
    """Microseconds per call, the best of `repeat` runs of about 0.2 s each."""
    timer = timeit.Timer(call)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e6


def in_process(body: bytes) -> list[tuple[str, float]]:
    config = load_config({})
    webhook = Webhook(config)
    request = decode_review(body)
    outcome = review_pod(request, config)
    with _stdout_discarded():
        steps = [
            ("decode_review (msgspec, typed)", time_call(lambda: decode_review(body))),
            ("review_pod (policy + patch)", time_call(lambda: review_pod(request, config))),
            (
                "log record, queued for the writer thread",
                time_call(lambda: write_record(_review_record(request, outcome, 0.001))),
            ),
            ("encode_review", time_call(lambda: encode_review(outcome.response))),
            ("Webhook.answer (all of the above)", time_call(lambda: webhook.answer(body))),
            ("whole request, CastSlice (Flask app)", _app_request(FUNCTION.source, body)),
            ("whole request, floor (Flask app)", _app_request(FLOOR.source, body)),
            ("pure-Python work of the calibration layer", time_call(busy_work)),
        ]
    return steps


def _app_request(source: Path, body: bytes) -> float:
    app = functions_framework.create_app(target="mutate", source=str(source))
    builder = EnvironBuilder(
        path="/", query_string="timeout=5s", method="POST", data=body, content_type=JSON
    )
    environ = builder.get_environ()
    # gunicorn marks its input stream as terminated; werkzeug then reads it directly.
    environ["wsgi.input_terminated"] = True

    def request() -> None:
        fresh = dict(environ, **{"wsgi.input": io.BytesIO(body)})
        for _ in app(fresh, lambda status, headers, exc_info=None: None):
            pass

    return time_call(request)


@contextlib.contextmanager
def _stdout_discarded() -> Iterator[None]:
    # The log line is part of the cost, so it is written, but not to the terminal.
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        yield


def side_by_side(body_file: Path, rounds: int, seconds: int, work: Path) -> list[str]:
    """Each layer against the floor, loaded together on a shared CPU; Markdown rows."""
    rows = []
    settings = LoadSettings(seconds=seconds)
    body = body_file.read_bytes()
    with Server(FLOOR, work) as floor:
        floor.wait_until_answering(body)
        _pin(floor)
        for name, layer in LAYERS:
            with Server(layer, work) as server:
                server.wait_until_answering(body)
                _pin(server)
                throughput, cost = [], []
                for _ in range(rounds):
                    (layer_requests, layer_cpu), (floor_requests, floor_cpu) = _load_together(
                        [server, floor], body_file, settings
                    )
                    throughput.append(layer_requests / floor_requests)
                    cost.append((floor_cpu / floor_requests) / (layer_cpu / layer_requests))
            rows.append(f"| {name} | {_spread(throughput)} | {_spread(cost)} |")
    return rows


def _pin(server: Server) -> None:
    # Threads started later (gunicorn's pool grows on demand) inherit the affinity.
    for pid in _process_tree(server.process.pid):
        for task in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(task), {SERVER_CPU})


def _load_together(
    servers: list[Server], body_file: Path, settings: LoadSettings
) -> list[tuple[int, float]]:
    """(requests, server CPU seconds) of each server, loaded at the same time."""
    results: list[tuple[int, float]] = [(0, 0.0)] * len(servers)

    def load(index: int, server: Server) -> None:
        _run_wrk(server.port, body_file, settings, settings.warmup_seconds, LOAD_CPU)
        before = server.cpu_seconds()
        summary, _ = _run_wrk(server.port, body_file, settings, settings.seconds, LOAD_CPU)
        results[index] = (summary["requests"], server.cpu_seconds() - before)

    threads = [threading.Thread(target=load, args=pair) for pair in enumerate(servers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if not all(requests for requests, _ in results):
        raise RuntimeError("a side-by-side load run failed; see the errors above")
    return results


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def live(body_file: Path, seconds: int, work: Path) -> Counter[str] | None:
    """GIL-holding samples of the worker under load, by CastSlice function or framework."""
    py_spy = _py_spy()
    if py_spy is None:
        return None
    samples = work / "samples.txt"
    with Server(FUNCTION, work) as server:
        server.wait_until_answering(body_file.read_bytes())
        worker = _worker_pid(server)
        settings = LoadSettings()
        spy = subprocess.Popen(
            [
                *(py_spy, "record", "--gil", "--nonblocking", "--rate", "500", "--format", "raw"),
                *("--duration", str(seconds), "--pid", str(worker), "--output", str(samples)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _run_wrk(server.port, body_file, settings, seconds + 2)
        spy.wait(timeout=60)
    return _attribute(samples.read_text())


def _attribute(raw: str) -> Counter[str]:
    """Each sample goes to the innermost CastSlice frame of its stack, else the framework.

    Reading the body happens below CastSlice's route() but is gunicorn's work, which
    the floor does too; it gets a line of its own.
    """
    counts: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            # A line without a sample count (py-spy wrote it incomplete) is left out, not fatal.
            continue
        owner, below = FRAMEWORK, []
        for frame in stack.split(";"):
            name, _, location = frame.partition(" (")
            if location.startswith(("castslice/", "main.py")):
                owner, below = name, []
            else:
                below.append(name)
        if owner != FRAMEWORK and "Body.read" in below:
            owner = READING_THE_BODY
        counts[owner] += int(count)
    return counts


def _py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _worker_pid(server: Server) -> int:
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
    return int(children.read_text().split()[0])


def render(
    body_name: str,
    steps: list[tuple[str, float]],
    layers: list[str] | None,
    samples: Counter[str] | None,
) -> str:
    lines = [
        f"## {body_name} body",
        "",
        "| step, in process | µs |",
        "|---|---:|",
        *(f"| {name} | {micros:.1f} |" for name, micros in steps),
        "",
    ]
    if layers is None:
        lines += ["(side-by-side view skipped: it needs two CPUs)", ""]
    else:
        lines += [
            "Side by side with the floor on one shared CPU, each loaded by its own wrk at the "
            "same time; median of the rounds (lowest–highest).",
            "",
            "| served | throughput ÷ floor | CPU per request, floor ÷ this |",
            "|---|---:|---:|",
            *layers,
            "",
        ]
    if samples is None:
        return "\n".join([*lines, "(live view skipped: py-spy is not installed)", ""])
    total = sum(samples.values())
    own = total - samples[FRAMEWORK] - samples[READING_THE_BODY]
    lines += [
        f"Live, {total} GIL-holding samples of the worker under wrk load: "
        f"CastSlice's own code {own / total:.1%}, the rest the framework and reading the body.",
        "",
        "| innermost CastSlice frame | share of samples |",
        "|---|---:|",
        *(f"| {name} | {count / total:.1%} |" for name, count in samples.most_common(12)),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--body", choices=list(bodies.EXPECTED_OPERATIONS), action="append")
    parser.add_argument("--seconds", type=int, default=10, help="live sampling time")
    parser.add_argument("--rounds", type=int, default=5, help="side-by-side rounds per layer")
    parser.add_argument(
        "--side-seconds", type=int, default=4, help="measured seconds per side-by-side round"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="Markdown to write")
    arguments = parser.parse_args(argv)
    os.chdir(REPO)
    sections = [f"# Where CastSlice's time goes\n\n`{_command(argv)}`\n"]
    with tempfile.TemporaryDirectory(prefix="castslice-profile-") as scratch:
        files = bodies.write_bodies(Path(scratch) / "bodies")
        for name in arguments.body or list(bodies.EXPECTED_OPERATIONS):
            body = files[name].read_bytes()
            steps = in_process(body)
            layers = None
            if len(os.sched_getaffinity(0)) >= 2:
                layers = side_by_side(
                    files[name], arguments.rounds, arguments.side_seconds, Path(scratch)
                )
            samples = live(files[name], arguments.seconds, Path(scratch))
            sections.append(render(name, steps, layers, samples))
            print(sections[-1], flush=True)
    arguments.output.write_text("\n".join(sections))
    return 0


def _command(argv: list[str] | None) -> str:
    return " ".join(["python -m bench.profile", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
