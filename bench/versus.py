"""One tree's CastSlice against another's, side by side: `python -m bench.versus BASELINE`.

What a change costs, measured directly: this tree's `main.py` (or `--candidate`) and
the BASELINE tree's, each served as in production and loaded at the same time by
its own wrk, sharing one CPU (bench/sidebyside.py). Sharing the
CPU, each gets the same share of it, so the ratio of their throughputs is the ratio
of their costs, and machine noise, which slows both at once, cancels out of it. The
floor against a second floor, measured the same way first, is the method's own error.

    git worktree add /tmp/castslice-before HEAD~1
    python -m bench.versus /tmp/castslice-before
    git worktree remove /tmp/castslice-before

    # The two servers of one tree: ASGI (the image's) against Flask (the default's).
    python -m bench.versus . --baseline-target=mutate

Each tree is served with its own castslice package (it runs in that tree, with only
that tree on PYTHONPATH). Needs two CPUs and wrk.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

from . import bodies
from .load import LoadSettings
from .report import Machine, load_average
from .run import check_answers
from .servers import FLOOR, FUNCTION, REPO, FunctionSource, Server
from .sidebyside import require_two_cpus, side_by_side, spread


def compare(
    candidate: FunctionSource,
    baseline: FunctionSource,
    body_file: Path,
    rounds: int,
    seconds: int,
    work: Path,
) -> tuple[str, str]:
    """(throughput candidate ÷ baseline, CPU per request baseline ÷ candidate), as spreads."""
    with Server(candidate, work) as first, Server(baseline, work) as second:
        for server in (first, second):
            server.wait_until_answering(body_file.read_bytes())
        result = side_by_side(first, second, body_file, LoadSettings(seconds=seconds), rounds)
    return spread(result.throughput_ratios()), spread(result.cost_ratios())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.versus", description=__doc__)
    parser.add_argument("baseline", type=Path, help="the root of the tree to compare against")
    parser.add_argument("--candidate", type=Path, default=REPO, help="the tree measured")
    parser.add_argument(
        "--candidate-target", default=FUNCTION.target, help="main.py's target measured"
    )
    parser.add_argument(
        "--baseline-target",
        default=FUNCTION.target,
        help="main.py's target compared against (mutate: the Flask server)",
    )
    parser.add_argument("--body", choices=list(bodies.EXPECTED_OPERATIONS), action="append")
    parser.add_argument("--rounds", type=int, default=9, help="side-by-side rounds per pair")
    parser.add_argument("--seconds", type=int, default=4, help="measured seconds per round")
    parser.add_argument("--output", type=Path, help="Markdown file to write the table to")
    arguments = parser.parse_args(argv)
    require_two_cpus("bench.versus")
    candidate, baseline = (
        FunctionSource(name, root.resolve() / "main.py", target, root.resolve())
        for name, root, target in (
            ("candidate", arguments.candidate, arguments.candidate_target),
            ("baseline", arguments.baseline, arguments.baseline_target),
        )
    )
    machine = Machine.describe()
    rows = []
    with tempfile.TemporaryDirectory(prefix="castslice-versus-") as scratch:
        work = Path(scratch)
        files = bodies.write_bodies(work / "bodies")
        for name in arguments.body or list(bodies.EXPECTED_OPERATIONS):
            body = files[name].read_bytes()
            for function in (candidate, baseline):
                with Server(function, work) as server, Server(FLOOR, work) as floor:
                    check_answers(server, floor, name, body)
            pairs = [("floor ÷ floor (the method's own error)", FLOOR, FLOOR)]
            pairs.append(("candidate ÷ baseline", candidate, baseline))
            for label, first, second in pairs:
                spreads = compare(
                    first, second, files[name], arguments.rounds, arguments.seconds, work
                )
                rows.append(f"| {name} | {label} | {spreads[0]} | {spreads[1]} |")
                print(rows[-1], flush=True)
    command = shlex.join(
        ["python", "-m", "bench.versus", *(sys.argv[1:] if argv is None else argv)]
    )
    hardware = f"{machine.cpu}, {machine.cores} cores, {machine.kernel}"
    table = "\n".join(
        [
            f"`{command}` on {machine.date}; candidate {candidate.root} "
            f"(--target={candidate.target}), baseline {baseline.root} "
            f"(--target={baseline.target}).",
            "",
            f"- Machine: {hardware}; Python {machine.python}",
            f"- Load average (1, 5, 15 min) at start {machine.load_average_start}, "
            f"at end {load_average()}",
            f"- {arguments.rounds} rounds of {arguments.seconds} s per pair, both servers on one "
            "CPU, each loaded by its own wrk -t1 -c8 on the other; median (lowest–highest)",
            "",
            "| body | served side by side | throughput, first ÷ second "
            "| CPU per request, second ÷ first |",
            "|---|---|---:|---:|",
            *rows,
            "",
        ]
    )
    print(table)
    if arguments.output:
        arguments.output.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
