"""PCI addressing: bus/device/function addresses, IDs, root complexes and SR-IOV routing-ID arithmetic."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

DOMAIN_MAX: Final = 0xFFFF
BUS_MAX: Final = 0xFF
DEVICE_MAX: Final = 0x1F
FUNCTION_MAX: Final = 0x7

CLASS_3D_CONTROLLER: Final = 0x030200  # datacenter GPUs (no display engine)
CLASS_ETHERNET: Final = 0x020000
CLASS_INFINIBAND: Final = 0x020700
CLASS_PCI_BRIDGE: Final = 0x060400

_BDF_RE: Final = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")
_ROOT_RE: Final = re.compile(r"^pci([0-9a-f]{4}):([0-9a-f]{2})$")
CPU_MAX: Final = 8191
"""The highest CPU number a kernel can have (NR_CPUS is at most 8192)."""
# ASCII digits only (str.isdigit would let "²" through to int()); a few more digits than CPU_MAX has, so that a long
# number is reported as beyond CPU_MAX rather than as malformed.
_CPU_RANGE_RE: Final = re.compile(r"^([0-9]{1,12})(?:-([0-9]{1,12}))?$")


@dataclass(frozen=True, kw_only=True, order=True)
class Bdf:
    """A PCI function address; ordering follows the address, as the kernel enumerates."""

    domain: int
    bus: int
    device: int
    function: int

    def __post_init__(self) -> None:
        for name, value, limit in (
            ("domain", self.domain, DOMAIN_MAX),
            ("bus", self.bus, BUS_MAX),
            ("device", self.device, DEVICE_MAX),
            ("function", self.function, FUNCTION_MAX),
        ):
            if not 0 <= value <= limit:
                raise ValueError(f"PCI {name} {value:#x} is out of range 0..{limit:#x}")

    @classmethod
    def parse(cls, text: str) -> Bdf:
        """Parse ``0000:53:00.0`` (lowercase, 4-digit domain, the form sysfs and DRA attributes use)."""
        match = _BDF_RE.match(text)
        if match is None:
            raise ValueError(f"{text!r} is not a PCI address of the form 0000:53:00.0 (lowercase hex)")
        domain, bus, device, function = (int(part, 16) for part in match.groups())
        return cls(domain=domain, bus=bus, device=device, function=function)

    @property
    def devfn(self) -> int:
        return (self.device << 3) | self.function

    @property
    def routing_id(self) -> int:
        """Bus and devfn as one 16-bit number, the unit SR-IOV offsets and strides are counted in."""
        return (self.bus << 8) | self.devfn

    @classmethod
    def from_routing_id(cls, *, domain: int, routing_id: int) -> Bdf:
        if not 0 <= routing_id <= 0xFFFF:
            raise ValueError(f"routing ID {routing_id:#x} is beyond the last bus of the domain")
        devfn = routing_id & 0xFF
        return cls(domain=domain, bus=routing_id >> 8, device=devfn >> 3, function=devfn & 0x7)

    def render(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function:x}"

    def __str__(self) -> str:
        return self.render()


@dataclass(frozen=True, kw_only=True)
class PciIds:
    """What ``vendor``, ``device``, ``subsystem_*`` and ``class`` say in sysfs."""

    vendor: int
    device: int
    subsystem_vendor: int
    subsystem_device: int
    class_code: int

    @property
    def class_text(self) -> str:
        return f"0x{self.class_code:06x}"


@dataclass(frozen=True, kw_only=True, order=True)
class PcieRoot:
    """A PCI host bridge (root complex); its name is the ``resource.kubernetes.io/pcieRoot`` value."""

    domain: int
    bus: int
    numa_node: int | None = None

    @classmethod
    def parse(cls, text: str, *, numa_node: int | None = None) -> PcieRoot:
        match = _ROOT_RE.match(text)
        if match is None:
            raise ValueError(f"{text!r} is not a PCIe root of the form pci0000:00 (lowercase hex)")
        return cls(domain=int(match.group(1), 16), bus=int(match.group(2), 16), numa_node=numa_node)

    @property
    def name(self) -> str:
        # The first component under /sys/devices of every function below this host bridge.
        return f"pci{self.domain:04x}:{self.bus:02x}"

    @property
    def root_port(self) -> Bdf:
        """The one root port the fake topology hangs every endpoint below (real hosts add switches here)."""
        return Bdf(domain=self.domain, bus=self.bus, device=1, function=0)


def sriov_vf_address(pf: Bdf, *, offset: int, stride: int, index: int) -> Bdf:
    """VF ``index`` of ``pf``: routing ID + First VF Offset + VF Stride × index (PCIe SR-IOV spec 3.3.9/3.3.10)."""
    return Bdf.from_routing_id(domain=pf.domain, routing_id=pf.routing_id + offset + stride * index)


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Expand a kernel cpulist (``0-3,8,10-11``) into CPU numbers; raises ValueError on malformed input.

    Bounds are checked before a range is expanded, so ``0-400000000`` costs nothing: CPU numbers stop at
    :data:`CPU_MAX` and no CPU may appear twice, which caps the result at ``CPU_MAX + 1`` numbers.
    """
    cpus: list[int] = []
    seen: set[int] = set()
    for part in text.split(","):
        match = _CPU_RANGE_RE.match(part.strip())
        if match is None:
            raise ValueError(f"{text!r} is not a cpulist such as 0-55,112-167")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if first > last:
            raise ValueError(f"{text!r} is not a cpulist such as 0-55,112-167")
        if last > CPU_MAX:
            raise ValueError(f"cpulist {text!r} names CPU {last}; CPU numbers stop at {CPU_MAX} (the kernel's NR_CPUS)")
        for cpu in range(first, last + 1):
            if cpu in seen:
                raise ValueError(f"cpulist {text!r} names a CPU twice")
            seen.add(cpu)
            cpus.append(cpu)
    return tuple(cpus)
