"""The report as a table of at most 100 columns: each GPU with who holds it, then the saving
by namespace and workload, then the Pending Pods with the scheduler's message."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

from castslice.backends.placer import GPU_MEMORY
from castslice.inspect.report import Gpu, Report, Saving, share_text

WIDTH = 100
NOT_VISIBLE = "GPU not visible; node only"
NOT_OPTED_IN = "(did not opt in)"
NOT_SELECTED = "(not selected)"
_POD, _OWNER, _SLICES, _SHARE = 50, 30, 6, 8
_LABEL, _NUMBER = 56, 10


def render(report: Report, header: str) -> str:
    return "\n".join(lines(report, header)) + "\n"


def lines(report: Report, header: str) -> Iterator[str]:
    yield from _wrap(header)
    if not report.gpus and not report.pending:
        yield "no Pod CastSlice rewrote is on a node or waiting for one"
        return
    for gpu in report.gpus:
        yield ""
        yield from _wrap(_gpu_title(gpu))
        if gpu.memory_requested or gpu.memory_limits:
            yield from _wrap("  " + _memory_line(gpu), indent="    ")
        yield "  " + _row("POD", "OWNER", "SLICES", "SHARE")
        for holder in gpu.holders:
            if holder.slices is None:
                note = NOT_OPTED_IN
            elif not holder.counted:
                note = NOT_SELECTED
            else:
                note = ""
            name = f"{holder.namespace}/{holder.pod}"
            if note:
                name = f"{_fit(name, _POD - len(note) - 1)} {note}"
            slices = "-" if holder.slices is None else str(holder.slices)
            yield "  " + _row(name, holder.owner or "-", slices, share_text(holder.share))
            if holder.memory:
                yield from textwrap.wrap(
                    holder.memory, WIDTH, initial_indent="    ", subsequent_indent="    "
                )
    yield ""
    yield _savings_row("SAVING (GPUs)", "ASKED", "OCCUPIED", "SAVED", "PENDING")
    yield _savings_row("all", *_numbers(report.total))
    for namespace, saving in report.namespaces.items():
        yield _savings_row(f"namespace {namespace}", *_numbers(saving))
        for (owner_namespace, owner), by_owner in report.owners.items():
            if owner_namespace == namespace:
                yield _savings_row(f"  {owner or 'Pods of their own'}", *_numbers(by_owner))
    if report.unfound:
        yield ""
        yield from _wrap(
            "GPU not found on their node (occupied counted as asked): " + ", ".join(report.unfound)
        )
    if report.pending:
        yield ""
        yield "PENDING"
        for waiting in report.pending:
            slices = f"{waiting.slices} slice{'s' if waiting.slices != 1 else ''}"
            owner = f"{waiting.owner}, " if waiting.owner else ""
            yield from _wrap(
                f"{waiting.namespace}/{waiting.pod} ({owner}{slices}, asked {waiting.asked} "
                f"GPU{'s' if waiting.asked != 1 else ''}): {waiting.reason}",
                indent="    ",
            )


def _gpu_title(gpu: Gpu) -> str:
    place = gpu.place
    where = f"GPU {place.device}" if place.device is not None else NOT_VISIBLE
    size = "" if place.device is not None else f", {place.gpus} GPU{'s' if place.gpus != 1 else ''}"
    return f"node {place.node}: {where}{size}, {gpu.free}/{place.units} {place.unit} free"


def _memory_line(gpu: Gpu) -> str:
    """What the holders ask the driver for of the GPUs' memory, and who may burst beyond it."""
    requested, total = gpu.memory_requested, gpu.memory
    gpus = gpu.place.gpus
    if total is None:
        line = f"GPU memory: {requested} MiB requested (no {GPU_MEMORY} label on the node)"
    elif gpu.memory_over:
        line = (
            f"GPU memory OVER: {requested} MiB requested, above the {total} MiB "
            f"{'its GPU has' if gpus == 1 else f'its {gpus} GPUs have'} (values set by hand, "
            "or CASTSLICE_GPU_MEMORY above this node's GPUs)"
        )
    else:
        of = f"{total} MiB" if gpus == 1 else f"{gpus} GPUs' {total} MiB"
        line = f"GPU memory: {requested} of {of} requested"
    bursting = [holder for holder in gpu.holders if holder.bursts]
    if bursting:
        line += (
            f"; {len(bursting)} Pod{'s' if len(bursting) != 1 else ''} may burst, limits "
            f"{gpu.memory_limits} MiB in all"
        )
    return line


def _numbers(saving: Saving) -> tuple[str, str, str, str]:
    return str(saving.asked), str(saving.occupied), str(saving.saved), str(saving.pending)


def _row(pod: str, owner: str, slices: str, share: str) -> str:
    return (
        f"{_fit(pod, _POD):<{_POD}} {_fit(owner, _OWNER):<{_OWNER}} "
        f"{slices:>{_SLICES}} {share:>{_SHARE}}"
    ).rstrip()


def _savings_row(label: str, *numbers: str) -> str:
    return f"{_fit(label, _LABEL):<{_LABEL}}" + "".join(f"{n:>{_NUMBER}}" for n in numbers)


def _wrap(text: str, indent: str = "  ") -> list[str]:
    # Never inside a name: resource and Pod names have hyphens.
    return textwrap.wrap(text, WIDTH, subsequent_indent=indent, break_on_hyphens=False)


def _fit(text: str, width: int) -> str:
    """`text` cut to `width` characters, the cut marked, so a column never overflows."""
    return text if len(text) <= width else text[: width - 3] + "..."
