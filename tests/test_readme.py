"""The README's example, run as the README says, answers what the README shows."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_curl_example_output_matches_the_readme(client) -> None:
    shown = re.search(r"decode-patch\.py\n```\n\n```\n(.*?)```", README, re.S).group(1)
    body = (ROOT / "examples" / "admission-review.json").read_bytes()
    answer = client.post("/?timeout=5s", data=body, content_type="application/json")
    decoded = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "decode-patch.py")],
        input=answer.data,
        capture_output=True,
        check=True,
    )
    assert decoded.stdout.decode() == shown


def test_warning_example_is_what_users_see(client) -> None:
    shown = re.search(r"^Warning: (.*)$", README, re.M).group(1)
    review = (ROOT / "examples" / "admission-review.json").read_text()
    review = review.replace('"true",', '"true", "castops.io/slice-ratio": "1.5",', 1)
    answer = client.post("/", data=review, content_type="application/json").get_json()
    assert answer["response"]["warnings"] == [shown]
