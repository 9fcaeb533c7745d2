"""Which netdevs a node's NICs become (pure): one port per Ethernet NIC function, in inventory order."""

from __future__ import annotations

from dataclasses import dataclass

from fakedev.model.inventory import DeviceModel, NodeInventory, is_nic
from fakedev.model.nic import LinkType


@dataclass(frozen=True, kw_only=True)
class NicPort:
    ifname: str
    """The NIC's name in the node's namespace (as the model names it: enp84s0f0np0, …)."""
    mac: str
    mtu: int
    port: str
    """The veth peer's name on the fabric bridge: p<index>, at most 15 characters."""


def compute_ports(inventory: NodeInventory) -> list[NicPort]:
    """Ethernet PFs, their VFs and virtual NICs; InfiniBand functions cannot be a veth and are left out."""
    ports: list[NicPort] = []

    def add(ifname: str, mac: str, mtu: int) -> None:
        ports.append(NicPort(ifname=ifname, mac=mac, mtu=mtu, port=f"p{len(ports)}"))

    for pf in inventory.nics:
        if pf.link != LinkType.ETHERNET:
            continue
        add(pf.ifname, pf.mac, pf.mtu)
        for vf in pf.vfs:
            add(vf.ifname, vf.mac, pf.mtu)
    for v in inventory.virtual_nics:
        add(v.ifname, v.mac, v.mtu)
    return ports


def ifname_of(model: DeviceModel) -> str | None:
    """The node-side interface name of a NIC model object, or None for anything that is not a NIC."""
    return model.ifname if is_nic(model) else None
