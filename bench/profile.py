"""Where CastSlice's time goes: `python -m bench.profile [--body typical]`.

Two views of the same request:

- in process: each step of a review timed alone (best of several repeats, so
  machine noise mostly drops out), next to the floor's whole request;
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
import subprocess
import sys
import tempfile
import timeit
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import functions_framework
from werkzeug.test import EnvironBuilder

from castslice.admission import review_pod
from castslice.config import load_config
from castslice.review import decode_review, encode_review
from castslice.webhook import JSON, Webhook

from . import bodies
from .load import LoadSettings, _run_wrk
from .servers import FLOOR, FUNCTION, REPO, Server

FRAMEWORK = "framework (gunicorn, Flask, functions-framework)"
READING_THE_BODY = "reading the body (gunicorn, as in the floor)"
DEFAULT_OUTPUT = REPO / "bench" / "results" / "profile.md"


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
            ("log line", time_call(lambda: webhook._log_outcome(request, outcome, 0.001))),
            ("encode_review", time_call(lambda: encode_review(outcome.response))),
            ("Webhook.answer (all of the above)", time_call(lambda: webhook.answer(body))),
            ("whole request, CastSlice (Flask app)", _app_request(FUNCTION.source, body)),
            ("whole request, floor (Flask app)", _app_request(FLOOR.source, body)),
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


def render(body_name: str, steps: list[tuple[str, float]], samples: Counter[str] | None) -> str:
    lines = [
        f"## {body_name} body",
        "",
        "| step, in process | µs |",
        "|---|---:|",
        *(f"| {name} | {micros:.1f} |" for name, micros in steps),
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
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="Markdown to write")
    arguments = parser.parse_args(argv)
    os.chdir(REPO)
    sections = [f"# Where CastSlice's time goes\n\n`{_command(argv)}`\n"]
    with tempfile.TemporaryDirectory(prefix="castslice-profile-") as scratch:
        files = bodies.write_bodies(Path(scratch) / "bodies")
        for name in arguments.body or ["typical", "large"]:
            body = files[name].read_bytes()
            steps = in_process(body)
            samples = live(files[name], arguments.seconds, Path(scratch))
            sections.append(render(name, steps, samples))
            print(sections[-1], flush=True)
    arguments.output.write_text("\n".join(sections))
    return 0


def _command(argv: list[str] | None) -> str:
    return " ".join(["python -m bench.profile", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
