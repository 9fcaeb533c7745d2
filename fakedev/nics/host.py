"""Configure a NIC in the node's namespace before the runtime moves it into the pod, and reset it afterwards.

Raw rtnetlink requests (:mod:`linuxns.rtnl`): a configure is a lookup, one link change and one request per address.
"""

from __future__ import annotations

from fakedev.errors import ClaimError
from fakedev.nics.plan import NicAssignment
from linuxns.rtnl import rtnl


def configure(netns: str | None, assignment: NicAssignment) -> None:
    """Set MAC, MTU and addresses on the host interface and bring it up (the CDI netDevices edit then moves it,
    keeping them). Addresses already there stay (each is put with replace semantics)."""
    with rtnl(netns) as nl:
        link = nl.link(assignment.host_ifname)
        if link is None:
            raise ClaimError(f"interface {assignment.host_ifname} is not present on the node (unplugged?)")
        nl.set_link(link.index, mac=assignment.mac, mtu=assignment.mtu, up=True)
        for cidr in assignment.addresses:
            nl.add_address(link.index, cidr)


def reset(netns: str | None, *, host_ifname: str, mac: str, mtu: int) -> bool:
    """Give the interface back its hardware MAC and MTU and drop its addresses; False when it is not on the node."""
    with rtnl(netns) as nl:
        link = nl.link(host_ifname)
        if link is None:
            return False
        nl.flush_addresses(link.index)
        nl.set_link(link.index, mac=mac, mtu=mtu)
        return True


def reset_if_mac(netns: str | None, *, host_ifname: str, claim_mac: str, mac: str, mtu: int) -> bool:
    """:func:`reset` the interface only if it carries ``claim_mac`` (a claim's prepare configured it); False when
    it does not, or is not on the node."""
    with rtnl(netns) as nl:
        link = nl.link(host_ifname)
        if link is None or link.mac != claim_mac.lower():
            return False
        nl.flush_addresses(link.index)
        nl.set_link(link.index, mac=mac, mtu=mtu)
        return True
