"""One preparer per device kind, chosen from a table by the model's ``kind`` (never by its class).

The table pairs each :class:`~fakedev.model.inventory.DeviceKind` with the preparer written for that kind's model
class; the prepare plan (:mod:`fakedev.driver.plan`) asks it everything that differs between kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from fakedev.driver.preparers.base import DevicePreparer, EditsInput, MdevRequest, StatusCondition, StatusExtras
from fakedev.driver.preparers.example import ExampleGpuPreparer
from fakedev.driver.preparers.nic import NicPfPreparer, NicVfPreparer, VirtualNicPreparer
from fakedev.driver.preparers.nvidia import GpuPreparer, MigPreparer, PassthroughPreparer, VgpuPreparer
from fakedev.model.inventory import DeviceKind, DeviceModel

__all__ = [
    "PREPARERS",
    "DevicePreparer",
    "EditsInput",
    "MdevRequest",
    "StatusCondition",
    "StatusExtras",
    "preparer_for",
]

PREPARERS: Final[Mapping[DeviceKind, DevicePreparer[Any]]] = {
    DeviceKind.GPU: GpuPreparer(),
    DeviceKind.MIG: MigPreparer(),
    DeviceKind.VGPU: VgpuPreparer(),
    DeviceKind.PASSTHROUGH_GPU: PassthroughPreparer(),
    DeviceKind.NIC_PF: NicPfPreparer(),
    DeviceKind.NIC_VF: NicVfPreparer(),
    DeviceKind.VIRTUAL_NIC: VirtualNicPreparer(),
    DeviceKind.EXAMPLE_GPU: ExampleGpuPreparer(),
}


def preparer_for(model: DeviceModel) -> DevicePreparer[Any]:
    return PREPARERS[model.kind]
