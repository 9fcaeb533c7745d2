"""Configure a NIC in the node's namespace before the runtime moves it into the pod, and reset it afterwards."""

from __future__ import annotations

import ipaddress

from fakedev.errors import ClaimError
from fakedev.nics.plan import NicAssignment
from linuxns import netlink


def configure(netns: str | None, assignment: NicAssignment) -> None:
    """Set MAC, MTU and addresses on the host interface (the CDI netDevices edit then moves it, keeping them)."""
    with netlink(netns) as ipr:
        idx = ipr.link_lookup(ifname=assignment.host_ifname)
        if not idx:
            raise ClaimError(f"interface {assignment.host_ifname} is not present on the node (unplugged?)")
        ipr.link("set", index=idx[0], address=assignment.mac, mtu=assignment.mtu)
        present = {f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}" for a in ipr.get_addr(index=idx[0])}
        for cidr in assignment.addresses:
            if str(ipaddress.ip_interface(cidr)) in present:
                continue
            iface = ipaddress.ip_interface(cidr)
            ipr.addr("add", index=idx[0], address=str(iface.ip), prefixlen=iface.network.prefixlen)
        ipr.link("set", index=idx[0], state="up")


def reset(netns: str | None, *, host_ifname: str, mac: str, mtu: int) -> bool:
    """Give the interface back its hardware MAC and MTU and drop its addresses; False when it is not on the node."""
    with netlink(netns) as ipr:
        idx = ipr.link_lookup(ifname=host_ifname)
        if not idx:
            return False
        ipr.flush_addr(index=idx[0])
        ipr.link("set", index=idx[0], address=mac, mtu=mtu)
        return True


def reset_if_mac(netns: str | None, *, host_ifname: str, claim_mac: str, mac: str, mtu: int) -> bool:
    """:func:`reset` the interface only if it carries ``claim_mac`` (a claim's prepare configured it); False when
    it does not, or is not on the node."""
    with netlink(netns) as ipr:
        idx = ipr.link_lookup(ifname=host_ifname)
        if not idx or ipr.get_links(idx[0])[0].get_attr("IFLA_ADDRESS") != claim_mac:
            return False
        ipr.flush_addr(index=idx[0])
        ipr.link("set", index=idx[0], address=mac, mtu=mtu)
        return True
