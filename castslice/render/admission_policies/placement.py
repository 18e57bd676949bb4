"""CEL for a backend's placement: what each GPU container gets for `variables.slices`.

The values (resource names, node labels, strategy spellings) are the backend's
own answers, asked at render time; only the arithmetic choosing between them
(the sharing degree, whole GPUs) is written again in CEL.
"""

from __future__ import annotations

from collections.abc import Mapping

from castslice.backends import Placement
from castslice.backends.tools import policy_pools_for
from castslice.contract.definitions import json_string
from castslice.decision.slices import share_text
from castslice.render import cel
from castslice.render.cel import Expr, literal, string, variable
from castslice.settings.config import Config

Variables = list[tuple[str, Expr]]


class PlacementCel:
    """The policy variables `quantity`, `selector`, `share`, `instance`, `instanceMember` (and
    `degree`, `wholeGpus`).

    `renamed()` is the CEL condition under which containers get `resource`
    instead of keeping the GPU resource with a new count.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.backend = policy_pools_for(config)
        self.gpu = config.gpu_resource
        self.placement_keys = self.backend.placement_keys
        pools = self.backend.sharing_pools()
        self.counts_slices = pools is None
        self.sharing: dict[int, Placement] = dict(pools or {})
        self.whole = self.backend.place(config.slices_per_gpu)
        self.resource = self._one_value(
            {p.resource for p in self.sharing.values()} or {self.backend.shared_resource}
        )
        if self.counts_slices and any(
            self.backend.notes(self.backend.place(slices))
            for slices in range(1, config.slices_per_gpu + 1)
        ):
            raise ValueError(
                f"backend {self.backend.name}: policy mode states what a Pod gets only for "
                "the placements of sharing pools"
            )
        for placement in [*self.sharing.values(), self.whole]:
            if self.backend.notes(placement) and not placement.instance:
                # may_warn finds the Pods with notes by the record's `instance`.
                raise ValueError(
                    f"backend {self.backend.name}: policy mode warns only of what the "
                    "decision record states"
                )

    def renamed(self) -> Expr:
        if self.counts_slices:
            return "true"
        renames = self.resource != self.gpu and bool(self.sharing)
        if self.whole.resource != self.gpu:
            raise ValueError(f"backend {self.backend.name}: whole GPUs must keep {self.gpu}")
        return f"{variable('degree')} > 0" if renames else "false"

    def variables(self) -> Variables:
        slices = variable("slices")
        per_gpu = self.config.slices_per_gpu
        if self.counts_slices:
            return [
                ("quantity", f"string({slices})"),
                ("selector", "{}"),
                ("absentLabels", literal(list(self.whole.absent_node_labels))),
                ("share", fraction_share(slices, per_gpu)),
                ("instance", string("")),
                ("instanceMember", string("")),
            ]
        degree, whole = variable("degree"), variable("wholeGpus")
        selectors = {d: dict(p.node_selector) for d, p in self.sharing.items()}
        quantity = self._one_value({str(p.quantity) for p in self.sharing.values()} or {"1"})
        shares = {d: share_text(p.gpus) for d, p in self.sharing.items()}
        whole_selector = literal(dict(self.whole.node_selector))
        return [
            self.degree(),
            ("wholeGpus", f"({slices} + {per_gpu - 1}) / {per_gpu}"),
            ("quantity", cel.if_else(f"{degree} > 0", string(quantity), f"string({whole})")),
            (
                "selector",
                cel.if_else(f"{degree} > 0", f"{_int_keyed(selectors)}[{degree}]", whole_selector),
            ),
            (
                # Node labels the Pod's node must not carry (GKE: whole GPUs off sharing nodes).
                "absentLabels",
                cel.if_else(
                    f"{degree} > 0",
                    literal(list(self._one_absent(list(self.sharing.values())))),
                    literal(list(self.whole.absent_node_labels)),
                ),
            ),
            (
                "share",
                cel.if_else(f"{degree} > 0", f"{_int_keyed(shares)}[{degree}]", whole_share(whole)),
            ),
            self.instance(),
            (
                "instanceMember",
                self._by_degree(
                    {d: _record_member(p.instance) for d, p in self.sharing.items()},
                    _record_member(self.whole.instance),
                ),
            ),
        ]

    def degree(self) -> tuple[str, Expr]:
        """The variable `degree`: the largest offered degree M with M <= floor(S / s); 0 means
        whole GPUs."""
        slices, per_gpu = variable("slices"), self.config.slices_per_gpu
        degrees = literal(sorted(self.config.sharing_degrees, reverse=True))
        return (
            "degree",
            cel.if_else(
                f"{slices} < {per_gpu}",
                f"{degrees}.filter(d, d <= {per_gpu} / {slices})[?0].orValue(0)",
                "0",
            ),
        )

    def instance(self) -> tuple[str, Expr]:
        """The variable `instance`: what the Pod really gets (Placement.instance), "" when the
        share says it all. Needs `degree` on sharing backends."""
        if self.counts_slices:
            return ("instance", string(""))
        return (
            "instance",
            self._by_degree(
                {d: p.instance or "" for d, p in self.sharing.items()}, self.whole.instance or ""
            ),
        )

    def notes(self) -> Expr:
        """CEL list of the backend's warnings on the placement (Backend.notes), in order."""
        if self.counts_slices:
            return "[]"
        return self._by_degree(
            {d: list(self.backend.notes(p)) for d, p in self.sharing.items()},
            list(self.backend.notes(self.whole)),
        )

    def states_instance(self) -> bool:
        """Whether some placement states what the Pod really gets (a sharing pool's)."""
        return any(p.instance for p in [*self.sharing.values(), self.whole])

    def has_notes(self) -> bool:
        return any(self.backend.notes(p) for p in [*self.sharing.values(), self.whole])

    def _by_degree(self, values: Mapping[int, object], whole: object) -> Expr:
        degree = variable("degree")
        if all(value == whole for value in values.values()):
            return literal(whole)
        return cel.if_else(f"{degree} > 0", f"{_int_keyed(values)}[{degree}]", literal(whole))

    def gives_less(self, asked: Expr) -> Expr:
        """CEL: the share is less than `asked` GPUs (`asked`: ASCII digits, no leading zero)."""
        if self.counts_slices:
            # More digits than the largest slice count: the ask exceeds any share.
            digits = len(str(self.config.max_slice_ratio))
            return cel.any_of(
                [
                    f"size({asked}) > {digits}",
                    f"{variable('slices')} < int({asked}) * {self.config.slices_per_gpu}",
                ]
            )
        # Every sharing placement is under one GPU, so below any ask of 2 or more.
        return cel.any_of(
            [
                f"{variable('degree')} > 0",
                f"size({asked}) > 18",
                f"{variable('wholeGpus')} < int({asked})",
            ]
        )

    def _one_absent(self, placements: list[Placement]) -> tuple[str, ...]:
        """The absent node labels all sharing placements share (none when there are none)."""
        values = {p.absent_node_labels for p in placements} or {()}
        if len(values) != 1:
            raise ValueError(
                f"backend {self.backend.name}: policy mode needs the same absent node labels "
                f"for every sharing degree, got {sorted(values)}"
            )
        return next(iter(values))

    def _one_value(self, values: set[str]) -> str:
        if len(values) != 1:
            raise ValueError(
                f"backend {self.backend.name}: policy mode needs one shared resource and "
                f"quantity for every sharing degree, got {sorted(values)}"
            )
        return next(iter(values))


def fraction_share(slices: Expr, per_gpu: int) -> Expr:
    """CEL for the text of Fraction(slices, per_gpu) of a GPU, in lowest terms."""
    divisors = [d for d in range(per_gpu, 0, -1) if per_gpu % d == 0]
    common = f"{literal(divisors)}.filter(d, {slices} % d == 0)[0]"
    return cel.let(
        "g",
        common,
        cel.if_else(
            f"g == {per_gpu}",
            whole_share(f"({slices} / g)"),
            f"string({slices} / g) + {string('/')} + string({per_gpu} / g) + {string(' of a GPU')}",
        ),
    )


def whole_share(gpus: Expr) -> Expr:
    """CEL for the text of `gpus` whole GPUs."""
    plural = cel.if_else(f"{gpus} > 1", string("s"), string(""))
    return f"string({gpus}) + {string(' GPU')} + {plural}"


def _record_member(instance: str | None) -> str:
    """The decision record's `instance` member as DecisionRecord.encode() writes it after
    `original`, or "" when it is left out."""
    if instance is None:
        return ""
    return f",{json_string('instance')}:{json_string(instance)}"


def _int_keyed(table: Mapping[int, object]) -> Expr:
    # Empty when no degree can be chosen: `degree` is then always 0 and never looked up.
    return "{" + ", ".join(f"{key}: {literal(value)}" for key, value in table.items()) + "}"
