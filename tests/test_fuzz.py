"""Fuzzing the HTTP body around a valid review: every input gets a defined answer.

Each example takes the sample review and breaks it in one place: a value of
the wrong type at any field, huge or unusual strings, deep nesting, duplicate
keys, a truncated or re-encoded body. The answer must be 200 with an allowed
review, or a JSON 400/413/415, never a 500 or an HTML page. CI runs a bounded
number of examples; `CASTSLICE_FUZZ_EXAMPLES=20000 make unit` runs a longer campaign.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.conftest import ROOT
from tests.factories import JSON_HEADERS, media_type

SAMPLE = json.loads((ROOT / "examples" / "admission-review.json").read_text())
EXAMPLES = int(os.environ.get("CASTSLICE_FUZZ_EXAMPLES", "300"))
DEFINED = {200, 400, 413, 415}


def paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every path to a value in the document, the root excluded."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, child in items:
        yield (*prefix, key)
        yield from paths(child, (*prefix, key))


PATHS = list(paths(SAMPLE))

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=50)
    | st.sampled_from(["", "\u0000", "\ud7ff\U0010ffff", "e\u0301", "1e999", "true"])
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
huge_strings = st.integers(min_value=10_000, max_value=2_000_000).map(lambda n: "x" * n)


# Stands in for a value that is spliced in as raw JSON text after encoding.
_RAW = "castslice-fuzz-raw-value"


def nested(depth: int) -> str:
    """JSON text nested `depth` levels deep, written out as text: json.dumps would recurse."""
    opening = "".join('{"a":' if level % 2 else "[" for level in range(depth))
    closing = "".join("}" if level % 2 else "]" for level in reversed(range(depth)))
    return opening + '"deep"' + closing


def replaced(path: tuple, value: Any, raw: str | None = None) -> bytes:
    document = copy.deepcopy(SAMPLE)
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = _RAW if raw is not None else value
    text = json.dumps(document, ensure_ascii=False)
    if raw is not None:
        text = text.replace(json.dumps(_RAW), raw, 1)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    kind = draw(
        st.sampled_from(["type", "type", "type", "huge", "deep", "duplicate", "bytes", "cut"])
    )
    if kind == "type":
        return replaced(draw(st.sampled_from(PATHS)), draw(json_values))
    if kind == "huge":
        return replaced(draw(st.sampled_from(PATHS)), draw(huge_strings))
    if kind == "deep":
        depth = draw(st.integers(1, 100_000))
        return replaced(draw(st.sampled_from(PATHS)), None, raw=nested(depth))
    text = json.dumps(SAMPLE)
    if kind == "duplicate":
        # A repeated key: JSON allows it, the last one wins for most decoders.
        key = draw(st.sampled_from(['"uid"', '"kind"', '"object"', '"annotations"', '"request"']))
        value = json.dumps(draw(json_values))
        return text.replace(key + ":", f"{key}: {value}, {key}:", 1).encode()
    if kind == "cut":
        return text.encode()[: draw(st.integers(0, len(text) - 1))]
    return draw(st.binary(max_size=200)) + text.encode()[draw(st.integers(0, 200)) :]


# The one fail-open a body may cause: an object that is not a Pod CastSlice can read.
UNREADABLE = "review failed, Pod admitted unchanged: request.object is not a readable Pod"


def check(client: TestClient, capsys: pytest.CaptureFixture, body: bytes) -> None:
    capsys.readouterr()
    answer = client.post("/?timeout=5s", content=body, headers=JSON_HEADERS)
    assert answer.status_code in DEFINED, answer.content[:300]
    assert media_type(answer) == "application/json"
    document = answer.json()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    errors = [line["message"] for line in lines if line["severity"] == "ERROR"]
    # A decision that raised is admitted unchanged too, with a 200: only the log and the
    # warning tell it from a decision, and neither may appear for a readable object.
    assert all(message.startswith(UNREADABLE) for message in errors), errors
    if answer.status_code == 200:
        response = document["response"]
        assert response["allowed"] is True and response["uid"]
        failed_open = any("internal error" in warning for warning in response.get("warnings", []))
        assert failed_open == bool(errors), (response.get("warnings"), errors)
    else:
        assert isinstance(document["error"], str) and document["error"]
        assert not errors


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(body=bodies())
def test_every_body_gets_a_defined_answer(
    client: TestClient, capsys: pytest.CaptureFixture, body: bytes
) -> None:
    check(client, capsys, body)


@pytest.mark.parametrize(
    "body",
    [
        replaced(("request", "object", "spec", "containers"), None, raw=nested(500)),
        replaced(("request", "object", "metadata"), None, raw=nested(1_000_000)),
        replaced(("request", "uid"), "u" * 6_000_000),
        b"\xff\xfe" + json.dumps(SAMPLE).encode("utf-16-le"),
        json.dumps(SAMPLE).encode()[:-1],
        b"[]",
        b"null",
        json.dumps({**SAMPLE, "request": {**SAMPLE["request"], "uid": 7}}).encode(),
    ],
    ids=[
        "deep-in-spec",
        "deepest-in-7mib",
        "6mb-uid",
        "utf16",
        "truncated",
        "array",
        "null",
        "uid-number",
    ],
)
def test_known_hard_bodies(client: TestClient, capsys: pytest.CaptureFixture, body: bytes) -> None:
    check(client, capsys, body)


def test_the_sample_review_is_decided_not_failed_open(
    client: TestClient, capsys: pytest.CaptureFixture
) -> None:
    # The fuzzer's starting point is rewritten: its examples are decided, not admitted blind.
    capsys.readouterr()
    answer = client.post("/?timeout=5s", content=json.dumps(SAMPLE), headers=JSON_HEADERS)
    assert "patch" in answer.json()["response"]
    (line,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (line["severity"], line["decision"]) == ("INFO", "mutated")
