"""`castslice preview`: real-world manifests, golden outputs per backend, and bad input.

The goldens under tests/cli/golden are compared strictly; regenerate them with
CASTSLICE_UPDATE_GOLDEN=1 and review the diff. Every golden is also checked
against the deployed function: each Pod it shows must be exactly the Pod the
function's patch makes, and each warning one the function gives.
"""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.testclient import TestClient

from castslice import cli
from castslice.cli.manifests import MAX_FILE_BYTES
from tests.factories import Ran, apply_response, make_review, review_response

HERE = Path(__file__).resolve().parent / "cli"
MANIFESTS = HERE / "manifests"
GOLDEN = HERE / "golden"
ROOT = Path(__file__).resolve().parent.parent
# Each backend as a cluster would configure it; nvidia and gke with sharing pools of 2
# and 4 clients per GPU, so that fractional shares, pools and whole GPUs all appear.
BACKENDS = {
    "resource": {"CASTSLICE_BACKEND": "resource"},
    "nvidia": {
        "CASTSLICE_BACKEND": "nvidia",
        "CASTSLICE_SHARING_DEGREES": "2,4",
        "CASTSLICE_SHARING_STRATEGY": "mps",
    },
    "gke": {"CASTSLICE_BACKEND": "gke", "CASTSLICE_SHARING_DEGREES": "2,4"},
}
UPDATE = os.environ.get("CASTSLICE_UPDATE_GOLDEN") == "1"
CASES = sorted(path.name for path in MANIFESTS.iterdir())
TEMPLATE_PATHS = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
PodOf = tuple[dict[str, Any], tuple[str, ...]]


@pytest.fixture
def preview(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Callable[..., Ran]:
    """Run `castslice preview ARGS` in this process, with CASTSLICE_* settings as keywords."""

    def run(*args: str, stdin: bytes = b"", **environment: str) -> Ran:
        for name in [name for name in os.environ if name.startswith("CASTSLICE_")]:
            if name != "CASTSLICE_UPDATE_GOLDEN":
                monkeypatch.delenv(name)
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        capsys.readouterr()
        code = cli.main(["preview", *args])
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return run


def compare_golden(path: Path, text: str) -> None:
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing; create it with CASTSLICE_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path} differs; regenerate with CASTSLICE_UPDATE_GOLDEN=1"


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_preview_matches_its_golden(preview: Callable[..., Ran], backend: str, case: str) -> None:
    shown = preview("-f", str(MANIFESTS / case), **BACKENDS[backend])
    diffed = preview("-f", str(MANIFESTS / case), "--diff", **BACKENDS[backend])

    assert shown.code == diffed.code == 0, shown.err
    assert shown.err == diffed.err
    stem = GOLDEN / backend / Path(case).stem
    compare_golden(stem.with_suffix(".yaml"), shown.out)
    compare_golden(stem.with_suffix(".diff"), diffed.out)
    compare_golden(stem.with_suffix(".stderr"), shown.err)


def manifest_objects(path: Path) -> list[dict]:
    """Every object of a manifest file, List items included, read independently of castslice."""
    found = []
    for document in yaml.safe_load_all(path.read_text()):
        if document is None:
            continue
        found += document["items"] if document["kind"] == "List" else [document]
    return found


def pod_of(manifest: dict) -> PodOf | None:
    """The Pod a manifest creates (itself, or from its template) and the template's path."""
    if manifest["apiVersion"] == "v1" and manifest["kind"] == "Pod":
        return manifest, ()
    path = TEMPLATE_PATHS.get(manifest["kind"])
    if path is None:
        return None
    template: Any = manifest
    for key in path:
        template = template[key]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": template.get("metadata") or {}}
    return {**pod, "spec": template["spec"]}, path


def with_template(manifest: dict, path: tuple[str, ...], pod: dict) -> dict:
    result = copy.deepcopy(manifest)
    parent = result
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = {**parent[path[-1]], "metadata": pod["metadata"], "spec": pod["spec"]}
    return result


def reference(manifest: dict) -> str:
    metadata = manifest["metadata"]
    name = metadata.get("name") or metadata["generateName"] + "*"
    return f"{manifest['kind']} {metadata.get('namespace', 'default')}/{name}"


def functions_answer(client: TestClient, manifest: dict) -> tuple[dict, list[str]]:
    """The manifest as the deployed function leaves its Pods, and what it warns about it."""
    found = pod_of(manifest)
    if found is None:
        return manifest, []
    pod, path = found
    namespace = manifest["metadata"].get("namespace", "default")
    pod_review = make_review(pod)
    pod_review["request"]["namespace"] = namespace
    answer = review_response(client, pod_review)
    patched = apply_response(pod, answer)
    if not path:
        return patched, answer.get("warnings", [])
    group, _, version = manifest["apiVersion"].rpartition("/")
    kind = {"group": group, "version": version, "kind": manifest["kind"]}
    workload_review = make_review(manifest, kind=kind)
    workload_review["request"]["namespace"] = namespace
    warnings = review_response(client, workload_review).get("warnings", [])
    return (manifest if patched == pod else with_template(manifest, path, patched)), warnings


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_each_golden_is_what_the_function_does(
    make_client: Callable[..., TestClient], backend: str, case: str
) -> None:
    client = make_client(**BACKENDS[backend])
    shown = [
        item
        for document in yaml.safe_load_all((GOLDEN / backend / f"{Path(case).stem}.yaml").open())
        for item in (document["items"] if document["kind"] == "List" else [document])
    ]
    golden_warnings = [
        line
        for line in (GOLDEN / backend / f"{Path(case).stem}.stderr").read_text().splitlines()
        if not line.startswith("Note: ")
    ]

    expected_warnings = []
    inputs = manifest_objects(MANIFESTS / case)
    assert len(shown) == len(inputs)
    for manifest, previewed in zip(inputs, shown, strict=True):
        expected, warnings = functions_answer(client, manifest)
        assert previewed == expected
        expected_warnings += [f"Warning: {reference(manifest)}: {text}" for text in warnings]
    assert golden_warnings[:-1] == expected_warnings


def test_the_goldens_cover_every_kind_and_each_backend_rewrites_differently() -> None:
    kinds = {item["kind"] for case in CASES for item in manifest_objects(MANIFESTS / case)}
    assert kinds >= {*TEMPLATE_PATHS, "Pod", "Service", "ConfigMap"}
    vllm = {
        backend: (GOLDEN / backend / "vllm-deployment.yaml").read_text() for backend in BACKENDS
    }
    assert len(set(vllm.values())) == len(BACKENDS)


def test_a_directory_is_its_files_in_order(preview: Callable[..., Ran]) -> None:
    whole = preview("-f", str(MANIFESTS))
    one_by_one = [preview("-f", str(MANIFESTS / case)) for case in CASES]

    assert whole.code == 0
    assert whole.out == "---\n".join(ran.out for ran in one_by_one)
    assert whole.warnings == [line for ran in one_by_one for line in ran.warnings]
    assert whole.err.splitlines()[-1] == (
        "17 objects: 9 sliced, 3 left unchanged (2 not sent to CastSlice), 5 passed through "
        "(no Pods); 6 warnings; resource backend"
    )


def test_json_output_is_one_list_of_every_object(preview: Callable[..., Ran]) -> None:
    as_json = preview("-f", str(MANIFESTS), "-o", "json")
    as_yaml = preview("-f", str(MANIFESTS))

    listed = json.loads(as_json.out)
    assert listed["apiVersion"] == "v1" and listed["kind"] == "List"
    assert listed["items"] == [
        item
        for document in yaml.safe_load_all(as_yaml.out)
        for item in (document["items"] if document["kind"] == "List" else [document])
    ]
    assert as_json.err == as_yaml.err


def test_stdin_and_repeated_files(preview: Callable[..., Ran]) -> None:
    vllm = MANIFESTS / "vllm-deployment.yaml"
    pod = MANIFESTS / "training-pod.json"

    from_stdin = preview("-f", "-", "-f", str(pod), stdin=vllm.read_bytes())
    from_files = preview("-f", str(vllm), "-f", str(pod))
    json_on_stdin = preview("-f", "-", stdin=pod.read_bytes())

    assert from_stdin.code == 0
    assert from_stdin.out == from_files.out
    assert json_on_stdin.out == preview("-f", str(pod)).out


def test_strict_fails_on_warnings_only(preview: Callable[..., Ran]) -> None:
    assert preview("--strict", "-f", str(MANIFESTS / "nightly-eval-cronjob.yaml")).code == 1
    assert preview("--strict", "-f", str(MANIFESTS / "vllm-deployment.yaml")).code == 0
    assert preview("-f", str(MANIFESTS / "nightly-eval-cronjob.yaml")).code == 0


POLICY = """
rules:
  - name: research shares by default
    namespaces: [research]
    optimize: true
    workloadType: dev
"""

PLAIN_DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: plain}
spec:
  selector: {matchLabels: {app: plain}}
  template:
    metadata: {labels: {app: plain}}
    spec:
      containers:
        - name: app
          image: registry.example/app:1
          resources: {limits: {nvidia.com/gpu: 1}}
"""


def test_the_namespace_decides_what_the_enrolment_policy_does(
    preview: Callable[..., Ran],
) -> None:
    enrolled = preview(
        "-f", "-", "-n", "research", stdin=PLAIN_DEPLOYMENT.encode(), CASTSLICE_POLICY=POLICY
    )
    elsewhere = preview("-f", "-", stdin=PLAIN_DEPLOYMENT.encode(), CASTSLICE_POLICY=POLICY)

    template = yaml.safe_load(enrolled.out)["spec"]["template"]
    assert template["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu-shared": "1"}
    }
    assert (
        json.loads(template["metadata"]["annotations"]["castslice.castops.io/applied"])["slices"]
        == 1
    )
    assert yaml.safe_load(elsewhere.out) == yaml.safe_load(PLAIN_DEPLOYMENT)
    assert enrolled.err.endswith(
        "1 object: 1 sliced, 0 left unchanged, 0 passed through (no Pods); 0 warnings; "
        "resource backend\n"
    )
    # Outside the enrolling rule's namespaces the API server never sends those Pods.
    assert elsewhere.err == (
        "Note: Deployment default/plain: not sent to CastSlice: its Pods: not annotated, and no "
        "rule of the enrolment policy enrols it\n"
        "1 object: 0 sliced, 1 left unchanged (1 not sent to CastSlice), 0 passed through "
        "(no Pods); 0 warnings; resource backend\n"
    )


def test_a_namespace_that_contradicts_the_object_is_refused(
    preview: Callable[..., Ran],
) -> None:
    ran = preview("-f", str(MANIFESTS / "vllm-deployment.yaml"), "-n", "default")

    assert ran.code == 2
    assert ran.out == ""
    assert (
        "vllm-deployment.yaml: document 1: the object's namespace 'inference' "
        "does not match --namespace 'default'" in ran.err
    )


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        pytest.param(
            "broken.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n   bad: indent\n",
            "broken.yaml: document 2, line 9: invalid YAML: mapping values are not allowed",
            id="invalid-yaml",
        ),
        pytest.param(
            "unterminated.yaml",
            'apiVersion: v1\nkind: ConfigMap\ndata:\n  a: "open\n',
            "unterminated.yaml: document 1, line 5: invalid YAML: while scanning a quoted scalar",
            id="unterminated-string",
        ),
        pytest.param(
            "scalars.yaml",
            "- nginx\n- redis\n",
            "scalars.yaml: document 1 is a list, not a Kubernetes object",
            id="list-of-scalars",
        ),
        pytest.param(
            "text.yaml",
            "just some words\n",
            "text.yaml: document 1 is a string, not a Kubernetes object",
            id="a-string",
        ),
        pytest.param(
            "kustomization.yaml",
            "resources:\n  - deployment.yaml\n",
            "kustomization.yaml: document 1: not a Kubernetes object, apiVersion and kind not set",
            id="no-kind",
        ),
        pytest.param(
            "items.yaml",
            "apiVersion: v1\nkind: List\nitems: [1, 2]\n",
            "items.yaml: document 1, items[0] is a number, not a Kubernetes object",
            id="list-of-numbers",
        ),
        pytest.param(
            "broken.json",
            '{"apiVersion": "v1",\n "kind": }',
            "broken.json: line 2, column 10: invalid JSON: Expecting value",
            id="invalid-json",
        ),
        pytest.param(
            "binary.yaml",
            bytes(range(256)) * 4,
            "binary.yaml: binary data, not a YAML or JSON manifest",
            id="binary",
        ),
        pytest.param(
            "latin1.yaml",
            "apiVersion: v1\nkind: ConfigMap\ndata: {a: caf\xe9}\n".encode("latin-1"),
            "latin1.yaml: not UTF-8 text (byte 44)",
            id="not-utf-8",
        ),
        pytest.param(
            "bool.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n"
            "    castops.io/optimize: yes\nspec:\n  containers: []\n",
            "bool.yaml: document 1: not a valid Pod: Expected `str`, got `bool` - at "
            '`metadata.annotations[...]`; quote such values in YAML ("true", "1")',
            id="unquoted-annotation",
        ),
        pytest.param(
            "template.yaml",
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n"
            "    spec:\n      containers: {name: a}\n",
            "template.yaml: document 1: not a valid Job: Expected `array | null`, "
            "got `object` - at `spec.template.spec.containers`",
            id="malformed-template",
        ),
        pytest.param(
            "metadata.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: vllm\nspec: {}\n",
            "metadata.yaml: document 1: not a valid Deployment: Expected `object | null`, "
            "got `str` - at `metadata`",
            id="malformed-metadata",
        ),
        pytest.param(
            "bomb.yaml",
            "apiVersion: v1\nkind: ConfigMap\n"
            + "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]\n" for n in range(1, 8)),
            "bomb.yaml: document 1: expands to more than 1000000 values (YAML aliases?)",
            id="alias-bomb",
        ),
        pytest.param(
            "deep.yaml",
            "apiVersion: v1\nkind: ConfigMap\ndata: " + "[" * 30000 + "]" * 30000 + "\n",
            "deep.yaml: document 1: nested more than 100 levels deep",
            id="deep-flow-nesting",
        ),
        pytest.param(
            "deep.json",
            '{"apiVersion": "v1", "kind": "ConfigMap", "data": ' + "[" * 500 + "]" * 500 + "}",
            "deep.json: document 1: nested more than 100 levels deep",
            id="deep-json",
        ),
    ],
)
def test_bad_input_is_named_and_exits_2(
    preview: Callable[..., Ran], tmp_path: Path, name: str, content: str | bytes, message: str
) -> None:
    path = write(tmp_path, name, content)

    ran = preview("-f", str(MANIFESTS / "vllm-deployment.yaml"), "-f", str(path))

    assert ran.code == 2
    assert ran.out == ""
    [line] = ran.err.splitlines()
    assert line.startswith(f"castslice preview: {tmp_path}/"), line
    assert message in line
    assert "Traceback" not in ran.err


def test_a_file_over_the_size_limit_is_refused(preview: Callable[..., Ran], tmp_path: Path) -> None:
    # 20 MB of a valid manifest: refused for its size, before any parsing.
    path = tmp_path / "huge.yaml"
    with path.open("w") as stream:
        stream.write("apiVersion: v1\nkind: ConfigMap\ndata:\n")
        line = "  key-{:08d}: " + "x" * 200 + "\n"
        for number in range(20 * 1024 * 1024 // len(line.format(0)) + 1):
            stream.write(line.format(number))
    assert path.stat().st_size > 2 * MAX_FILE_BYTES

    ran = preview("-f", str(path))

    assert ran.code == 2
    assert ran.err == (
        f"castslice preview: {path}: larger than 10 MiB; "
        "split it, or check that it is the manifest you meant\n"
    )


def test_missing_files_and_empty_directories_are_named(
    preview: Callable[..., Ran], tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README.md").write_text("not a manifest")

    missing = preview("-f", str(tmp_path / "nope.yaml"))
    empty = preview("-f", str(tmp_path / "empty"))

    assert (missing.code, empty.code) == (2, 2)
    assert missing.err == (
        f"castslice preview: {tmp_path}/nope.yaml: cannot read it: No such file or directory\n"
    )
    assert empty.err == (
        f"castslice preview: {tmp_path}/empty: no *.yaml, *.yml, *.json files in it\n"
    )


def test_empty_documents_pass_quietly_and_unknown_kinds_are_not_understood(
    preview: Callable[..., Ran], tmp_path: Path
) -> None:
    content = (
        "---\n# only a comment\n---\n"
        "apiVersion: example.com/v1\nkind: InferenceService\nmetadata: {name: x}\n"
        "spec:\n  template:\n    metadata:\n      annotations: {castops.io/optimize: 'true'}\n"
        "---\n"
    )
    path = write(tmp_path, "custom.yml", content)

    ran = preview("-f", str(path), "--strict")

    assert ran.code == 0
    assert yaml.safe_load(ran.out) == yaml.safe_load(content.split("---\n")[2])
    assert ran.err == (
        "1 object: 0 sliced, 0 left unchanged, 0 passed through (no Pods), "
        "1 not understood (InferenceService); 0 warnings; resource backend\n"
    )


def test_an_invalid_configuration_names_the_variable(preview: Callable[..., Ran]) -> None:
    ran = preview("-f", str(MANIFESTS / "vllm-deployment.yaml"), CASTSLICE_BACKEND="amd")

    assert ran.code == 2
    assert "CASTSLICE_BACKEND" in ran.err
    assert ran.out == ""


def test_mig_profiles_of_no_model_listed_are_refused(preview: Callable[..., Ran]) -> None:
    flags = ["--backend", "mig", "--mig-gpu-models", "H200", "--mig-profiles", "1g.10gb"]
    ran = preview("-f", str(MANIFESTS / "vllm-deployment.yaml"), *flags)
    assert "1g.10gb is a profile of no model in CASTSLICE_MIG_GPU_MODELS (H200)" in ran.err
    assert (ran.code, ran.out) == (2, "")


def test_diff_and_json_output_exclude_each_other(preview: Callable[..., Ran]) -> None:
    with pytest.raises(SystemExit) as raised:
        preview("-f", str(MANIFESTS), "--diff", "-o", "json")
    assert raised.value.code == 2


@pytest.mark.parametrize(
    "command",
    [
        pytest.param([sys.executable, "-m", "castslice"], id="python-m"),
        pytest.param([str(Path(sys.executable).parent / "castslice")], id="console-script"),
    ],
)
def test_the_command_runs_as_users_run_it(
    preview: Callable[..., Ran], command: list[str], tmp_path: Path
) -> None:
    manifest = MANIFESTS / "nightly-eval-cronjob.yaml"
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("CASTSLICE_")
    }

    done = subprocess.run(
        [*command, "preview", "-f", str(manifest), "--strict"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={**environment, "CASTSLICE_BACKEND": "gke"},
    )
    broken = subprocess.run(
        [*command, "preview", "-f", str(tmp_path / "missing.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env=environment,
    )

    in_process = preview("-f", str(manifest), CASTSLICE_BACKEND="gke")
    assert done.returncode == 1, done.stderr
    assert (done.stdout, done.stderr) == (in_process.out, in_process.err)
    assert broken.returncode == 2
    assert "missing.yaml: cannot read it" in broken.stderr
    assert "Traceback" not in broken.stderr


def test_a_flag_chooses_the_backend_over_the_environment_and_the_summary_names_it(
    tmp_path: Path,
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: ml\n"
        "  annotations: {castops.io/optimize: 'true'}\n"
        "spec:\n  containers:\n  - name: app\n    image: x\n"
        "    resources: {limits: {nvidia.com/gpu: 1}}\n"
    )

    def preview(*flags: str, **env: str) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("CASTSLICE_")}
        return subprocess.run(
            [sys.executable, "-m", "castslice", "preview", *flags, "-o", "json",
             "-f", str(manifest)],
            env={**environ, **env}, capture_output=True, text=True, check=False,
        )  # fmt: skip

    def limits(done: subprocess.CompletedProcess[str]) -> dict:
        return json.loads(done.stdout)["items"][0]["spec"]["containers"][0]["resources"]["limits"]

    default = preview()
    assert default.stderr.rstrip().endswith("; resource backend")
    assert limits(default) == {"nvidia.com/gpu-shared": "1"}
    chosen = preview("--backend", "nvidia", CASTSLICE_BACKEND="gke")
    assert chosen.stderr.rstrip().endswith("; nvidia backend")
    assert limits(chosen) == {"nvidia.com/gpu.shared": "1"}
    assert limits(preview(CASTSLICE_BACKEND="gke")) == {"nvidia.com/gpu": 1}
    wrong = preview("--slices-per-gpu", "lots")
    assert wrong.returncode == 2
    assert wrong.stderr.startswith("castslice: invalid configuration: --slices-per-gpu='lots'")


ANNOTATED_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: trainer
  annotations: {castops.io/optimize: "true"}
spec:
  containers:
    - name: main
      image: trainer
      resources: {limits: {nvidia.com/gpu: 1}}
"""


@pytest.mark.parametrize(
    ("namespace", "why"),
    [
        ("kube-system", "kube-system is a system namespace"),
        ("castslice", "castslice is CastSlice's own namespace"),
    ],
)
def test_pods_the_api_server_never_sends_are_shown_as_not_sent(
    preview: Callable[..., Ran], namespace: str, why: str
) -> None:
    kept = preview("-f", "-", "-n", namespace, stdin=ANNOTATED_POD.encode())
    sliced = preview("-f", "-", stdin=ANNOTATED_POD.encode())

    assert kept.code == 0
    assert yaml.safe_load(kept.out) == yaml.safe_load(ANNOTATED_POD)
    assert kept.err == (
        f"Note: Pod {namespace}/trainer: not sent to CastSlice: {why}\n"
        "1 object: 0 sliced, 1 left unchanged (1 not sent to CastSlice), 0 passed through "
        "(no Pods); 0 warnings; resource backend\n"
    )
    assert yaml.safe_load(sliced.out) != yaml.safe_load(ANNOTATED_POD)


REFUSED_POD = """
apiVersion: v1
kind: Pod
metadata: {name: odd, annotations: {castops.io/optimize: "true"}}
spec:
  containers:
    - name: app
      image: registry.example/app:1
      resources: RESOURCES
"""


@pytest.mark.parametrize(
    ("resources", "why"),
    [
        ("{limits: {nvidia.com/gpu: one}}", 'limits nvidia.com/gpu "one" is not a quantity'),
        ("{limits: {nvidia.com/gpu: '\u00b9'}}", 'limits nvidia.com/gpu "\\xb9" is not a quantity'),
        ("{limits: {nvidia.com/gpu: -1}}", '"-1" must be greater than or equal to 0'),
        ("{limits: {nvidia.com/gpu: '0.5'}}", '"0.5" must be an integer'),
        ("{limits: {nvidia.com/gpu: 500m}}", '"500m" must be an integer'),
        ("{requests: {nvidia.com/gpu: 1}}", "without a limit (a limit must be set)"),
        (
            "{requests: {nvidia.com/gpu: 1}, limits: {nvidia.com/gpu: 2}}",
            'requests nvidia.com/gpu "1" must equal its limit "2"',
        ),
    ],
)
def test_a_gpu_count_the_api_server_refuses_is_warned(
    preview: Callable[..., Ran], resources: str, why: str
) -> None:
    # Kubernetes v1.37.2 refuses these for an extended resource: a quantity it cannot parse
    # (decoding, before any admission), a negative or fractional count, a request without an
    # equal limit (validation.go, after mutating admission). A workload's template is
    # validated when the workload is created; a Pod, once CastSlice has rewritten it.
    pod = REFUSED_POD.replace("RESOURCES", resources)
    plain_pod = pod.replace('annotations: {castops.io/optimize: "true"}', "labels: {a: b}")
    opted_in = (
        'metadata:\n      labels: {app: plain}\n      annotations: {castops.io/optimize: "true"}'
    )
    deployment = PLAIN_DEPLOYMENT.replace("metadata: {labels: {app: plain}}", opted_in)
    deployment = deployment.replace("{limits: {nvidia.com/gpu: 1}}", resources)
    unreadable = "is not a quantity" in why
    refused = [(plain_pod, "Pod"), (deployment, "Deployment")]
    for manifest, kind in [(pod, "Pod")] * unreadable + refused:
        ran = preview("-f", "-", stdin=manifest.encode())
        assert ran.code == 0
        # (A Deployment may also carry the workload check's own warnings.)
        (warning,) = [line for line in ran.warnings if "refuse" in line]
        assert f'the API server refuses this {kind}, container "app": ' in warning
        assert why in warning and warning.endswith("castslice leaves it unchanged")
        assert yaml.safe_load(ran.out) == yaml.safe_load(manifest)
        assert "0 sliced, 1 left unchanged" in ran.err
    if not unreadable:
        # The API server calls CastSlice before it validates: the rewrite replaces the count.
        ran = preview("-f", "-", stdin=pod.encode())
        (warning,) = [line for line in ran.warnings if "refuse" in line]
        assert 'Pod default/odd: container "app": ' in warning and why in warning
        assert warning.endswith(
            ": the API server would refuse that, but castslice's rewrite replaces the count, "
            "so the Pod is admitted"
        )
        assert yaml.safe_load(ran.out)["spec"]["containers"][0]["resources"] == {
            "limits": {"nvidia.com/gpu-shared": "1"}
        } | ({"requests": {"nvidia.com/gpu-shared": "1"}} if "requests" in resources else {})


def test_every_count_the_api_server_takes_is_rewritten(preview: Callable[..., Ran]) -> None:
    for quantity in ("1", "'2'", "1e0", "1000m", "1k"):
        pod = REFUSED_POD.replace("RESOURCES", f"{{limits: {{nvidia.com/gpu: {quantity}}}}}")
        ran = preview("-f", "-", stdin=pod.encode())
        assert "1 sliced" in ran.err and "refuses" not in ran.err, quantity
        assert yaml.safe_load(ran.out)["spec"]["containers"][0]["resources"] == {
            "limits": {"nvidia.com/gpu-shared": "1"}
        }


def test_an_h200_eighth_is_stated_as_the_board_reports_it(preview: Callable[..., Ran]) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "eighth",
            "annotations": {"castops.io/optimize": "true", "castops.io/slice-ratio": "1"},
        },
        "spec": {
            "containers": [
                {"name": "app", "image": "app", "resources": {"limits": {"nvidia.com/gpu": 1}}}
            ]
        },
    }
    flags = ["--backend", "mig", "--mig-gpu-models", "H200", "--slices-per-gpu", "8"]
    ran = preview("-f", "-", *flags, "--mig-stack", "single", stdin=json.dumps(pod).encode())
    assert ran.code == 0, ran.err
    # The captured H200's 1g.18gb: 16384 MiB and 16 of its 132 SMs, as NVML reports them.
    said = "mig: the Pod gets a MIG instance, 1g.18gb: 16 GiB, 16 of 132 SMs"
    assert f"Warning: Pod default/eighth: {said}" in ran.err
    (out,) = yaml.safe_load_all(ran.out)
    record = json.loads(out["metadata"]["annotations"]["castslice.castops.io/applied"])
    assert record["instance"] == "1g.18gb: 16 GiB, 16 of 132 SMs"
    # The label the captured board's single-strategy node carries is among those selected.
    terms = out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    (expression,) = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert "NVIDIA-H200-MIG-1g.18gb" in expression["values"]
