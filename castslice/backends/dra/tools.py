"""What the tools ask of the dra backend (castslice/backends/roles.py): its doctor checks,
its templates, the GPUs its claims hold."""

from __future__ import annotations

from collections.abc import Sequence

from castslice.backends.answers import Tools
from castslice.backends.dra import DraPlacer, devices_check, templates_check
from castslice.backends.dra.claim_templates import DraClaimTemplates
from castslice.backends.dra.gpu_view import read_device_view
from castslice.backends.roles import DEVICES, ClaimTemplates, GpuView, NodeCheck
from castslice.contract import Manifest
from castslice.contract.cluster import Cluster


class DraTools(DraPlacer, Tools):
    extender_gpus = DEVICES

    def setup_hint(self) -> str:
        return devices_check.setup_hint(self.config)

    def claim_templates(self) -> ClaimTemplates:
        return DraClaimTemplates(self.config)

    def node_checks(self) -> Sequence[NodeCheck]:
        return (
            NodeCheck(
                devices_check.CHECK,
                "get deviceclasses and list resourceslices",
                devices_check.check_devices,
            ),
            NodeCheck(
                devices_check.GUARD_CHECK,
                "list deviceclasses, resourceslices, devicetaintrules and nodes",
                devices_check.check_guard,
            ),
            NodeCheck(
                templates_check.CHECK,
                "list pods and resourceclaimtemplates",
                templates_check.check_templates,
            ),
        )

    def describe(self) -> str:
        return (
            f"backend {self.name}, device class {self.config.dra_device_class}, "
            f"capacity {self.config.dra_capacity}"
        )

    def gpu_view(self, cluster: Cluster, nodes: Sequence[Manifest]) -> GpuView:
        # The claims' allocations name the device; the nodes add nothing to that.
        return read_device_view(cluster, self.config)

    def report_rights(self) -> str:
        return "list resourceclaims and resourceslices"

    def quota_resource(self) -> str | None:
        # Claims count against `<class>.deviceclass.resource.k8s.io/devices`, not a resource.
        return None
