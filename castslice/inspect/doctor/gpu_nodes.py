"""Check: the GPU nodes are set up the way the backend places Pods.

Two mistakes leave Pods Pending that would have run without CastSlice: no
node without GPU sharing, where the backend sends whole-GPU Pods, and nodes
that share GPUs in a way the backend cannot use (the backend says which).
"""

from __future__ import annotations

from collections.abc import Sequence

from castslice.backends import Placement
from castslice.backends.roles import NodeChecks
from castslice.backends.tools import node_checks_for
from castslice.contract import Manifest
from castslice.contract.cluster import Cluster
from castslice.contract.findings import Result, failed, passed
from castslice.inspect.doctor.capacity import is_usable, serves
from castslice.settings.config import Config

CHECK = "gpu-nodes"
# Enough names to find the nodes; the count says how many there are.
_NAMES_SHOWN = 3


def check_gpu_nodes(cluster: Cluster, config: Config) -> Result:
    return assess(config, list(cluster.list("/api/v1/nodes")))


def assess(config: Config, nodes: Sequence[Manifest]) -> Result:
    backend = node_checks_for(config)
    usable = [node for node in nodes if is_usable(node)]
    problems: list[str] = []
    fixes: list[str] = []
    found: list[str] = []

    whole = backend.place(config.slices_per_gpu)
    smallest = smallest_whole_gpu_share(config, backend)
    stuck = whole_gpu_pods(config, smallest)
    if backend.whole_gpu_nodes_fix:
        serving = [node for node in usable if serves(backend, node, whole)]
        if serving:
            verb = "offers" if len(serving) == 1 else "offer"
            found.append(f"{_plural(len(serving), 'node')} {verb} {_describe(whole)} for {stuck}")
        else:
            problems.append(f"no Ready node offers {_describe(whole)}: {stuck} stay Pending")
            fixes.append(backend.whole_gpu_nodes_fix)
    else:
        found.append(f"whole-GPU Pods ask for {whole.resource} like the others")

    misconfigured = _misconfigured(backend, usable)
    if misconfigured:
        problems.append(misconfigured)
        fixes.append(backend.node_setup_fix)

    if problems:
        return failed(CHECK, "GPU nodes: " + "; ".join(problems), "; ".join(fixes))
    return passed(CHECK, "GPU nodes: " + "; ".join(found))


def smallest_whole_gpu_share(config: Config, backend: NodeChecks) -> int:
    """The fewest slices placed as one whole GPU is: larger shares fit fewer clients per GPU
    (or, with MIG, larger instances)."""
    whole = backend.place(config.slices_per_gpu)
    return next(
        slices for slices in range(1, config.slices_per_gpu + 1) if backend.place(slices) == whole
    )


def whole_gpu_pods(config: Config, smallest: int) -> str:
    """Which Pods get whole GPUs, by slice count and by the presets and default behind them."""
    presets = [
        name
        for name, slices in sorted(config.presets.items(), key=lambda item: (-item[1], item[0]))
        if slices >= smallest
    ]
    sources = [f"preset{'s' if len(presets) > 1 else ''} {', '.join(presets)}"] if presets else []
    if config.default_slices >= smallest:
        sources.append(f"the default of {_plural(config.default_slices, 'slice')}")
    pods = f"Pods of {_plural(smallest, 'slice')} or more"
    return f"{pods} ({'; '.join(sources)})" if sources else pods


def _misconfigured(backend: NodeChecks, nodes: Sequence[Manifest]) -> str:
    found: dict[str, list[str]] = {}
    for node in nodes:
        problem = backend.node_setup_problem(node)
        if problem:
            found.setdefault(problem, []).append(node["metadata"]["name"])
    parts = []
    for problem, names in found.items():
        more = " …" if len(names) > _NAMES_SHOWN else ""
        shown = ", ".join(sorted(names)[:_NAMES_SHOWN]) + more
        parts.append(f"{_plural(len(names), 'node')} ({shown}) with {problem}")
    if not parts:
        return ""
    stuck = f"shared Pods the {backend.name} backend selects them for stay Pending"
    return "; ".join(parts) + "; " + stuck


def _describe(placement: Placement) -> str:
    conditions = [f"{key}={value}" for key, value in sorted(placement.node_selector.items())]
    conditions += [f"no {key} label" for key in placement.absent_node_labels]
    offer = f"{placement.resource} without GPU sharing"
    return f"{offer} ({', '.join(conditions)})" if conditions else offer


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
