"""The structured log: whole lines, all of them, in order, written off the request path."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from castslice import log
from tests.conftest import ROOT
from tests.procs import wait_until


def records(capsys: pytest.CaptureFixture) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_lines_from_many_threads_are_whole_and_in_order(capsys: pytest.CaptureFixture) -> None:
    def emit(thread: int) -> None:
        for index in range(200):
            log.write_log("INFO", "review", thread=thread, index=index, dropped=None)

    threads = [threading.Thread(target=emit, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log.flush()

    written = records(capsys)
    assert len(written) == 8 * 200
    for number in range(8):
        mine = [record["index"] for record in written if record["thread"] == number]
        assert mine == list(range(200))
    assert written[0].keys() == {"severity", "message", "thread", "index"}


def test_queued_lines_are_written_without_a_flush(capsys: pytest.CaptureFixture) -> None:
    log.write_log("WARNING", "written by the background writer", uid="u-1")
    seen: list[dict] = []

    def written() -> bool:
        seen.extend(records(capsys))
        return bool(seen)

    wait_until(written, timeout=10, what="the background writer")
    assert seen == [
        {"severity": "WARNING", "message": "written by the background writer", "uid": "u-1"}
    ]


def test_lines_still_queued_at_exit_are_written() -> None:
    program = "from castslice.log import write_log\nwrite_log('INFO', 'last words', n=1)\n"
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, check=True, timeout=30
    )
    assert json.loads(done.stdout) == {"severity": "INFO", "message": "last words", "n": 1}


def test_a_record_that_cannot_be_encoded_costs_only_its_own_line(
    capsys: pytest.CaptureFixture,
) -> None:
    circular: dict = {"severity": "INFO", "message": "bad"}
    circular["self"] = circular
    log.write_log("INFO", "before")
    log.write_record(circular)
    log.write_log("INFO", "after", value=object())
    log.flush()

    before, bad, after = records(capsys)
    assert before == {"severity": "INFO", "message": "before"}
    assert bad["severity"] == "ERROR" and bad["message"].startswith("unloggable log record: ")
    assert after["message"] == "after" and after["value"].startswith("<object object at ")
