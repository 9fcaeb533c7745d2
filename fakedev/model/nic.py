"""NICs: the ConnectX-7 catalogue entry (PF with SR-IOV VFs), predictable interface names, link types."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from fakedev.model.pci import CLASS_ETHERNET, CLASS_INFINIBAND, Bdf, PciIds

MELLANOX_VENDOR: Final = 0x15B3
IFNAME_MAX: Final = 15  # IFNAMSIZ - 1


class LinkType(StrEnum):
    ETHERNET = "ethernet"
    INFINIBAND = "infiniband"

    @property
    def class_code(self) -> int:
        return CLASS_ETHERNET if self is LinkType.ETHERNET else CLASS_INFINIBAND

    @property
    def encapsulation(self) -> str:
        # What netlink reports as the link's encapsulation (DraNet's `encapsulation` attribute).
        return "ether" if self is LinkType.ETHERNET else "infiniband"


@dataclass(frozen=True, kw_only=True)
class NicProduct:
    key: str
    vendor_name: str  # pci.ids names, which DraNet publishes as pciVendor / pciDevice
    device_name: str
    vf_device_name: str
    device_id: int
    vf_device_id: int
    subsystem_device: int
    driver: str
    sriov_totalvfs: int  # what firmware (NUM_OF_VFS) lets the PF expose
    vf_offset: int
    vf_stride: int
    hca_type: str
    port_rate: str

    def ids(self, *, link: LinkType, vf: bool) -> PciIds:
        return PciIds(
            vendor=MELLANOX_VENDOR,
            device=self.vf_device_id if vf else self.device_id,
            subsystem_vendor=MELLANOX_VENDOR,
            subsystem_device=self.subsystem_device,
            class_code=link.class_code,
        )


CONNECTX_7: Final = NicProduct(
    key="connectx-7",
    vendor_name="Mellanox Technologies",
    device_name="MT2910 Family [ConnectX-7]",
    vf_device_name="ConnectX Family mlx5Gen Virtual Function",
    device_id=0x1021,
    vf_device_id=0x101E,
    subsystem_device=0x0040,  # illustrative: the subsystem ID differs per OEM card
    driver="mlx5_core",
    sriov_totalvfs=16,
    # ConnectX: PF 05:00.0 → VF0 05:00.2 (function 1 is the second port's PF on dual-port cards).
    vf_offset=2,
    vf_stride=1,
    hca_type="MT4129",
    port_rate="400 Gb/sec (4X NDR)",
)

NIC_PRODUCTS: Final[Mapping[str, NicProduct]] = MappingProxyType({CONNECTX_7.key: CONNECTX_7})


def pf_ifname(bdf: Bdf, *, link: LinkType) -> str:
    """systemd's path name, bus in decimal: Ethernet b7:00.0 → ``enp183s0f0np0``, InfiniBand 18:00.0 → ``ibp24s0``."""
    domain = f"P{bdf.domain}" if bdf.domain else ""
    if link is LinkType.ETHERNET:
        return f"en{domain}p{bdf.bus}s{bdf.device}f{bdf.function}np0"
    function = f"f{bdf.function}" if bdf.function else ""
    return f"ib{domain}p{bdf.bus}s{bdf.device}{function}"


def vf_ifname(pf: Bdf, *, index: int, link: LinkType) -> str:
    """A VF's name follows its PF's path plus ``v<N>`` (enp183s0f0v3)."""
    prefix = "en" if link is LinkType.ETHERNET else "ib"
    domain = f"P{pf.domain}" if pf.domain else ""
    return f"{prefix}{domain}p{pf.bus}s{pf.device}f{pf.function}v{index}"
