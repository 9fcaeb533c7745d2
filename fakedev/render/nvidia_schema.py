"""What each release of the NVIDIA DRA driver publishes, as tables keyed by release and device kind.

Facts: docs/research/nvidia-releases.md (sections 1–4 and 7). One row per attribute: its name, the device kinds that
carry it in each release, and how its value is made from the device's facts. The renderer (:mod:`fakedev.render.nvidia`)
and the docs table (release × attribute) both read these rows, so the two cannot disagree.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from fakedev.model.catalog import GpuProduct
from fakedev.model.pci import Bdf
from fakedev.model.profile import NvidiaSoftware
from fakedev.model.releases import NvidiaRelease
from fakedev.render import values
from fakedev.render.types import DeviceAttribute

BRAND: Final = "Nvidia"


class NvidiaKind(StrEnum):
    """The device kinds the driver tells apart when it builds attributes (all but vfio publish type gpu or mig)."""

    GPU = "gpu"
    """A full GPU on the plain path (no DynamicMIG): capacity ``memory``."""
    GPU_DYNAMIC = "gpu-dynamic-mig"
    """A full GPU under DynamicMIG: consumes its whole counter set, capacity = the largest MIG profile's."""
    MIG_STATIC = "mig-static"
    """A pre-created MIG device (MIG mode on, fixed layout): has a MIG UUID and ``memorySlice<i>`` capacities."""
    MIG_DYNAMIC = "mig-dynamic"
    """A MIG profile at one placement, created when prepared (DynamicMIG): no UUID, consumes counters."""
    VFIO = "vfio"
    """A GPU bound to vfio-pci for passthrough (``gpu-vfio-<n>``): PCI facts only."""


ALL_KINDS: Final = frozenset(NvidiaKind)
GPU_AND_MIG: Final = frozenset(ALL_KINDS - {NvidiaKind.VFIO})
NVML_KINDS: Final = GPU_AND_MIG
"""Kinds the host's NVIDIA driver reports on through NVML (a vfio GPU is not the host driver's)."""
_NONE: Final[frozenset[NvidiaKind]] = frozenset()

PUBLISHABLE: Final[Mapping[NvidiaRelease, frozenset[NvidiaKind]]] = MappingProxyType(
    {
        NvidiaRelease.V25_8_1: frozenset({NvidiaKind.GPU, NvidiaKind.MIG_STATIC}),
        NvidiaRelease.V25_12_0: ALL_KINDS,
        NvidiaRelease.V0_4_1: ALL_KINDS,
        NvidiaRelease.MAIN: ALL_KINDS,
    }
)
"""The kinds each release can publish at all (v25.8.1 has neither DynamicMIG nor PassthroughSupport)."""


@dataclass(frozen=True, kw_only=True)
class DeviceFacts:
    """What a device's attribute values are made of: the hardware, the host driver's software, the identities."""

    kind: NvidiaKind
    product: GpuProduct
    bdf: Bdf
    pcie_root: str
    numa_node: int | None
    software: NvidiaSoftware
    uuid: str | None
    """``GPU-…`` (full GPU), ``MIG-…`` (pre-created MIG), None (dynamic MIG, vfio: see :func:`vfio_uuid`)."""
    parent_uuid: str | None = None
    profile: str | None = None


Value = Callable[[DeviceFacts], DeviceAttribute | None]
"""An attribute's value for one device; None: the driver leaves the attribute out for this device."""


@dataclass(frozen=True, kw_only=True)
class AttributeRow:
    """One attribute: which kinds carry it in which release, and its value."""

    name: str
    kinds: Mapping[NvidiaRelease, frozenset[NvidiaKind]]
    value: Value
    note: str = ""

    def on(self, *, release: NvidiaRelease, kind: NvidiaKind) -> bool:
        return kind in self.kinds.get(release, _NONE)


def _every(kinds: frozenset[NvidiaKind]) -> Mapping[NvidiaRelease, frozenset[NvidiaKind]]:
    """The same kinds in every release (limited to what each release can publish)."""
    return MappingProxyType({r: kinds & PUBLISHABLE[r] for r in NvidiaRelease})


def _per_release(
    table: Mapping[NvidiaRelease, frozenset[NvidiaKind]],
) -> Mapping[NvidiaRelease, frozenset[NvidiaKind]]:
    return MappingProxyType({r: table.get(r, _NONE) & PUBLISHABLE[r] for r in NvidiaRelease})


def vfio_uuid(bdf: Bdf) -> str:
    """The driver's vfio ``uuid``: a name-based (SHA-1) UUID of the PCI address in the DNS namespace, no prefix."""
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, bdf.render()))


_TYPE: Final[Mapping[NvidiaKind, str]] = MappingProxyType(
    {
        NvidiaKind.GPU: "gpu",
        NvidiaKind.GPU_DYNAMIC: "gpu",
        NvidiaKind.MIG_STATIC: "mig",
        NvidiaKind.MIG_DYNAMIC: "mig",
        NvidiaKind.VFIO: "vfio",
    }
)


def _type(f: DeviceFacts) -> DeviceAttribute:
    return values.string(_TYPE[f.kind])


def _uuid(f: DeviceFacts) -> DeviceAttribute | None:
    if f.kind is NvidiaKind.VFIO:
        return values.string(vfio_uuid(f.bdf))
    return values.string(f.uuid) if f.uuid is not None else None


def _optional_string(text: str | None) -> DeviceAttribute | None:
    return values.string(text) if text is not None else None


def _product_name(f: DeviceFacts) -> DeviceAttribute:
    # vfio: the host driver does not own the GPU, so the name comes from the PCI IDs database, not from NVML.
    return values.string(f.product.pci_name if f.kind is NvidiaKind.VFIO else f.product.product_name)


def _addressing_mode(f: DeviceFacts) -> DeviceAttribute | None:
    mode = f.product.addressing_mode
    return values.string(mode.value) if mode is not None else None


def _numa_or_minus_one(f: DeviceFacts) -> DeviceAttribute:
    # The bare vfio `numa` is sysfs numa_node as read, -1 when the device has no NUMA affinity.
    return values.integer(f.numa_node if f.numa_node is not None else -1)


def _standard_numa(f: DeviceFacts) -> DeviceAttribute | None:
    return values.integer(f.numa_node) if f.numa_node is not None and f.numa_node >= 0 else None


_GPU_PATHS: Final = frozenset({NvidiaKind.GPU, NvidiaKind.GPU_DYNAMIC})
_MIGS: Final = frozenset({NvidiaKind.MIG_STATIC, NvidiaKind.MIG_DYNAMIC})
_VFIO: Final = frozenset({NvidiaKind.VFIO})
_FROM_V0_4_1: Final = (NvidiaRelease.V0_4_1, NvidiaRelease.MAIN)

ATTRIBUTES: Final[tuple[AttributeRow, ...]] = (
    AttributeRow(name="type", kinds=_every(ALL_KINDS), value=_type),
    AttributeRow(
        name="uuid",
        kinds=_every(frozenset({NvidiaKind.GPU, NvidiaKind.GPU_DYNAMIC, NvidiaKind.MIG_STATIC, NvidiaKind.VFIO})),
        value=_uuid,
        note="vfio: SHA-1 name-based UUID of the PCI address; dynamic MIG has none until created",
    ),
    AttributeRow(name="parentUUID", kinds=_every(_MIGS), value=lambda f: _optional_string(f.parent_uuid)),
    AttributeRow(name="profile", kinds=_every(_MIGS), value=lambda f: _optional_string(f.profile)),
    AttributeRow(
        name="productName", kinds=_every(ALL_KINDS), value=_product_name, note="vfio: the PCI IDs database's name"
    ),
    AttributeRow(name="brand", kinds=_every(NVML_KINDS), value=lambda _f: values.string(BRAND)),
    AttributeRow(name="architecture", kinds=_every(NVML_KINDS), value=lambda f: values.string(f.product.architecture)),
    AttributeRow(
        name="cudaComputeCapability",
        kinds=_every(NVML_KINDS),
        value=lambda f: values.version(f.product.compute_capability),
    ),
    AttributeRow(
        name="driverVersion", kinds=_every(NVML_KINDS), value=lambda f: values.version(f.software.driver_version)
    ),
    AttributeRow(
        name="cudaDriverVersion",
        kinds=_every(NVML_KINDS),
        value=lambda f: values.version(f.software.cuda_driver_version),
    ),
    AttributeRow(name="deviceID", kinds=_every(_VFIO), value=lambda f: values.string(f"0x{f.product.ids.device:04x}")),
    AttributeRow(name="vendorID", kinds=_every(_VFIO), value=lambda f: values.string(f"0x{f.product.ids.vendor:04x}")),
    AttributeRow(
        name="numa",
        kinds=_per_release({NvidiaRelease.V25_12_0: _VFIO, NvidiaRelease.V0_4_1: _VFIO}),
        value=_numa_or_minus_one,
        note="replaced by resource.kubernetes.io/numaNode on main",
    ),
    AttributeRow(
        name="iommuFDEnabled",
        kinds=_per_release(dict.fromkeys(_FROM_V0_4_1, _VFIO)),
        value=lambda _f: values.boolean(value=False),  # fakedev's nodes have no /dev/iommu
    ),
    AttributeRow(
        name="pcieBusID",
        kinds=_per_release({NvidiaRelease.V25_8_1: frozenset({NvidiaKind.GPU, NvidiaKind.MIG_STATIC})}),
        value=lambda f: values.string(f.bdf.render()),
        note="the parent's on MIG devices; renamed to resource.kubernetes.io/pciBusID in v25.12.0",
    ),
    AttributeRow(
        name=values.PCI_BUS_ID,
        kinds=_per_release({r: ALL_KINDS for r in NvidiaRelease if r is not NvidiaRelease.V25_8_1}),
        value=lambda f: values.string(f.bdf.render()),
        note="the parent's on MIG devices",
    ),
    AttributeRow(
        name=values.PCIE_ROOT,
        kinds=_per_release(
            {
                NvidiaRelease.V25_8_1: frozenset({NvidiaKind.GPU, NvidiaKind.MIG_STATIC}),
                NvidiaRelease.V25_12_0: ALL_KINDS - {NvidiaKind.MIG_DYNAMIC},
                **dict.fromkeys(_FROM_V0_4_1, ALL_KINDS),
            }
        ),
        value=lambda f: values.string(f.pcie_root),
    ),
    AttributeRow(
        name="addressingMode",
        kinds=_per_release(
            {
                NvidiaRelease.V25_12_0: frozenset({NvidiaKind.GPU, NvidiaKind.MIG_STATIC}),
                **dict.fromkeys(_FROM_V0_4_1, NVML_KINDS),
            }
        ),
        value=_addressing_mode,
        note="left out where NVML does not support it",
    ),
    AttributeRow(
        name=values.NUMA_NODE,
        kinds=_per_release({NvidiaRelease.MAIN: ALL_KINDS}),
        value=_standard_numa,
        note="main only; no release publishes it",
    ),
)


def attributes(facts: DeviceFacts, *, release: NvidiaRelease) -> dict[str, DeviceAttribute]:
    """The attributes ``release`` publishes for one device, in the table's order."""
    out: dict[str, DeviceAttribute] = {}
    for row in ATTRIBUTES:
        if row.on(release=release, kind=facts.kind):
            value = row.value(facts)
            if value is not None:
                out[row.name] = value
    return out
