"""What the kubelet plugin needs to prepare a device, keyed by (driver, pool, device) — so it never parses names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from fakedev.model.inventory import DeviceModel
from fakedev.model.releases import SchemaPin, known_pins, parse_schema_pin
from fakedev.render.types import DeviceAttribute, DeviceCapacity, ResourceSlice

__all__ = [
    "DRIVERS",
    "DeviceModel",
    "DeviceRef",
    "PublishedDevice",
    "RenderedNode",
    "Schema",
    "SchemaPin",
    "parse_schema",
    "schema_choices",
]


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


def parse_schema(text: str) -> tuple[Schema, SchemaPin]:
    """``nvidia``, ``nvidia@v25.12.0``, ``dranet@main``, ``example``: the schema and the pin (``ProfileError``)."""
    pin = parse_schema_pin(text, schemas=tuple(s.value for s in Schema))
    return Schema(pin.schema), pin


def schema_choices() -> str:
    """What ``--schema`` accepts, for help texts."""
    return ", ".join(known_pins(tuple(s.value for s in Schema)))


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
