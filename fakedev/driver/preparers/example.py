"""The dra-example-driver's GPUs (``gpu.example.com``): environment variables only, no device nodes."""

from __future__ import annotations

import cdi
from fakedev.driver import cdi_edits
from fakedev.driver.preparers.base import DevicePreparer, EditsInput, StatusCondition, StatusExtras
from fakedev.model.inventory import ExampleGpu
from fakedev.nics.plan import PreparedNic
from fakedev.render.example import FABRIC_ATTACHED


class ExampleGpuPreparer(DevicePreparer[ExampleGpu]):
    def container_edits(self, model: ExampleGpu, *, use: EditsInput) -> cdi.ContainerEdits:
        # The dra-example-driver's contract: GPU_DEVICE_<n>=<device name>, plus sharing settings per device.
        prefix = f"GPU_DEVICE_{model.index}"
        env = [
            f"{prefix}={use.device}",
            f"{prefix}_UUID={model.uuid}",
            *cdi_edits.render_sharing_env(f"{prefix}_", use.config),
            *cdi_edits.render_config_env(use.config),
        ]
        return cdi.ContainerEdits(env=tuple(env))

    def status_extras(self, model: ExampleGpu, *, device: str, nic: PreparedNic | None, now: str) -> StatusExtras:
        if model.fabric_attach != "ready":
            return StatusExtras()
        # The binding verdict stays in the entry the driver owns (server-side apply replaces the entry's list).
        attached: StatusCondition = {
            "type": FABRIC_ATTACHED,
            "status": "True",
            "reason": "Attached",
            "lastTransitionTime": now,
            "message": f"{device} attached to the node through the fabric",
        }
        return StatusExtras(before_ready=(attached,))
