"""The server's first log lines, before any request: where it listens, the settings it runs
with (never a secret's value), and the CASTSLICE_* names it ignores. Both of
functions-framework's servers, as `make run` and the image start them; gunicorn under
castslice/serve/tls.py is tested in tests/deploy/test_tls.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from castslice import __version__
from castslice.environment import load_config
from castslice.serve.start import announce, functions_framework_address
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


def test_the_mig_settings_are_said_and_those_that_do_nothing_named(tmp_path: Path) -> None:
    settings = environment(
        CASTSLICE_BACKEND="mig",
        CASTSLICE_MIG_GPU_MODELS="H200",
        CASTSLICE_MIG_PRODUCT_NAMES="H200=NVIDIA H200 NVL",
        CASTSLICE_MIG_TIME_SHARED_CLIENTS="4",
        CASTSLICE_DRA_CAPACITY="shares",
    )
    with serving("castslice", functions_framework_command, tmp_path, settings) as served:
        started, *warnings = first_lines(served.request_log)
    mig = {key: value for key, value in started.items() if key.startswith(("mig", "dra"))}
    assert mig == {
        "migGpuModels": ["H200"],
        "migStack": "mixed",
        "migFit": "memory",
        "migWholeGpu": "gpu",
        "migProductNames": {"H200": ["NVIDIA H200 NVL"]},
    }
    assert warnings == [
        {
            "severity": "WARNING",
            "message": "settings that do nothing with CASTSLICE_BACKEND=mig, ignored: "
            "CASTSLICE_DRA_CAPACITY (the dra backend's); "
            "CASTSLICE_MIG_TIME_SHARED_CLIENTS (only with CASTSLICE_MIG_STACK=gke)",
            "idleSettings": [
                {"name": "CASTSLICE_DRA_CAPACITY", "why": "the dra backend's"},
                {
                    "name": "CASTSLICE_MIG_TIME_SHARED_CLIENTS",
                    "why": "only with CASTSLICE_MIG_STACK=gke",
                },
            ],
        }
    ]


@pytest.mark.parametrize(
    ("settings", "warned"),
    [
        (
            {"CASTSLICE_MIG_GPU_MODELS": "H200"},
            "settings that do nothing with CASTSLICE_BACKEND=resource, ignored: "
            "CASTSLICE_MIG_GPU_MODELS (the mig backend's)",
        ),
        (
            {
                "CASTSLICE_BACKEND": "mig",
                "CASTSLICE_MIG_STACK": "mixed",
                "CASTSLICE_MIG_TIME_SHARED_CLIENTS": "4",
            },
            "settings that do nothing with CASTSLICE_BACKEND=mig, ignored: "
            "CASTSLICE_MIG_TIME_SHARED_CLIENTS (only with CASTSLICE_MIG_STACK=gke)",
        ),
    ],
    ids=["mig models on resource", "time-shared clients on mixed"],
)
def test_a_setting_that_does_nothing_is_named_at_start(
    settings: dict[str, str], warned: str, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """The start lines as the server writes them (`announce`, the call serving makes)."""
    environ = {"CASTSLICE_PATH_TOKEN": TOKEN, **settings}
    announce(load_config(environ), environ, ["http://127.0.0.1:8080"])
    lines = [json.loads(line) for line in capsysbinary.readouterr().out.splitlines()]
    assert [line["message"] for line in lines[1:]] == [warned]


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
