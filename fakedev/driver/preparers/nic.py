"""NICs (physical functions, virtual functions, virtual NICs): configured on the node, then moved into the pod.

The NIC reaches the pod through the CDI 1.1 ``netDevices`` edit (the runtime moves and renames the interface) —
fakedev's way: DraNet writes no CDI and moves the interface from an NRI hook. The claim status carries DraNet's own
conditions, and it and the metadata file report the name, MAC and addresses the pod sees (``networkData``).
"""

from __future__ import annotations

from typing import TypeVar

import cdi
from fakedev.driver import cdi_edits
from fakedev.driver.config import NIC_KINDS
from fakedev.driver.metadata import NetworkData
from fakedev.driver.preparers.base import DevicePreparer, EditsInput, StatusCondition, StatusExtras
from fakedev.errors import ClaimError
from fakedev.model.inventory import NicModel, NicPf, NicVf, VirtualNic
from fakedev.model.nic import LinkType
from fakedev.nics.plan import HostNic, PreparedNic

N = TypeVar("N", bound=NicModel)


def render_network_data(nic: PreparedNic) -> NetworkData:
    a = nic.assignment
    return {"interfaceName": a.pod_ifname, "ips": list(a.addresses), "hardwareAddress": a.mac}


class _NicPreparer(DevicePreparer[N]):
    config_kinds = NIC_KINDS

    def container_edits(self, model: N, *, use: EditsInput) -> cdi.ContainerEdits:
        if use.nic is None:
            raise ClaimError(f"{use.device} is a NIC but got no interface assignment")
        return cdi.ContainerEdits(
            env=tuple(cdi_edits.render_config_env(use.config)),
            net_devices=(
                cdi.NetDevice(host_interface_name=use.nic.assignment.host_ifname, name=use.nic.assignment.pod_ifname),
            ),
        )

    def rdma_link(self, model: N) -> bool:
        """Whether the NIC has an RDMA link (a RoCE function), which DraNet moves along with the netdev."""
        return False

    def status_extras(self, model: N, *, device: str, nic: PreparedNic | None, now: str) -> StatusExtras:
        if nic is None:
            return StatusExtras()
        ready, *after = render_conditions(rdma=self.rdma_link(model), now=now)
        return StatusExtras(ready=ready, after_ready=tuple(after), network_data=render_network_data(nic))


def render_conditions(*, rdma: bool, now: str) -> list[StatusCondition]:
    """DraNet's conditions for a netdev device it attached, in its order: the netdev moved, the network configured,
    then (a NIC with an RDMA link) the RDMA link moved. Every release writes the same ones: status True, no message.
    (A netdev-less RDMA device would get ``Ready``/``RDMAOnlyDeviceReady``; fakedev's model has none.)"""
    steps = [("Ready", "NetworkDeviceReady"), ("NetworkReady", "NetworkReady")]
    if rdma:
        # fakedev assumes the kernel's exclusive RDMA netns mode; in shared mode DraNet leaves the RDMA link where it
        # is and writes no RDMALinkReady.
        steps.append(("RDMALinkReady", "RDMALinkReady"))
    return [{"type": t, "status": "True", "reason": r, "lastTransitionTime": now} for t, r in steps]


class NicPfPreparer(_NicPreparer[NicPf]):
    def host_nic(self, model: NicPf, *, device: str) -> HostNic | None:
        if model.link != LinkType.ETHERNET:
            raise ClaimError(f"{device} is an InfiniBand port; fakedev emulates only Ethernet NICs as veth")
        return HostNic(ifname=model.ifname, mac=model.mac, mtu=model.mtu)

    def rdma_link(self, model: NicPf) -> bool:
        return model.pci.rdma_device is not None


class NicVfPreparer(_NicPreparer[NicVf]):
    def host_nic(self, model: NicVf, *, device: str) -> HostNic | None:
        # A VF's netdev has its PF's MTU (the veth is made so, and the slice publishes it): prepare defaults to it
        # and unprepare gives it back.
        if model.pci.mtu is None:
            raise ClaimError(f"{device} is a VF whose PCI function has no MTU in the device model")
        return HostNic(ifname=model.ifname, mac=model.mac, mtu=model.pci.mtu)

    def rdma_link(self, model: NicVf) -> bool:
        return model.pci.rdma_device is not None


class VirtualNicPreparer(_NicPreparer[VirtualNic]):
    def host_nic(self, model: VirtualNic, *, device: str) -> HostNic | None:
        return HostNic(ifname=model.ifname, mac=model.mac, mtu=model.mtu)
