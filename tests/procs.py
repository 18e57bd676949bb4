"""Child processes that are always stopped: own process groups, atexit, parent-death signal."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1
_running: set[ManagedProcess] = set()


class HarnessError(RuntimeError):
    """A component of the local test environment did not start or misbehaved."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    alive: Callable[[], None] | None = None,
) -> T:
    """Call `probe` until it returns something truthy; `alive` raises if waiting is hopeless."""
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None:
            alive()
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise HarnessError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _die_with_parent(signum: int) -> Callable[[], None]:
    # Linux only: the child gets `signum` when the harness dies without cleaning
    # up (SIGKILL, crash), so no apiserver or nginx outlives a killed test run.
    def set_death_signal() -> None:
        if sys.platform.startswith("linux"):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum)

    return set_death_signal


def _group_members(pgid: int) -> list[int]:
    """The processes in process group `pgid`, from /proc (Linux)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # After the parenthesised command name: state, ppid, pgrp, ...
        fields = stat.rpartition(")")[2].split()
        if int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


class ManagedProcess:
    """One long-running child in its own process group, its output in log files."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_dir: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        separate_stdout: bool = False,
        stdout_through_pipe: bool = False,
        death_signal: int = signal.SIGKILL,
    ) -> None:
        """`death_signal` reaches the process if the harness dies first: SIGKILL for
        throw-away state, SIGTERM for servers that must take their workers along.

        With `stdout_through_pipe`, stdout is a pipe that `cat` copies to the file, as
        a container runtime's pipe to its log files: a write to a file now and then
        waits for the disk, a write to a pipe does not.
        """
        self.name = name
        self.argv = list(argv)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.stderr_path = log_dir / f"{name}.log"
        # A program whose stdout is data (CastSlice's request log) keeps it apart.
        self.stdout_path = log_dir / f"{name}.out" if separate_stdout else self.stderr_path
        self.death_signal = death_signal
        self.stdout_through_pipe = stdout_through_pipe
        self._process: subprocess.Popen[bytes] | None = None
        self._copier: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.stderr_path, "ab") as stderr, open(self.stdout_path, "ab") as stdout:
            if self.stdout_through_pipe:
                # cat ends once every holder of the pipe's write end (the workers too) has.
                self._copier = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=stdout)
                stdout = self._copier.stdin
            self._process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent(self.death_signal),
            )
        if self._copier is not None and self._copier.stdin is not None:
            self._copier.stdin.close()
        _running.add(self)

    @property
    def pid(self) -> int:
        if self._process is None:
            raise HarnessError(f"{self.name} was never started")
        return self._process.pid

    def usage(self) -> tuple[float, int]:
        """CPU seconds the process has used, and its peak resident memory in bytes."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        peak = 0
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
        return cpu, peak

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def check_running(self) -> None:
        """Raise with the end of the log when the process has exited."""
        if self._process is not None and self._process.poll() is not None:
            raise HarnessError(
                f"{self.name} exited with status {self._process.returncode}; "
                f"last lines of {self.stderr_path}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def pause_workers(self) -> None:
        """Freeze every process of the group but the leader (a pre-fork server's workers).

        Connections are still accepted by the kernel but never answered, and the
        leader stays able to take its workers down if the harness dies meanwhile.
        """
        for pid in _group_members(self.pid):
            if pid != self.pid:
                os.kill(pid, signal.SIGSTOP)

    def resume_workers(self) -> None:
        self._signal_group(signal.SIGCONT)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the group, then SIGKILL what is left after `grace` seconds."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            self._signal_group(signal.SIGTERM)
            # Paused workers never see SIGTERM until they run again.
            self._signal_group(signal.SIGCONT)
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                process.wait()
        # Workers that outlived their parent (nginx, gunicorn) are in the same group.
        self._signal_group(signal.SIGKILL)
        if self._copier is not None:
            self._copier.wait(grace)  # every line is in the file once it returns
            self._copier = None
        _running.discard(self)

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)


@atexit.register
def _stop_leftovers() -> None:
    for process in list(_running):
        process.stop(grace=5.0)


@contextlib.contextmanager
def serving(
    name: str,
    argv: Sequence[str],
    log_dir: Path,
    ready: Callable[[], T | None],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 30,
) -> Iterator[T]:
    """Run a server until the block ends, once `ready` answers (OSError counts as not yet)."""

    def probe() -> T | None:
        try:
            return ready()
        except OSError:
            return None

    process = ManagedProcess(name, argv, log_dir, env=env, cwd=cwd, death_signal=signal.SIGTERM)
    process.start()
    try:
        yield wait_until(
            probe, timeout=timeout, what=f"{name} to answer", alive=process.check_running
        )
    finally:
        process.stop()
