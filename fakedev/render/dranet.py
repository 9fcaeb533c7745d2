"""The ``dra.net`` schema of the DraNet driver: one device per PCI netdev (PF or VF) and per virtual interface.

Each DraNet release renders exactly its own attributes (``inventory.profile.releases.dranet``; facts in
docs/research/dranet-releases.md). The interfaces' addresses are live facts of the node, not of the hardware model:
the plugin reads them over netlink and passes them in (``addresses``), the way it passes taints.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from fakedev.model.inventory import NicPf, NicVf, NodeInventory, PciFunction, VirtualNic
from fakedev.model.nic import LinkType
from fakedev.model.releases import DranetRelease
from fakedev.render import names, values
from fakedev.render.limits import MAX_STRING
from fakedev.render.pool import PoolPlan
from fakedev.render.published import DeviceRef, PublishedDevice, Schema
from fakedev.render.types import Device, DeviceAttribute, DeviceTaint

DRIVER: Final = Schema.DRANET.driver
_P: Final = "dra.net/"
IPV4: Final = _P + "ipv4"
IPV6: Final = _P + "ipv6"

NO_ADDRESSES: Final[Mapping[str, Sequence[str]]] = MappingProxyType({})


@dataclass(frozen=True, kw_only=True)
class DranetRules:
    """What one DraNet release publishes beyond what every release has."""

    standard_numa_node: bool
    """``resource.kubernetes.io/numaNode`` (int) on PCI devices with NUMA affinity."""
    rdma_device_on_netdevs: bool
    """``dra.net/rdmaDevice`` on RDMA NICs that have a netdev (RoCE, IPoIB); every release has it on netdev-less
    RDMA devices, which fakedev's model does not make (an InfiniBand port is an IPoIB netdev, DraNet's default)."""


RULES: Final[Mapping[DranetRelease, DranetRules]] = MappingProxyType(
    {
        DranetRelease.V1_4_0: DranetRules(standard_numa_node=False, rdma_device_on_netdevs=False),
        DranetRelease.MAIN: DranetRules(standard_numa_node=True, rdma_device_on_netdevs=True),
    }
)


def plan_dranet(
    inventory: NodeInventory,
    *,
    taints: Mapping[str, Sequence[DeviceTaint]],
    addresses: Mapping[str, Sequence[str]] = NO_ADDRESSES,
) -> tuple[PoolPlan, list[PublishedDevice]]:
    """``addresses``: interface name → the addresses netlink reports on it in the node's namespace (CIDR form)."""
    rules = RULES[inventory.profile.releases.dranet]
    entries: list[tuple[Device, NicPf | NicVf | VirtualNic]] = []
    for pf in inventory.nics:
        entries.append((_pci_device(pf.pci, pf=pf, vf=None, rules=rules, addresses=addresses), pf))
        entries += [(_pci_device(vf.pci, pf=pf, vf=vf, rules=rules, addresses=addresses), vf) for vf in pf.vfs]
    entries += [(_virtual_device(v, addresses=addresses), v) for v in inventory.virtual_nics]
    entries.sort(key=lambda e: e[0]["name"])
    published = []
    for device, model in entries:
        if device["name"] in taints:
            device["taints"] = [t.copy() for t in taints[device["name"]]]
        published.append(
            PublishedDevice(
                ref=DeviceRef(driver=DRIVER, pool=inventory.node_name, device=device["name"]),
                attributes=device.get("attributes", {}),
                capacity={},
                model=model,
            )
        )
    plan = PoolPlan(driver=DRIVER, pool=inventory.node_name, device_groups=(tuple(d for d, _ in entries),))
    return plan, published


def render_ip_list(addresses: Iterable[str], *, version: int) -> str | None:
    """DraNet's ``ipv4``/``ipv6`` value: the link's global-unicast addresses of one IP version in CIDR form, sorted
    as strings, de-duplicated, comma-joined, cut before the first address that would pass the API's string limit;
    None when there are none (DraNet then publishes no attribute)."""
    chosen = set()
    for text in addresses:
        iface = ipaddress.ip_interface(text)
        if iface.version == version and _global_unicast(iface.ip):
            chosen.add(str(iface))
    joined = ""
    for cidr in sorted(chosen):
        longer = f"{joined},{cidr}" if joined else cidr
        if len(longer) > MAX_STRING:
            break
        joined = longer
    return joined or None


def _global_unicast(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    # Go's net.IP.IsGlobalUnicast, which DraNet uses: private ranges (10/8, fd00::/8) count, link-local does not.
    if ip.is_unspecified or ip.is_loopback or ip.is_multicast or ip.is_link_local:
        return False
    return ip != ipaddress.IPv4Address("255.255.255.255")


def _link_attributes(
    *, ifname: str, mac: str, mtu: int, link: LinkType, kind: str, addresses: Mapping[str, Sequence[str]]
) -> dict[str, DeviceAttribute]:
    attributes = {
        _P + "ifName": values.string(ifname),
        _P + "mac": values.string(mac),
        _P + "mtu": values.integer(mtu),
        _P + "encapsulation": values.string(link.encapsulation),
        _P + "alias": values.string(""),
        _P + "state": values.string("up"),
        _P + "type": values.string(kind),
        _P + "ebpf": values.boolean(value=False),
    }
    for name, version in ((IPV4, 4), (IPV6, 6)):
        if (joined := render_ip_list(addresses.get(ifname, ()), version=version)) is not None:
            attributes[name] = values.string(joined)
    return attributes


def _pci_device(
    pci: PciFunction,
    *,
    pf: NicPf,
    vf: NicVf | None,
    rules: DranetRules,
    addresses: Mapping[str, Sequence[str]],
) -> Device:
    product = pf.product
    ifname = vf.ifname if vf is not None else pf.ifname
    mac = vf.mac if vf is not None else pf.mac
    attributes: dict[str, DeviceAttribute] = {
        _P + "pciAddress": values.string(pci.bdf.render()),
        _P + "pciVendor": values.string(product.vendor_name),
        _P + "pciDevice": values.string(product.vf_device_name if vf is not None else product.device_name),
        _P + "pciSubsystem": values.string(f"{pci.ids.subsystem_device:04x}"),
    }
    if pci.numa_node is not None:
        attributes[_P + "numaNode"] = values.integer(pci.numa_node)
    # IPoIB links report their own netlink type; Ethernet PFs and VFs are plain "device" links.
    kind = "ipoib" if pf.link is LinkType.INFINIBAND else "device"
    attributes |= _link_attributes(ifname=ifname, mac=mac, mtu=pf.mtu, link=pf.link, kind=kind, addresses=addresses)
    attributes[_P + "sriov"] = values.boolean(value=pci.sriov_totalvfs > 0)
    if pci.sriov_totalvfs > 0:
        attributes[_P + "sriovVfs"] = values.integer(len(pci.vfs))
    if vf is not None:
        attributes[_P + "isSriovVf"] = values.boolean(value=True)  # DraNet sets it only when true
    attributes[_P + "virtual"] = values.boolean(value=False)
    attributes[_P + "rdma"] = values.boolean(value=pci.rdma_device is not None)
    if pci.rdma_device is not None and rules.rdma_device_on_netdevs:
        attributes[_P + "rdmaDevice"] = values.string(pci.rdma_device)
    # No release publishes the standard pciBusID on dra.net devices: dra.net/pciAddress is DraNet's own.
    attributes[values.PCIE_ROOT] = values.string(pci.root.name)
    if pci.numa_node is not None and rules.standard_numa_node:
        attributes[values.NUMA_NODE] = values.integer(pci.numa_node)
    return {"name": names.pci_device(pci.bdf), "attributes": attributes}


def _virtual_device(nic: VirtualNic, *, addresses: Mapping[str, Sequence[str]]) -> Device:
    # Profiles only allow DNS-label interface names, so DraNet's net-<base32> form for other names never arises.
    attributes = _link_attributes(
        ifname=nic.ifname, mac=nic.mac, mtu=nic.mtu, link=LinkType.ETHERNET, kind="veth", addresses=addresses
    )
    attributes[_P + "sriov"] = values.boolean(value=False)
    attributes[_P + "virtual"] = values.boolean(value=True)
    attributes[_P + "rdma"] = values.boolean(value=False)
    return {"name": nic.ifname, "attributes": attributes}
