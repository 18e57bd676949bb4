"""The benchmark, `python -m bench`: latency end to end, then the throughput guard.

First what a user feels: Pod create latency through a real kube-apiserver with
no admission, CastSlice, a Go reference webhook and CastSlice's policy mode, side
by side (bench/e2e_latency.py). Then the regression guard: CastSlice against the
floor (functions-framework answering a constant), both served as in production
on 127.0.0.1 and loaded at the same time on one shared CPU (bench/sidebyside.py),
so that noise on the machine slows both alike and cancels out of their ratio.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import shlex
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from . import bodies as benchmark_bodies
from . import e2e_latency
from .coldstart import cold_start_seconds
from .load import LoadSettings
from .report import FACES, BodyResult, ColdStartResult, Machine, Run, load_average, render
from .servers import FLASK_FLOOR, FLOOR, FUNCTION, REPO, FunctionSource, Server
from .sidebyside import alternating, require_two_cpus, spread

DEFAULT_OUTPUT = REPO / "bench" / "results" / "latest.md"
# What functions-framework reads to shape its gunicorn server (functions_framework/_http/
# gunicorn.py); the flags it takes have none of them.
SERVER_SETTINGS = ("THREADS", "WORKERS")
# Each face is measured against the floor on its own server.
FLOORS = {"asgi": FLOOR, "flask": FLASK_FLOOR}


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="side-by-side rounds per body")
    parser.add_argument("--seconds", type=int, default=2, help="measured seconds per round")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up seconds before a round")
    parser.add_argument("--connections", type=int, default=8, help="wrk connections")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument("--cold-starts", type=int, default=15, help="cold starts per server")
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="Markdown report to write"
    )
    parser.add_argument(
        "--check", action="store_true", help="exit with status 1 when a guard ratio is missed"
    )
    parser.add_argument(
        "--only", choices=("latency", "guard"), help="run one of the two parts alone"
    )
    e2e_latency.add_arguments(parser.add_argument_group("end to end"), prefix="e2e-")
    parser.add_argument(
        "--source",
        type=Path,
        default=FUNCTION.source,
        help="function source to measure instead of main.py (e.g. a modified copy of the tree)",
    )
    parser.add_argument(
        "--server-setting",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        type=_server_setting,
        help="a setting functions-framework reads (THREADS=1, WORKERS=2) for every server "
        "the guard starts, CastSlice's and the floors' alike; repeatable",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(sys.argv[1:] if argv is None else argv)
    latency = None
    if arguments.only != "guard":
        settings = e2e_latency.settings_from(arguments, _command(argv), prefix="e2e_")
        latency = e2e_latency.run(settings)
        e2e_latency.write(latency)
    status = 0 if arguments.only == "latency" else guard(arguments, argv)
    if latency is not None:
        print(latency)
    return status


def guard(arguments: argparse.Namespace, argv: list[str] | None) -> int:
    """The throughput guard against the floor; prints and writes its report."""
    require_two_cpus("the throughput guard")
    settings = LoadSettings(
        threads=arguments.threads,
        connections=arguments.connections,
        seconds=arguments.seconds,
        warmup_seconds=arguments.warmup,
    )
    # main.py sits at the root of its tree, whose castslice it imports.
    source = arguments.source.resolve()
    shape = tuple(arguments.server_setting)
    functions = {
        face: FunctionSource(f"castslice-{face}", source, target, source.parent, shape)
        for face, target in FACES.items()
    }
    floors = {face: dataclasses.replace(FLOORS[face], settings=shape) for face in FACES}
    machine = Machine.describe()
    with tempfile.TemporaryDirectory(prefix="castslice-bench-") as scratch:
        work = Path(scratch)
        body_files = benchmark_bodies.write_bodies(work / "bodies")
        results = measure_throughput(
            functions, floors, body_files, settings, arguments.rounds, work
        )
        typical = body_files["typical"].read_bytes()
        cold_starts = [
            measure_cold_start(face, function, floors[face], typical, arguments.cold_starts, work)
            for face, function in functions.items()
        ]
    machine.load_average_end = load_average()

    run = Run(machine, settings, arguments.rounds, results, cold_starts, _command(argv))
    report = render(run)
    print(report)
    _write(arguments.output, report, run)
    return 1 if arguments.check and not run.targets_met() else 0


def measure_throughput(
    functions: dict[str, FunctionSource],
    floors: dict[str, FunctionSource],
    body_files: dict[str, Path],
    settings: LoadSettings,
    rounds: int,
    work: Path,
) -> list[BodyResult]:
    """Every body, `rounds` times, each face and its floor loaded together, the faces'
    rounds alternating."""
    results = []
    with ExitStack() as stack:
        pairs = {
            face: (
                stack.enter_context(Server(function, work)),
                stack.enter_context(Server(floors[face], work)),
            )
            for face, function in functions.items()
        }
        for name, path in body_files.items():
            for function, floor in pairs.values():
                check_answers(function, floor, name, path.read_bytes())
        for name, path in body_files.items():
            rounds_by_face = alternating(list(pairs.values()), path, settings, rounds)
            for face, rounds_together in zip(pairs, rounds_by_face, strict=True):
                result = BodyResult(face, name, path.stat().st_size, rounds_together)
                results.append(result)
                _progress(f"{face:>5} {name:>12}: castslice ÷ floor {spread(result.ratios())}")
    return results


def check_answers(function: Server, floor: Server, name: str, body: bytes) -> None:
    """Refuse to benchmark answers that are wrong: the load generator only sees statuses."""
    response = json.loads(function.wait_until_answering(body))["response"]
    patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    expected = benchmark_bodies.EXPECTED_OPERATIONS[name]
    if not response.get("allowed") or len(patch) != expected:
        raise SystemExit(f"castslice answered the {name} body wrongly: {response}")
    floor.wait_until_answering(body)


def measure_cold_start(
    face: str, source: FunctionSource, floor: FunctionSource, body: bytes, runs: int, work: Path
) -> ColdStartResult:
    """Alternating cold starts of a face and its floor, after one unmeasured start each."""
    result = ColdStartResult(face)
    # The first start of each writes its bytecode caches and fills the page cache: what
    # is measured is a start from a ready image, its bytecode compiled at build time.
    for function in (source, floor):
        cold_start_seconds(function, body, work)
    for run_index in range(runs):
        order = [(source, result.function), (floor, result.floor)]
        if run_index % 2:
            order.reverse()
        for function, seconds in order:
            seconds.append(cold_start_seconds(function, body, work))
        _progress(
            f"{face} cold start {run_index + 1}/{runs}: castslice {result.function[-1]:.3f} s, "
            f"floor {result.floor[-1]:.3f} s"
        )
    return result


def _server_setting(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or name not in SERVER_SETTINGS:
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE with NAME one of {', '.join(SERVER_SETTINGS)}, got {text!r}"
        )
    return name, value


def _command(argv: list[str] | None) -> str:
    arguments = sys.argv[1:] if argv is None else argv
    return shlex.join(["python", "-m", "bench", *arguments])


def _write(output: Path, report: str, run: Run) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report)
    # The raw points, for a closer look; not tracked.
    output.with_suffix(".json").write_text(json.dumps(run.as_json(), indent=1) + "\n")
    _progress(f"wrote {output} and {output.with_suffix('.json').name}")


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
