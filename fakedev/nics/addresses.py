"""The addresses on the node's interfaces, read and watched over netlink in the node's network namespace.

DraNet publishes each interface's addresses (``dra.net/ipv4``/``ipv6``) as it finds them on the host; so does the
fake driver: a dump when it discovers the NICs, then the namespace's address and link notifications folded into it
(:mod:`linuxns.rtnl` decodes them; a dump again only when notifications were lost), each change reported as a new
snapshot (interface name → its addresses in CIDR form, every scope: the render picks what it publishes). Only
the interfaces asked for are reported, so unrelated links never cause a republish.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from linuxns import netlink
from linuxns.errors import RtnlError
from linuxns.rtnl import LinkEvent, RtEvent, parse_rt_events

log = logging.getLogger("fakedev.nics.addresses")

# rtnetlink multicast groups (linux/rtnetlink.h): link, IPv4 and IPv6 address changes.
RTMGRP_LINK: Final = 0x1
RTMGRP_IPV4_IFADDR: Final = 0x10
RTMGRP_IPV6_IFADDR: Final = 0x100

Addresses = dict[str, tuple[str, ...]]
"""Interface name → its addresses in CIDR form, sorted."""


@dataclass(frozen=True, kw_only=True)
class NamespaceAddresses:
    """A namespace's links (index → name) and their addresses (index → CIDRs), as a dump and events left them."""

    names: Mapping[int, str] = field(default_factory=dict)
    addresses: Mapping[int, frozenset[str]] = field(default_factory=dict)

    def fold(self, events: list[RtEvent]) -> NamespaceAddresses:
        names, addresses = dict(self.names), dict(self.addresses)
        for e in events:
            if isinstance(e, LinkEvent):
                if e.gone:
                    names.pop(e.index, None)
                    addresses.pop(e.index, None)
                else:
                    names[e.index] = e.ifname  # a rename keeps the index, and the addresses with it
            elif e.gone:
                addresses[e.index] = addresses.get(e.index, frozenset()) - {e.cidr}
            else:
                addresses[e.index] = addresses.get(e.index, frozenset()) | {e.cidr}
        return NamespaceAddresses(names=names, addresses=addresses)

    def of(self, ifnames: frozenset[str]) -> dict[str, tuple[str, ...]]:
        """Interface name → its addresses, sorted, for each of ``ifnames`` (none for an interface not there)."""
        found: dict[str, tuple[str, ...]] = dict.fromkeys(ifnames, ())
        for index, name in self.names.items():
            if name in found:
                found[name] = tuple(sorted(self.addresses.get(index, frozenset())))
        return found


def compute_namespace_addresses(*, links: Iterable[Any], addrs: Iterable[Any]) -> NamespaceAddresses:
    """Every link's name and addresses from netlink link and address messages of a dump (pure)."""
    addresses: dict[int, set[str]] = {}
    for a in addrs:
        # IFA_LOCAL is the interface's own IPv4 address (IFA_ADDRESS is the peer's on point-to-point links).
        ip = a.get_attr("IFA_LOCAL") if a["family"] == socket.AF_INET else None
        ip = ip or a.get_attr("IFA_ADDRESS")
        if ip:
            addresses.setdefault(a["index"], set()).add(f"{ip}/{a['prefixlen']}")
    return NamespaceAddresses(
        names={ln["index"]: ln.get_attr("IFLA_IFNAME") for ln in links},
        addresses={index: frozenset(cidrs) for index, cidrs in addresses.items()},
    )


def compute_addresses(*, links: Iterable[Any], addrs: Iterable[Any], ifnames: Collection[str]) -> Addresses:
    """The addresses of ``ifnames`` from netlink link and address messages (pure)."""
    return compute_namespace_addresses(links=links, addrs=addrs).of(frozenset(ifnames))


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
            known = compute_namespace_addresses(links=dumps.get_links(), addrs=dumps.get_addr())
            self._report(known.of(self.ifnames))
            while not self._stop.is_set():
                ready, _, _ = select.select([events.fileno()], [], [], 0.5)
                if not ready:
                    continue
                try:
                    # Drain the socket itself (pyroute2's get() may buffer where select cannot see) and fold what
                    # the notifications say: no dump, so a prepare's few changes cost a few dozen bytes each.
                    found: list[RtEvent] = []
                    while select.select([events.fileno()], [], [], 0)[0]:
                        found += parse_rt_events(events.recv(1 << 20))
                    known = known.fold(found)
                except (OSError, RtnlError) as exc:
                    # Notifications lost (ENOBUFS, an overrun) or unreadable: only a dump tells the truth again.
                    log.info("address notifications lost; dumping again", extra={"fields": {"error": str(exc)}})
                    with contextlib.suppress(Exception):  # a failed dump must not end the watch: the next event retries
                        known = compute_namespace_addresses(links=dumps.get_links(), addrs=dumps.get_addr())
                self._report(known.of(self.ifnames))
