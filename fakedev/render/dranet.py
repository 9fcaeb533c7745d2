"""The ``dra.net`` schema of the DraNet driver: one device per PCI netdev (PF or VF) and per virtual interface."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from fakedev.model.inventory import NicPf, NicVf, NodeInventory, PciFunction, VirtualNic
from fakedev.model.nic import LinkType
from fakedev.render import names, values
from fakedev.render.pool import PoolPlan
from fakedev.render.published import DeviceRef, PublishedDevice, Schema
from fakedev.render.types import Device, DeviceAttribute, DeviceTaint

DRIVER: Final = Schema.DRANET.driver
_P: Final = "dra.net/"


def plan_dranet(
    inventory: NodeInventory, *, taints: Mapping[str, Sequence[DeviceTaint]]
) -> tuple[PoolPlan, list[PublishedDevice]]:
    entries: list[tuple[Device, NicPf | NicVf | VirtualNic]] = []
    for pf in inventory.nics:
        entries.append((_pci_device(pf.pci, pf=pf, vf=None), pf))
        entries += [(_pci_device(vf.pci, pf=pf, vf=vf), vf) for vf in pf.vfs]
    entries += [(_virtual_device(v), v) for v in inventory.virtual_nics]
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


def _link_attributes(*, ifname: str, mac: str, mtu: int, link: LinkType, kind: str) -> dict[str, DeviceAttribute]:
    return {
        _P + "ifName": values.string(ifname),
        _P + "mac": values.string(mac),
        _P + "mtu": values.integer(mtu),
        _P + "encapsulation": values.string(link.encapsulation),
        _P + "alias": values.string(""),
        _P + "state": values.string("up"),
        _P + "type": values.string(kind),
        _P + "ebpf": values.boolean(value=False),
    }


def _pci_device(pci: PciFunction, *, pf: NicPf, vf: NicVf | None) -> Device:
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
    attributes |= _link_attributes(ifname=ifname, mac=mac, mtu=pf.mtu, link=pf.link, kind=kind)
    attributes[_P + "sriov"] = values.boolean(value=pci.sriov_totalvfs > 0)
    if pci.sriov_totalvfs > 0:
        attributes[_P + "sriovVfs"] = values.integer(len(pci.vfs))
    if vf is not None:
        attributes[_P + "isSriovVf"] = values.boolean(value=True)  # DraNet sets it only when true
    attributes[_P + "virtual"] = values.boolean(value=False)
    attributes[_P + "rdma"] = values.boolean(value=pci.rdma_device is not None)
    if pci.rdma_device is not None:
        attributes[_P + "rdmaDevice"] = values.string(pci.rdma_device)
    attributes[values.PCI_BUS_ID] = values.string(pci.bdf.render())
    attributes[values.PCIE_ROOT] = values.string(pci.root.name)
    if pci.numa_node is not None:
        attributes[values.NUMA_NODE] = values.integer(pci.numa_node)
    return {"name": names.pci_device(pci.bdf), "attributes": attributes}


def _virtual_device(nic: VirtualNic) -> Device:
    attributes = _link_attributes(ifname=nic.ifname, mac=nic.mac, mtu=nic.mtu, link=LinkType.ETHERNET, kind="veth")
    attributes[_P + "sriov"] = values.boolean(value=False)
    attributes[_P + "virtual"] = values.boolean(value=True)
    attributes[_P + "rdma"] = values.boolean(value=False)
    return {"name": nic.ifname, "attributes": attributes}
