"""The FGD port's arithmetic against the paper's simulator's own functions, which
`artefact_draw frag` runs (bench/packing/artefact_draw/frag.go, copied from the
simulator at 8f3d641 with their statements unchanged)."""

from __future__ import annotations

import random

from bench.packing.fgd_arithmetic import SimulatorFragmentation, gpu_type
from bench.packing.offline import place_fgd, shape_of
from bench.packing.trace import (
    MILLI,
    read_nodes,
    read_tasks,
    run_artefact_draw,
    sample_nodes,
    task_list,
    workload,
)
from castslice.extender.fragmentation import NodeFree, PodShape


def _simulated(shapes: list[PodShape], nodes: list[NodeFree]) -> tuple[list[str], list[float]]:
    """The simulator's typical Pods (one line each) and each node's fragmentation."""
    lines = [f"pods {len(shapes)}"]
    lines += [f"{s.cpu_milli} {s.gpu_milli} {s.gpus} {gpu_type(s) or '-'}" for s in shapes]
    lines.append(f"nodes {len(nodes)}")
    lines += [
        f"{node.cpu_milli} {node.model or '-'} {','.join(map(str, node.gpu_milli)) or '-'}"
        for node in nodes
    ]
    typical, fragmentations = run_artefact_draw(["frag"], "\n".join(lines) + "\n").split("nodes\n")
    return typical.splitlines(), [float(line) for line in fragmentations.split()]


def _nodes_in_every_state() -> list[NodeFree]:
    """The one-in-20 sample of the trace's nodes as FGD leaves them, and each trace node's
    shape with its CPU and GPUs drawn part-used at random (free, taken or shared)."""
    source = task_list("gpuspec10")
    sample = sample_nodes(read_nodes(), 20)
    arrived = workload(read_tasks(source), sum(n.gpus for n in sample), 43, "shuffled")
    left = [free for _, free in place_fgd(sample, arrived, read_tasks(source), 43).left]
    draw = random.Random(7)
    drawn = [
        NodeFree(
            draw.randrange(node.cpu_milli + 1),
            tuple(draw.choice((0, MILLI, draw.randrange(MILLI))) for _ in range(node.gpus)),
            node.model,
            node.memory_mib,
        )
        for node in read_nodes()
    ]
    return left + drawn


def test_the_fgd_port_computes_what_the_simulator_computes_float_for_float() -> None:
    """The typical Pods (their order and frequencies) and every node's fragmentation are
    the simulator's to the last bit: FGD truncates its score, so a rounding of one unit in
    the last place turns a node's 50 into 49 and sends a Pod elsewhere."""
    tasks = read_tasks(task_list("gpuspec10"))
    shapes = [shape_of(task, memory=False) for task in tasks]
    port = SimulatorFragmentation(shapes)
    nodes = _nodes_in_every_state()
    typical, fragmentations = _simulated(shapes, nodes)

    assert [
        (f"{pod.cpu_milli} {pod.gpu_milli} {pod.gpus} {gpu_type(pod) or '-'}", frequency)
        for pod, frequency in port.typical
    ] == [(line.rsplit(" ", 1)[0], float(line.rsplit(" ", 1)[1])) for line in typical]
    assert any(pod.models for pod, _ in port.typical)  # pinned shapes among them
    assert [port.fragmentation(node) for node in nodes] == fragmentations
    assert len(set(fragmentations)) > 100
