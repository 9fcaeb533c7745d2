"""The addresses on the node's interfaces, read and watched over netlink in the node's network namespace.

DraNet publishes each interface's addresses (``dra.net/ipv4``/``ipv6``) as it finds them on the host; so does the
fake driver: a dump when it discovers the NICs, then every address or link event of the namespace re-reads them and
reports the new snapshot (interface name → its addresses in CIDR form, every scope: the render picks what it
publishes). Only the interfaces asked for are reported, so unrelated links never cause a republish.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from linuxns import netlink

log = logging.getLogger("fakedev.nics.addresses")

# rtnetlink multicast groups (linux/rtnetlink.h): link, IPv4 and IPv6 address changes.
RTMGRP_LINK: Final = 0x1
RTMGRP_IPV4_IFADDR: Final = 0x10
RTMGRP_IPV6_IFADDR: Final = 0x100

Addresses = dict[str, tuple[str, ...]]
"""Interface name → its addresses in CIDR form, sorted."""


def compute_addresses(*, links: Iterable[Any], addrs: Iterable[Any], ifnames: Collection[str]) -> Addresses:
    """The addresses of ``ifnames`` from netlink link and address messages (pure)."""
    names = {ln["index"]: ln.get_attr("IFLA_IFNAME") for ln in links}
    found: dict[str, set[str]] = {n: set() for n in ifnames}
    for a in addrs:
        name = names.get(a["index"])
        if name not in found:
            continue
        # IFA_LOCAL is the interface's own IPv4 address (IFA_ADDRESS is the peer's on point-to-point links).
        ip = a.get_attr("IFA_LOCAL") if a["family"] == socket.AF_INET else None
        ip = ip or a.get_attr("IFA_ADDRESS")
        if ip:
            found[name].add(f"{ip}/{a['prefixlen']}")
    return {n: tuple(sorted(v)) for n, v in found.items()}


def read_addresses(netns: str | None, *, ifnames: Collection[str]) -> Addresses:
    """The addresses of ``ifnames`` in namespace ``netns`` now (an interface not there has none)."""
    with netlink(netns) as ipr:
        return compute_addresses(links=ipr.get_links(), addrs=ipr.get_addr(), ifnames=ifnames)


@dataclass(kw_only=True)
class AddressWatcher:
    """Reports the addresses of ``ifnames`` whenever a link or address event in ``netns`` changes them."""

    netns: str | None
    ifnames: frozenset[str]
    on_change: Callable[[Addresses], None]
    """Called from the watcher's thread with the full snapshot, once at start and after every change."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _last: Addresses | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nic-addresses", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _report(self, snapshot: Addresses) -> None:
        if snapshot == self._last:
            return
        self._last = snapshot
        log.info("addresses", extra={"fields": {"interfaces": {n: list(a) for n, a in snapshot.items() if a}}})
        self.on_change(snapshot)

    def _run(self) -> None:
        # Two sockets: events arrive on one; dumps on the other never interleave with them.
        with netlink(self.netns) as events, netlink(self.netns) as dumps:
            events.bind(groups=RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR)
            # Subscribed before the first dump, so no change between the two is missed.
            self._report(compute_addresses(links=dumps.get_links(), addrs=dumps.get_addr(), ifnames=self.ifnames))
            while not self._stop.is_set():
                ready, _, _ = select.select([events.fileno()], [], [], 0.5)
                if not ready:
                    continue
                with contextlib.suppress(Exception):  # a garbled message or a failed dump must not end the watch
                    # Drain the socket itself (pyroute2's get() may buffer where select cannot see); any event means
                    # "read again": a burst (a flush, a move into a pod) costs one dump.
                    while select.select([events.fileno()], [], [], 0)[0]:
                        events.recv(1 << 20)
                    snapshot = compute_addresses(links=dumps.get_links(), addrs=dumps.get_addr(), ifnames=self.ifnames)
                    self._report(snapshot)
