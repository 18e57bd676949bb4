"""The structured log: whole lines, all of them, in order, written before the answer."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from starlette.testclient import TestClient

from castslice.serve import log
from tests.factories import make_pod, make_review, opted_in
from tests.served import ROOT, Served, environment, functions_framework_command, serving


def records(capsys: pytest.CaptureFixture) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_a_line_is_written_by_the_time_the_call_returns(capsys: pytest.CaptureFixture) -> None:
    log.write_log("WARNING", "written now", uid="u-1", dropped=None)
    assert records(capsys) == [{"severity": "WARNING", "message": "written now", "uid": "u-1"}]


@pytest.mark.parametrize("unbuffered", [True, False], ids=["raw-stdout", "buffered-stdout"])
def test_lines_from_many_threads_are_whole_and_in_order(
    monkeypatch: pytest.MonkeyPatch, unbuffered: bool
) -> None:
    # stdout is a real pipe, as a container runtime gives it, drained by a reader; the lines
    # are longer than PIPE_BUF (4 KiB), where a single write(2) stops being atomic.
    reader, writer = os.pipe()
    raw = io.FileIO(writer, "w")
    stream = raw if unbuffered else io.BufferedWriter(raw)
    received = bytearray()

    def drain() -> None:
        with io.FileIO(reader, "r") as pipe:
            while chunk := pipe.read(65536):
                received.extend(chunk)

    draining = threading.Thread(target=drain)
    draining.start()

    def emit(thread: int) -> None:
        for index in range(100):
            log.write_log("INFO", str(thread) * 16384, thread=thread, index=index)

    with monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", io.TextIOWrapper(stream, write_through=True))
        threads = [threading.Thread(target=emit, args=(number,)) for number in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        sys.stdout.flush()
    stream.close()
    draining.join()

    written = [json.loads(line) for line in received.splitlines()]
    assert len(written) == 8 * 100
    for number in range(8):
        mine = [record for record in written if record["thread"] == number]
        assert [record["index"] for record in mine] == list(range(100))
        assert all(record["message"] == str(number) * 16384 for record in mine)
    assert written[0].keys() == {"severity", "message", "thread", "index"}


@pytest.mark.parametrize("unbuffered", [True, False], ids=["raw-stdout", "buffered-stdout"])
def test_lines_longer_than_a_pipe_write_stay_whole(unbuffered: bool) -> None:
    # A write of more than PIPE_BUF (4 KiB) to a pipe is not atomic; these lines are 64 KiB,
    # from eight threads at once, through a real pipe.
    program = (
        "import threading\n"
        "from castslice.serve.log import write_log\n"
        "def emit(thread):\n"
        "    for index in range(50):\n"
        "        write_log('INFO', str(thread) * 65536, thread=thread, index=index)\n"
        "threads = [threading.Thread(target=emit, args=(n,)) for n in range(8)]\n"
        "[thread.start() for thread in threads]\n"
        "[thread.join() for thread in threads]\n"
    )
    env = environment()
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    else:
        env.pop("PYTHONUNBUFFERED", None)
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, check=True,
        timeout=60,
    )  # fmt: skip
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 8 * 50
    for line in lines:
        assert line["message"] == str(line["thread"]) * 65536


def test_a_record_that_cannot_be_encoded_costs_only_its_own_line(
    capsys: pytest.CaptureFixture,
) -> None:
    circular: dict = {"severity": "INFO", "message": "bad"}
    circular["self"] = circular
    log.write_log("INFO", "before")
    log.write_record(circular)
    log.write_log("INFO", "after", value=object())

    before, bad, after = records(capsys)
    assert before == {"severity": "INFO", "message": "before"}
    assert bad["severity"] == "ERROR" and bad["message"].startswith("unloggable log record: ")
    assert after["message"] == "after" and after["value"].startswith("<object object at ")


def test_a_review_is_answered_when_its_line_cannot_be_written(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader, writer = os.pipe()
    os.close(reader)  # the log collector has gone: every write fails with EPIPE
    # Unbuffered, as the image runs Python (PYTHONUNBUFFERED=1).
    gone = io.TextIOWrapper(io.FileIO(writer, "w"), write_through=True)
    with gone, monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", gone)
        answer = client.post("/?timeout=5s", json=make_review(make_pod(opted_in())))
    assert answer.status_code == 200
    assert answer.json()["response"]["allowed"] is True


# --- the real server: functions-framework's ASGI server, a file as stdout ---


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(
        "castslice-log",
        functions_framework_command,
        tmp_path_factory.mktemp("log-server"),
        environment(),
    ) as served:
        yield served


def logged_uids(served: Served) -> list[str]:
    """The uid of every review line in the request log, read once, right now.

    A line another review is writing at this moment may be seen in part: the kernel
    copies a write that crosses a page boundary one page at a time, and a reader may
    see the file end between the two. Only complete lines are read, so a line cut for
    good still fails the checks: its uid is missing once every answer has arrived.
    """
    log = served.request_log.read_bytes()
    complete = log[: log.rfind(b"\n") + 1]
    lines = [json.loads(line) for line in complete.splitlines()]
    return [line["uid"] for line in lines if "decision" in line]


def send_review(served: Served, uid: str) -> None:
    body = json.dumps(make_review(make_pod(opted_in()), uid=uid))
    status, _, raw = served.request("POST", body=body)
    assert status == 200 and json.loads(raw)["response"]["uid"] == uid


def answered_and_logged(served: Served, uid: str) -> bool:
    """Send a review; whether its line is in the log the moment its answer has arrived."""
    send_review(served, uid)
    return logged_uids(served).count(uid) == 1


def test_each_line_is_in_the_log_when_its_answer_arrives(server: Served) -> None:
    for index in range(30):
        uid = f"sequential-{index}"
        assert answered_and_logged(server, uid), f"no line for {uid} when it was answered"


def test_concurrent_reviews_are_each_logged_by_their_answer_and_whole(server: Served) -> None:
    uids = [f"concurrent-{index}" for index in range(200)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        found = list(pool.map(lambda uid: answered_and_logged(server, uid), uids))
    assert [uid for uid, logged in zip(uids, found, strict=True) if not logged] == []
    # Every line parses: none was cut or interleaved with another.
    logged = [uid for uid in logged_uids(server) if uid.startswith("concurrent-")]
    assert sorted(logged) == sorted(uids)
