"""The function as production serves it: the functions-framework command, gunicorn, a socket."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.factories import apply_response, make_pod, make_review, opted_in
from tests.procs import free_port, serving
from tests.served import TARGETS, environment, functions_framework_command

ROOT = Path(__file__).resolve().parent.parent


# The Flask server, the ASGI server, and the ASGI server as earlier releases started it.
SERVERS = {**TARGETS, "asgi-flag": "mutate"}


@pytest.fixture(scope="module", params=sorted(SERVERS))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, int]]:
    """`functions-framework --target=T` for each of main.py's targets (Flask and ASGI)."""
    port = free_port()
    command = functions_framework_command(port, SERVERS[request.param])
    if request.param == "asgi-flag":
        command.append("--asgi")
    with serving(
        "castslice",
        command,
        tmp_path_factory.mktemp("server"),
        lambda: send(("127.0.0.1", port), "GET")[0] == 200,
        cwd=ROOT,
    ):
        yield "127.0.0.1", port


def send(server, method: str, body=None, headers=None, path="/?timeout=5s", chunked=False):
    connection = http.client.HTTPConnection(*server, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
        reply = connection.getresponse()
        return reply.status, reply.getheader("Content-Type"), reply.read()
    finally:
        connection.close()


JSON = {"Content-Type": "application/json"}


def test_serves_reviews_concurrently(server) -> None:
    def review(index: int) -> tuple[str, dict]:
        pod = make_pod(opted_in(**{"castops.io/slice-ratio": str(index % 7 + 1)}))
        body = json.dumps(make_review(pod, uid=f"uid-{index}"))
        status, content_type, raw = send(server, "POST", body, JSON)
        assert (status, content_type) == (200, "application/json")
        return f"uid-{index}", (pod, json.loads(raw)["response"], str(index % 7 + 1))

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(review, range(200)))
    for uid, (pod, response, slices) in results:
        assert response["uid"] == uid
        limits = apply_response(pod, response)["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {"nvidia.com/gpu-shared": slices}


def test_chunked_body_over_the_limit_is_refused_and_serving_goes_on(server) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"apiVersion": "admission.k8s.io/v1", "padding": "'
        for _ in range(8):
            yield b"x" * (1024 * 1024)
        yield b'"}'

    status, content_type, raw = send(server, "POST", chunks(), JSON, chunked=True)
    assert (status, content_type) == (413, "application/json")
    assert json.loads(raw) == {"error": "the body is larger than 7340032 bytes (7 MiB)"}
    valid = json.dumps(make_review(make_pod(opted_in())))
    assert send(server, "POST", valid, JSON, chunked=True)[0] == 200


LIMIT = 7 * 1024 * 1024


def padded_review(size: int) -> bytes:
    """A valid review of exactly `size` bytes: an opted-in Pod and a padding field."""
    valid = json.dumps(make_review(make_pod(opted_in()))).encode()
    padding = size - len(valid) - len(b', "padding": ""')
    return valid[:-1] + b', "padding": "' + b"x" * padding + b'"}'


@pytest.mark.parametrize(("size", "status"), [(LIMIT, 200), (LIMIT + 1, 413)])
def test_a_chunked_body_is_read_to_the_limit_and_not_a_byte_past_it(server, size, status) -> None:
    body = padded_review(size)
    assert len(body) == size

    def chunks() -> Iterator[bytes]:
        # Chunk sizes that do not divide the limit, so no read lands on it by chance.
        for start in range(0, size, 1_000_003):
            yield body[start : start + 1_000_003]

    got_status, content_type, raw = send(server, "POST", chunks(), JSON, chunked=True)
    assert (got_status, content_type) == (status, "application/json")
    if status == 200:
        assert json.loads(raw)["response"]["allowed"] is True
    else:
        assert json.loads(raw) == {"error": "the body is larger than 7340032 bytes (7 MiB)"}


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_sent(server) -> None:
    with socket.create_connection(server, timeout=30) as connection:
        connection.sendall(
            b"POST / HTTP/1.1\r\nHost: castslice\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (LIMIT + 1)
        )
        # Not a byte of the body is sent: the answer comes from the headers alone, and the
        # connection, with the whole body still to come, is closed after it.
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ")
    assert json.loads(body) == {"error": "the body is larger than 7340032 bytes (7 MiB)"}
    assert send(server, "GET")[0] == 200


@pytest.mark.parametrize(
    ("method", "body", "headers", "status"),
    [
        ("POST", b"\x00\x01garbage", JSON, 400),
        ("POST", b"{}", {"Content-Type": "text/html"}, 415),
        ("POST", b"", {}, 415),
        ("PUT", b"{}", JSON, 405),
        ("DELETE", None, {}, 405),
        ("POST", b'{"a":' * 200_000 + b"1" + b"}" * 200_000, JSON, 400),
    ],
)
def test_errors_are_json_never_html(server, method, body, headers, status) -> None:
    got_status, content_type, raw = send(server, method, body, headers)
    assert (got_status, content_type) == (status, "application/json")
    assert set(json.loads(raw)) == {"error"}
    assert send(server, "GET")[0] == 200


def test_a_body_cut_short_closes_the_connection_and_serving_goes_on(
    server, request: pytest.FixtureRequest
) -> None:
    with socket.create_connection(server, timeout=30) as connection:
        connection.sendall(
            b"POST / HTTP/1.1\r\nHost: castslice\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\nConnection: close\r\n\r\n" + b'{"apiVersion": '
        )
        connection.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    # The caller stopped sending before its body ended, and nothing waits for the rest.
    if request.node.callspec.params["server"] != "flask":
        # uvicorn sees the connection end and closes it: no answer can reach the caller.
        assert answer == b""
    else:
        # gunicorn's thread still writes to the half-closed connection: a JSON 400.
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 ")
        assert json.loads(body) == {"error": "the body ended before its Content-Length"}
    assert send(server, "GET")[0] == 200


def test_make_run_serves_the_readme_example(tmp_path: Path) -> None:
    # The README's first command, as the Makefile runs it, with this environment's .venv.
    recipe = (ROOT / "Makefile").read_text().split("\nrun:", 1)[1].splitlines()[1].strip()
    port = free_port()
    bin_dir = Path(sys.executable).parent
    command = recipe.replace("$(BIN)", str(bin_dir)).replace("$(PORT)", str(port)).split()
    command.insert(1, "--host=127.0.0.1")
    sample = (ROOT / "examples" / "admission-review.json").read_bytes()
    with serving(
        "make-run", command, tmp_path, lambda: send(("127.0.0.1", port), "GET")[0] == 200, cwd=ROOT
    ):
        status, content_type, raw = send(("127.0.0.1", port), "POST", sample, JSON)
    assert (status, content_type) == (200, "application/json")
    response = json.loads(raw)["response"]
    assert response["allowed"] is True
    assert response["auditAnnotations"] == {
        "slices": "4", "slice-source": "workload-type", "backend": "resource",
    }  # fmt: skip


def test_the_function_loads_without_the_kubernetes_client() -> None:
    # Only doctor talks to a cluster; loading the client with the backends took longer
    # than the rest of a cold start together.
    code = "import sys, main; print(sorted({m.split('.')[0] for m in sys.modules}))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environment(),
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    modules = set(loaded.stdout.strip().strip("[]").replace("'", "").split(", "))
    assert {"castslice", "functions_framework", "msgspec"} <= modules
    assert not modules & {"kubernetes", "urllib3"}
