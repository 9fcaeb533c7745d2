"""Find the node's NICs the way a NIC driver finds hardware: PCI facts from sysfs, interfaces from netlink, and
udev events for interfaces that come and go — all inside the node's network namespace.

The fake sysfs tree (``fakedev.sysfs``) stands for ``/sys``: it maps each netdev to its PCI function. Netlink tells
which of those interfaces exist right now and with which MAC. A NIC the model has but discovery cannot find (or finds
with another MAC) is reported, so the plugin marks it unhealthy instead of handing out something that is not there.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyudev

from fakedev.model.pci import Bdf
from fakedev.nics.ports import NicPort
from fakedev.sysfs import read_pci_devices
from linuxns import in_netns, netlink

log = logging.getLogger("fakedev.nics.discover")


@dataclass(frozen=True, kw_only=True)
class Discovery:
    present: frozenset[str]
    """Interfaces found in the node namespace whose MAC is the one the hardware has."""
    pci: dict[str, Bdf]
    """netdev → PCI function, from sysfs."""
    problems: dict[str, str]
    """ifname → why a NIC of the model was not found."""


def discover(*, ports: Iterable[NicPort], netns: str | None, sysfs_root: Path) -> Discovery:
    pci = {n: d.bdf for d in read_pci_devices(sysfs_root) for n in d.netdevs}
    with netlink(netns) as ipr:
        links = {ln.get_attr("IFLA_IFNAME"): (ln.get_attr("IFLA_ADDRESS") or "").lower() for ln in ipr.get_links()}
    present, problems = set(), {}
    for port in ports:
        if port.ifname not in links:
            problems[port.ifname] = "no such interface in the node's network namespace"
        elif links[port.ifname] != port.mac.lower():
            problems[port.ifname] = f"MAC {links[port.ifname]} is not the hardware's {port.mac}"
        else:
            present.add(port.ifname)
    return Discovery(present=frozenset(present), pci=pci, problems=problems)


@dataclass(kw_only=True)
class UdevNetMonitor:
    """udev ``net`` events of the node namespace (uevents of a namespace reach only monitors opened inside it)."""

    netns: str | None
    on_event: Callable[[str, str], None]
    """(action, interface name)."""
    events: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        with in_netns(self.netns):
            # Kernel uevents: no udevd runs inside an emulated node to re-broadcast them.
            monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source="kernel")
        monitor.filter_by(subsystem="net")
        monitor.start()
        self._thread = threading.Thread(target=self._run, args=(monitor,), name="nic-udev", daemon=True)
        self._thread.start()

    def _run(self, monitor: pyudev.Monitor) -> None:
        while not self._stop.is_set():
            device = monitor.poll(timeout=0.5)
            if device is None:
                continue
            self.events += 1
            with contextlib.suppress(Exception):
                self.on_event(str(device.action), str(device.sys_name))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
