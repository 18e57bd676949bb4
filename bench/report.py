"""Results of a run: the figures, the ratios to the floor, and their Markdown table."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata

from .load import LoadSettings, wrk_command
from .sidebyside import Rounds, Share

# Regression guards, not goals: the lowest throughput ratio of CastSlice's to the floor's
# on the same server a Python function on functions-framework can hold, per face, and the
# highest cold start ratio. The Flask server costs several times what the ASGI server
# does per request, so the same decision is a smaller part of it.
THROUGHPUT_TARGETS = {
    "asgi": {"typical": 0.85, "not-opted-in": 0.85, "large": 0.70},
    "flask": {"typical": 0.90, "not-opted-in": 0.90, "large": 0.90},
}
COLD_START_TARGET = 1.2
# Each face, as `functions-framework --target=...` serves it.
FACES = {"asgi": "mutate_asgi", "flask": "mutate"}
PACKAGES = (
    "functions-framework",
    "starlette",
    "uvicorn",
    "httptools",
    "uvloop",
    "gunicorn",
    "msgspec",
)
SERVED_AS = (
    "`functions-framework --target=mutate_asgi` on 127.0.0.1 with its defaults "
    "(gunicorn, 1 uvicorn worker); CastSlice's log lines go to a file"
)
SERVED_AS_BOTH = (
    "each face beside the floor on its server, `functions-framework --target=...` on "
    "127.0.0.1 with its defaults (unless the command above gives a `--server-setting`): "
    "the ASGI face (`mutate_asgi`: gunicorn, 1 uvicorn worker) "
    "and the Flask face (`mutate`: gunicorn's threaded worker, 1 worker, 4 threads per CPU); "
    "CastSlice's log lines go to a file"
)


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values))

    def ratio(self) -> str:
        return f"{self.median:.3f} ({self.low:.3f}–{self.high:.3f})"


@dataclass
class BodyResult:
    """One face of CastSlice and the floor on its server loaded together on one body,
    round after round."""

    face: str
    name: str
    size: int
    rounds: Rounds

    def ratios(self) -> list[float]:
        return self.rounds.throughput_ratios()

    @property
    def target(self) -> float:
        return THROUGHPUT_TARGETS[self.face][self.name]

    def met(self) -> bool:
        return Spread.of(self.ratios()).median >= self.target


@dataclass
class ColdStartResult:
    face: str
    function: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)

    def ratios(self) -> list[float]:
        return [mine / base for mine, base in zip(self.function, self.floor, strict=True)]

    def met(self) -> bool:
        return Spread.of(self.ratios()).median <= COLD_START_TARGET


@dataclass
class Machine:
    date: str
    cpu: str
    cores: int
    memory_gib: float
    kernel: str
    python: str
    packages: dict[str, str]
    wrk: str
    load_average_start: str
    load_average_end: str = ""

    @classmethod
    def describe(cls) -> Machine:
        return cls(
            date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            cpu=_cpu_model(),
            cores=os.cpu_count() or 1,
            memory_gib=_memory_gib(),
            kernel=f"{platform.system()} {platform.release()}",
            python=platform.python_version(),
            packages=package_versions(),
            wrk=_wrk_version(),
            load_average_start=load_average(),
        )


@dataclass
class Run:
    machine: Machine
    settings: LoadSettings
    rounds: int
    bodies: list[BodyResult]
    cold_starts: list[ColdStartResult]
    command: str

    def targets_met(self) -> bool:
        return all(body.met() for body in self.bodies) and all(
            cold_start.met() for cold_start in self.cold_starts
        )

    def as_json(self) -> dict:
        return {
            "machine": asdict(self.machine),
            "settings": asdict(self.settings),
            "rounds": self.rounds,
            "command": self.command,
            "bodies": [
                {**asdict(body), "ratios": body.ratios(), "target": body.target}
                for body in self.bodies
            ],
            "cold_starts": [
                {**asdict(cold_start), "ratios": cold_start.ratios()}
                for cold_start in self.cold_starts
            ],
        }


def software(python: str | None = None, packages: dict[str, str] | None = None) -> str:
    """The Python and server packages a run used, in one phrase."""
    python = python or platform.python_version()
    packages = packages or package_versions()
    return f"Python {python}; " + ", ".join(f"{name} {v}" for name, v in packages.items())


def package_versions() -> dict[str, str]:
    return {name: metadata.version(name) for name in PACKAGES}


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def render(run: Run) -> str:
    """The run as Markdown: targets first, then the figures behind them."""
    return "\n".join(
        [
            "# CastSlice throughput guard: latest run",
            "",
            f"`{run.command}` on {run.machine.date}.",
            "",
            *_render_machine(run),
            "",
            "## Guard ratios (CastSlice ÷ floor on the same server, same run)",
            "",
            (
                f"Median of {run.rounds} rounds, with the lowest and highest in brackets; in "
                "each round both servers share one CPU, so their throughputs compare their "
                "costs. The two faces' rounds alternate, one by one."
            ),
            "",
            "| face | measure | ratio (min–max) | target | met |",
            "|---|---|---|---|---|",
            *(_target_row(body) for body in run.bodies),
            *(_cold_start_target_row(cold_start) for cold_start in run.cold_starts),
            "",
            "## Throughput and CPU time per request",
            "",
            f"Medians of {run.rounds} rounds; {run.settings.describe()}, for each server.",
            "",
            "| face | body | size | server | req/s, sharing one CPU | CPU ms/req |",
            "|---|---|---:|---|---:|---:|",
            *(row for body in run.bodies for row in _body_rows(body)),
            "",
            "## Cold start",
            "",
            _cold_start_caption(run.cold_starts),
            "",
            "| face | server | median ms | min–max ms |",
            "|---|---|---:|---:|",
            *(
                _cold_start_row(cold_start.face, server, seconds)
                for cold_start in run.cold_starts
                for server, seconds in (
                    ("castslice", cold_start.function),
                    ("floor", cold_start.floor),
                )
            ),
            "",
        ]
    )


def _render_machine(run: Run) -> list[str]:
    machine = run.machine
    hardware = f"{machine.cpu}, {machine.cores} cores, {machine.memory_gib:.0f} GiB"
    return [
        f"- Machine: {hardware}, {machine.kernel}",
        f"- {software(machine.python, machine.packages)}; {machine.wrk}",
        f"- Servers: {SERVED_AS_BOTH}",
        (
            f"- Load: {run.settings.describe()}; both servers pinned to one CPU, each loaded "
            "at the same time by its own wrk on the other"
        ),
        (
            f"- Load average (1, 5, 15 min) at start {machine.load_average_start}, "
            f"at end {machine.load_average_end}"
        ),
    ]


def _cold_start_caption(cold_starts: list[ColdStartResult]) -> str:
    return (
        "Process start to the first answered review (the typical body), median of "
        f"{len(cold_starts[0].function)} runs, each face's and floor's in turn."
    )


def _target_row(body: BodyResult) -> str:
    met = "yes" if body.met() else "**no**"
    return (
        f"| {body.face} | {body.name} throughput | {Spread.of(body.ratios()).ratio()} "
        f"| ≥ {body.target:.2f} | {met} |"
    )


def _cold_start_target_row(cold_start: ColdStartResult) -> str:
    met = "yes" if cold_start.met() else "**no**"
    spread = Spread.of(cold_start.ratios()).ratio()
    return f"| {cold_start.face} | cold start | {spread} | ≤ {COLD_START_TARGET:.2f} | {met} |"


def _body_rows(body: BodyResult) -> list[str]:
    rows = []
    for server, shares in (("castslice", body.rounds.server), ("floor", body.rounds.baseline)):
        rows.append(
            f"| {body.face} | {body.name} | {_size(body.size)} | {server} "
            f"| {_median(shares, 'rps'):,.0f} "
            f"| {_median(shares, 'cpu_ms_per_request'):.3f} |"
        )
    return rows


def _cold_start_row(face: str, server: str, seconds: list[float]) -> str:
    spread = Spread.of([value * 1000 for value in seconds])
    return f"| {face} | {server} | {spread.median:.0f} | {spread.low:.0f}–{spread.high:.0f} |"


def _median(shares: list[Share], attribute: str) -> float:
    return statistics.median(getattr(share, attribute) for share in shares)


def _size(size: int) -> str:
    return f"{size / 1024:.1f} KiB"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory_gib() -> float:
    with open("/proc/meminfo") as meminfo:
        kib = int(meminfo.readline().split()[1])
    return kib / 1024 / 1024


def _wrk_version() -> str:
    # `wrk -v` prints its version, then its usage, and exits with status 1.
    completed = subprocess.run([wrk_command(), "-v"], check=False, capture_output=True, text=True)
    words = (completed.stdout or completed.stderr).split()
    return " ".join(words[:2]) if words else "wrk"
