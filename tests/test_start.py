"""The server's first log lines, before any request: where it listens, the settings it runs
with (never a secret's value), and the CASTSLICE_* names it ignores. Both of
functions-framework's servers, as `make run` and the image start them; gunicorn under
castslice/serve/tls.py is tested in tests/deploy/test_tls.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from castslice import __version__
from castslice.serve.start import functions_framework_address
from tests.served import TARGETS, environment, functions_framework_command, serving

TOKEN = "Zx8qP2vN5mR7tK1wY4bC6dF9"


def first_lines(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_the_server_says_where_it_listens_and_with_what_before_any_review(
    target: str, tmp_path: Path
) -> None:
    settings = environment(
        CASTSLICE_BACKEND="gke",
        CASTSLICE_SLICES_PER_GPU="8",
        CASTSLICE_SHARING_DEGREES="2,8",
        CASTSLICE_PATH_TOKEN=TOKEN,
        CASTSLICE_SLICE_PER_GPU="2",
    )
    command = lambda port: functions_framework_command(port, TARGETS[target])  # noqa: E731
    with serving("castslice", command, tmp_path, settings) as served:
        # Only the health check has been answered, and it writes no line.
        started, warned = first_lines(served.request_log)
        port = served.port
    assert started == {
        "severity": "INFO",
        "message": "castslice starting",
        "listening": [f"http://127.0.0.1:{port}"],
        "version": __version__,
        "backend": "gke",
        "slicesPerGpu": 8,
        "sharingDegrees": [2, 8],
        "sharingStrategy": "time-slicing",
        "gpuResource": "nvidia.com/gpu",
        "sharedResource": "nvidia.com/gpu-shared",
        "presets": {"training": 4, "inference": 2, "batch": 2, "dev": 1},
        "defaultSlices": 1,
        "maxSliceRatio": 1000,
        "pathToken": "set",
        "draDeviceClass": "gpu.nvidia.com",
        "draCapacity": "shares",
    }
    assert warned == {
        "severity": "WARNING",
        "message": "CASTSLICE_* names that are not settings, ignored: "
        "CASTSLICE_SLICE_PER_GPU (did you mean CASTSLICE_SLICES_PER_GPU?)",
        "unknownSettings": [
            {"name": "CASTSLICE_SLICE_PER_GPU", "closest": "CASTSLICE_SLICES_PER_GPU"}
        ],
    }
    assert TOKEN not in served.request_log.read_text()


def test_settings_alone_give_one_line(tmp_path: Path) -> None:
    with serving("castslice", functions_framework_command, tmp_path, environment()) as served:
        (started,) = first_lines(served.request_log)
    assert started["backend"] == "resource"
    assert started["pathToken"] == "unset"


@pytest.mark.parametrize(
    ("argv", "environ", "address"),
    [
        (["/venv/bin/functions-framework", "--target=mutate_asgi"], {}, "http://0.0.0.0:8080"),
        (["functions-framework", "--target=mutate"], {"PORT": "9000"}, "http://0.0.0.0:9000"),
        (
            ["/usr/lib/python3/functions_framework/__main__.py", "--port", "81", "--host=::1"],
            {"PORT": "9000", "HOST": "10.0.0.1"},
            "http://::1:81",
        ),
        (["/venv/bin/gunicorn", "--config=python:castslice.serve.tls"], {"PORT": "1"}, None),
        ([], {}, None),
    ],
)
def test_the_address_is_the_one_functions_frameworks_command_binds(
    argv: list[str], environ: dict[str, str], address: str | None
) -> None:
    assert functions_framework_address(argv, environ) == address
