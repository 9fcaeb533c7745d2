"""What an emulated node does with a pod whose claims it prepared."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class PodMode(StrEnum):
    """What the emulator does with a pod whose claims it prepared."""

    CONTAINERS = "containers"
    """Run its containers under runc in a network namespace of its own, with the CDI edits applied."""
    STATUS = "status"
    """Only mark it Running (no runc, rootfs, sandbox or container): for scale runs whose point is the control plane.
    Claims are still prepared and unprepared through the driver, and health still reaches the pod's status."""


STATUS_RUNTIME: Final = "fakedev://status-only"
"""``containerRuntimeVersion`` of a node in status mode (the kubelet's ``<runtime>://<version>``): nothing runs."""
