"""CEL evaluated by the API server's own CEL environment (tests/e2e/kube/celeval), no cluster.

Builds the small Go program once per source version next to the Kubernetes
binaries' cache (it reuses their compiled packages), then evaluates batches of
expressions with it, and whole admission policies the way the API server runs
them: variables in order, then the mutation, matchConditions and validations.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tests.policy_comparison import PolicyRun

from .tools import REPO_ROOT, MissingTool, find_program

SOURCE = REPO_ROOT / "tests" / "e2e" / "kube"
_PROGRAM = SOURCE / "celeval" / "main.go"


class CelError(AssertionError):
    """An expression did not compile or evaluate; the message is CEL's."""


@dataclass(frozen=True)
class Result:
    value: Any
    cost: int


@cache
def binary() -> Path:
    go = find_program("go", "Go from https://go.dev/dl/ (it also builds the API server)")
    digest = hashlib.sha256()
    for path in (_PROGRAM, SOURCE / "go.mod", SOURCE / "go.sum"):
        digest.update(path.read_bytes())
    cache_root = Path(
        os.environ.get("CASTSLICE_KUBE_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "castslice"
    )
    target = cache_root / f"celeval-{digest.hexdigest()[:16]}"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        # The same flags as build.sh, so the API server's compiled packages are reused.
        env = {**os.environ, "GOFLAGS": "-trimpath -buildvcs=false", "CGO_ENABLED": "0"}
        done = subprocess.run(
            [str(go), "build", "-o", f"{target}.tmp", "./celeval"],
            cwd=SOURCE,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if done.returncode != 0:
            raise MissingTool(f"building tests/e2e/kube/celeval failed:\n{done.stderr}")
        Path(f"{target}.tmp").rename(target)
    return target


def evaluate_many(cases: list[tuple[str, dict[str, Any]]]) -> list[Result]:
    """Evaluate each (expression, bindings); raise CelError naming the first that fails."""
    if not cases:
        return []
    answers = _run({"cases": [{"expression": e, "bindings": b} for e, b in cases]})
    results = []
    for (expression, _), answer in zip(cases, answers, strict=True):
        if "error" in answer:
            raise CelError(f"{answer['error']}\nin: {expression[:2000]}")
        results.append(Result(answer.get("value"), answer["cost"]))
    return results


def _run(document: dict[str, Any]) -> list[dict[str, Any]]:
    """One run of the evaluator: a JSON document in, one JSON answer per case or object out."""
    done = subprocess.run(
        [str(binary())],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout)


def evaluate(expression: str, **bindings: Any) -> Any:
    return evaluate_many([(expression, bindings)])[0].value


def run_policy(
    policy: dict[str, Any],
    objects: list[dict[str, Any]],
    requests: list[dict[str, Any]] | None = None,
) -> list[PolicyRun]:
    """Run a Mutating- or ValidatingAdmissionPolicy's CEL on each object, as the API server does.

    matchConditions first (a false one ends the run), then the variables in order,
    then the JSON Patch, the validations (a message for each that fails) and the
    audit annotations (those not null). `requests` gives each object's `request`
    (its namespace, kind...). A CEL error raises CelError.
    """
    runs = []
    for answer in _run({"policy": policy["spec"], "objects": objects, "requests": requests or []}):
        if "error" in answer:
            raise CelError(answer["error"][:3000])
        runs.append(
            PolicyRun(
                answer["matched"],
                answer.get("variables", {}),
                answer["cost"],
                answer.get("patch"),
                answer.get("messages"),
                answer.get("audit"),
            )
        )
    return runs
