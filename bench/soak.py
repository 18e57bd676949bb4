"""Soak: `python -m bench.soak` sends reviews at a steady rate for a long time.

CastSlice is served as deployed (functions-framework, its log lines to a file)
on 127.0.0.1 and gets `--reviews` AdmissionReviews (default 500 000) at
`--rate` per second from a few keep-alive connections: the typical Pod, the Pod
not opted in, and every hundredth the 250 KiB Pod, each with its own uid. It
checks that every answer is a 200 allowing that uid, that the server's resident
memory after the warm-up grows by less than 10 %, and that every review has its
log line. Not part of the test run: it takes as long as reviews ÷ rate.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import bodies
from .report import SERVED_AS, load_average, software
from .servers import FUNCTION, HOST, REPO, REVIEW_PATH, Server, _process_tree

DEFAULT_OUTPUT = REPO / "bench" / "results" / "soak.md"
MEMORY_GROWTH_LIMIT = 0.10
# Share of the reviews sent before the memory baseline is taken.
WARMUP_SHARE = 0.1
SAMPLE_SECONDS = 5.0


@dataclass
class Tally:
    finished: float = 0.0
    answered: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, kind: str) -> None:
        with self.lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1


def uid(index: int) -> bytes:
    # As long as the uid in the template, so every body keeps its length.
    return f"00000000-0000-4000-8000-{index:012d}".encode()


def body_for(index: int, templates: dict[str, bytes]) -> bytes:
    shape = "large" if index % 100 == 99 else ("not-opted-in" if index % 2 else "typical")
    return templates[shape].replace(bodies.UID.encode(), uid(index), 1)


def send(
    port: int,
    indices: range,
    rate: float,
    started: float,
    templates: dict[str, bytes],
    tally: Tally,
) -> None:
    """POST the reviews of `indices` (every n-th overall) on one keep-alive connection,
    each at its place in the overall schedule."""
    connection = http.client.HTTPConnection(HOST, port, timeout=30)
    for index in indices:
        delay = started + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        try:
            connection.request(
                "POST",
                REVIEW_PATH,
                body=body_for(index, templates),
                headers={"Content-Type": "application/json"},
            )
            reply = connection.getresponse()
            answer = reply.read()
        except (OSError, http.client.HTTPException) as error:
            tally.error(type(error).__name__)
            connection.close()
            connection = http.client.HTTPConnection(HOST, port, timeout=30)
            continue
        with tally.lock:
            tally.answered += 1
        if reply.status != 200:
            tally.error(f"status {reply.status}")
            continue
        response = json.loads(answer)["response"]
        if response["uid"].encode() != uid(index) or response["allowed"] is not True:
            tally.error("wrong answer")
    connection.close()
    with tally.lock:
        tally.finished = max(tally.finished, time.monotonic())


def resident_kib(server: Server) -> int:
    """VmRSS of the server's process tree (gunicorn's arbiter and worker), in KiB."""
    total = 0
    for pid in _process_tree(server.process.pid):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def logged_uids(path: Path) -> dict[str, int]:
    """How many log lines name each uid."""
    counts: dict[str, int] = {}
    with path.open("rb") as lines:
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "uid" in record:
                counts[record["uid"]] = counts.get(record["uid"], 0) + 1
    return counts


def soak(reviews: int, rate: float, connections: int, work: Path) -> dict[str, object]:
    templates = bodies.bodies()
    tally = Tally()
    # (reviews answered, resident KiB), every few seconds.
    samples: list[tuple[int, int]] = []
    with Server(FUNCTION, work) as server:
        server.wait_until_answering(templates["typical"])
        started = time.monotonic() + 0.5
        threads = [
            threading.Thread(
                target=send,
                args=(server.port, range(n, reviews, connections), rate, started, templates, tally),
            )
            for n in range(connections)
        ]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            deadline = time.monotonic() + SAMPLE_SECONDS
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            elapsed = time.monotonic() - started
            samples.append((tally.answered, resident_kib(server)))
            print(
                f"{elapsed:6.0f} s: {tally.answered:,} reviews answered, "
                f"RSS {samples[-1][1] / 1024:.1f} MiB, errors {sum(tally.errors.values())}",
                file=sys.stderr,
                flush=True,
            )
        seconds = tally.finished - started
        final = resident_kib(server)
        log = server.stdout_path
    counts = logged_uids(log)
    expected = {uid(index).decode() for index in range(reviews)}
    warm = [kib for answered, kib in samples if answered >= reviews * WARMUP_SHARE]
    baseline = warm[0] if warm else samples[0][1]
    return {
        "reviews": reviews,
        "seconds": seconds,
        "rate": reviews / seconds,
        "errors": tally.errors,
        "rss_baseline_mib": baseline / 1024,
        "rss_final_mib": final / 1024,
        "rss_max_mib": max(kib for _, kib in samples) / 1024,
        "growth": final / baseline - 1,
        "missing_lines": len(expected - counts.keys()),
        "repeated_lines": sum(1 for key in expected if counts.get(key, 0) > 1),
    }


def render(result: dict[str, object], command: str, started: str, load: tuple[str, str]) -> str:
    growth = float(result["growth"])  # type: ignore[arg-type]
    passed = (
        not result["errors"]
        and growth < MEMORY_GROWTH_LIMIT
        and not result["missing_lines"]
        and not result["repeated_lines"]
    )
    return "\n".join(
        [
            "# Soak: reviews at a steady rate",
            "",
            f"`{command}` on {started}; load average at start {load[0]}, at end {load[1]}.",
            "",
            f"- Server: {SERVED_AS}",
            f"- {software()}",
            f"- {result['reviews']:,} reviews in {result['seconds']:.0f} s "
            f"({result['rate']:.0f}/s), errors: {result['errors'] or 'none'}",
            f"- resident memory after the warm-up ({WARMUP_SHARE:.0%} of the reviews) "
            f"{result['rss_baseline_mib']:.1f} MiB, at the end {result['rss_final_mib']:.1f} MiB "
            f"({growth:+.1%}, limit +{MEMORY_GROWTH_LIMIT:.0%}), highest "
            f"{result['rss_max_mib']:.1f} MiB",
            f"- log lines: {result['missing_lines']} reviews without one, "
            f"{result['repeated_lines']} with more than one",
            f"- {'passed' if passed else '**failed**'}",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--reviews", type=int, default=500_000)
    parser.add_argument("--rate", type=float, default=1000.0, help="reviews per second")
    parser.add_argument("--connections", type=int, default=4, help="keep-alive connections")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    arguments = parser.parse_args(argv)
    command = " ".join(["python -m bench.soak", *(sys.argv[1:] if argv is None else argv)])
    started, load_start = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load_average()
    with tempfile.TemporaryDirectory(prefix="castslice-soak-") as scratch:
        result = soak(arguments.reviews, arguments.rate, arguments.connections, Path(scratch))
    report = render(result, command, started, (load_start, load_average()))
    print(report)
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(report)
    return 0 if "**failed**" not in report else 1


if __name__ == "__main__":
    sys.exit(main())
