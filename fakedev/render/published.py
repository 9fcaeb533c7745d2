"""What the kubelet plugin needs to prepare a device, keyed by (driver, pool, device) — so it never parses names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from fakedev.model.inventory import DeviceModel
from fakedev.render.types import DeviceAttribute, DeviceCapacity, ResourceSlice

__all__ = ["DRIVERS", "DeviceModel", "DeviceRef", "PublishedDevice", "RenderedNode", "Schema"]


class Schema(StrEnum):
    """Which real driver's slice schema to imitate."""

    NVIDIA = "nvidia"
    DRANET = "dranet"
    EXAMPLE = "example"

    @property
    def driver(self) -> str:
        return DRIVERS[self]


DRIVERS: Final[Mapping[Schema, str]] = {
    Schema.NVIDIA: "gpu.nvidia.com",
    Schema.DRANET: "dra.net",
    Schema.EXAMPLE: "gpu.example.com",
}


@dataclass(frozen=True, kw_only=True, order=True)
class DeviceRef:
    """A device as an allocation result names it."""

    driver: str
    pool: str
    device: str


@dataclass(frozen=True, kw_only=True)
class PublishedDevice:
    """One published device: its attributes exactly as in the slice (for the device-metadata file) and the model."""

    ref: DeviceRef
    attributes: Mapping[str, DeviceAttribute]
    capacity: Mapping[str, DeviceCapacity]
    model: DeviceModel


@dataclass(frozen=True, kw_only=True)
class RenderedNode:
    node_name: str
    slices: tuple[ResourceSlice, ...]
    devices: Mapping[DeviceRef, PublishedDevice]

    def device(self, *, driver: str, pool: str, name: str) -> PublishedDevice:
        """The device an allocation result names; ``KeyError`` if this node never published it."""
        return self.devices[DeviceRef(driver=driver, pool=pool, device=name)]

    def slices_for(self, driver: str) -> tuple[ResourceSlice, ...]:
        return tuple(s for s in self.slices if s["spec"]["driver"] == driver)
