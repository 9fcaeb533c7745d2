"""Install the node's NICs as real interfaces: veth pairs between the node namespace and a fabric bridge.

This is the emulated hardware, done once per node before its drivers start; ``unplug`` and ``replug`` are the
hot-plug faults (deleting the fabric port takes the whole pair with it, wherever the NIC currently is).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from fakedev.errors import FakedevError
from fakedev.nics.ports import NicPort
from linuxns import NamespaceError, create_netns, netlink, netns_path

BRIDGE: Final = "fabric0"


@dataclass(frozen=True, kw_only=True)
class NicHardware:
    node_netns: str
    fabric_netns: str


def ensure_fabric(hw: NicHardware) -> None:
    """The fabric namespace with its bridge (shared by every node on the same fabric)."""
    try:
        if not netns_path(hw.fabric_netns).exists():
            create_netns(hw.fabric_netns)
        if not netns_path(hw.node_netns).exists():
            create_netns(hw.node_netns)
    except NamespaceError as exc:
        raise FakedevError(str(exc)) from exc
    with netlink(hw.fabric_netns) as fab:
        if not fab.link_lookup(ifname=BRIDGE):
            fab.link("add", ifname=BRIDGE, kind="bridge")
        (idx,) = fab.link_lookup(ifname=BRIDGE)
        fab.link("set", index=idx, state="up")


def plug(hw: NicHardware, port: NicPort) -> None:
    """Create one NIC: its node end (name, MAC, MTU from the model) and its fabric port on the bridge."""
    with netlink(hw.node_netns) as node:
        if node.link_lookup(ifname=port.ifname):
            return
        node.link("add", ifname=port.ifname, kind="veth", peer={"ifname": port.port})
        (nic,) = node.link_lookup(ifname=port.ifname)
        (peer,) = node.link_lookup(ifname=port.port)
        node.link("set", index=nic, address=port.mac, mtu=port.mtu)
        with netns_path(hw.fabric_netns).open("rb") as fd:
            node.link("set", index=peer, net_ns_fd=fd.fileno())
        node.link("set", index=nic, state="up")
    with netlink(hw.fabric_netns) as fab:
        (idx,) = fab.link_lookup(ifname=port.port)
        (bridge,) = fab.link_lookup(ifname=BRIDGE)
        fab.link("set", index=idx, mtu=port.mtu, master=bridge, ifalias=port.ifname)
        fab.link("set", index=idx, state="up")


def install(hw: NicHardware, ports: Sequence[NicPort]) -> None:
    ensure_fabric(hw)
    for port in ports:
        plug(hw, port)


def reinstall(hw: NicHardware, ports: Sequence[NicPort]) -> None:
    """The NICs again after a power cycle. One that was inside a pod went with the pod's namespace, but the kernel
    tears a namespace down asynchronously: its fabric port may still be there for a moment, holding the name the new
    pair's port needs (moving it there failed with EEXIST). A port whose NIC is not in the node's namespace is stale
    after a power cycle, so it is deleted first."""
    ensure_fabric(hw)
    with netlink(hw.node_netns) as node:
        absent = {p.ifname for p in ports if not node.link_lookup(ifname=p.ifname)}
    for port in ports:
        if port.ifname in absent:
            try:
                unplug(hw, port)
            except Exception:  # pyroute2's NetlinkError; gone meanwhile (the teardown finished first) is no error
                with netlink(hw.fabric_netns) as fab:
                    if fab.link_lookup(ifname=port.port):
                        raise
        plug(hw, port)


def unplug(hw: NicHardware, port: NicPort) -> bool:
    """Pull the NIC: delete its fabric port (the veth pair dies with it). False when it was not plugged."""
    with netlink(hw.fabric_netns) as fab:
        idx = fab.link_lookup(ifname=port.port)
        if not idx:
            return False
        fab.link("del", index=idx[0])
        return True


def set_carrier(hw: NicHardware, port: NicPort, *, up: bool) -> None:
    """A link fault: the fabric port goes down (the NIC loses carrier) or comes back."""
    with netlink(hw.fabric_netns) as fab:
        idx = fab.link_lookup(ifname=port.port)
        if not idx:
            raise FakedevError(f"{port.ifname} is unplugged (no fabric port {port.port})")
        fab.link("set", index=idx[0], state="up" if up else "down")


def remove(hw: NicHardware) -> None:
    """Tear the node's NICs down (deleting the namespaces destroys their interfaces)."""
    from linuxns import delete_netns

    with contextlib.suppress(NamespaceError):
        delete_netns(hw.node_netns)
