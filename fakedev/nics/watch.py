"""Watch the NICs' fabric ports over netlink and report each NIC's link health (hot-unplug, carrier loss).

A port that disappears (the NIC was pulled: the veth pair is gone wherever the NIC was) or goes down (the link lost
carrier) makes its NIC unhealthy; the port coming back makes it healthy again. Events arrive within milliseconds,
well inside the two seconds a real NIC driver is expected to notice.
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from linuxns import netlink

log = logging.getLogger("fakedev.nics.watch")

RTMGRP_LINK: Final = 1
IFF_UP: Final = 0x1

LinkCallback = Callable[[str, bool, str], None]
"""(NIC ifname, healthy, why) — called from the watcher thread."""


@dataclass(kw_only=True)
class LinkWatcher:
    fabric_netns: str
    ports: Mapping[str, str]
    """fabric port name → the NIC's ifname."""
    on_change: LinkCallback
    _stop: threading.Event = field(default_factory=threading.Event)
    _state: dict[str, tuple[bool, str]] = field(default_factory=dict)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nic-link-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _report(self, port: str, *, healthy: bool, why: str) -> None:
        ifname = self.ports.get(port)
        if ifname is None or self._state.get(port) == (healthy, why):
            return
        self._state[port] = (healthy, why)
        log.info("link", extra={"fields": {"nic": ifname, "port": port, "healthy": healthy, "why": why}})
        self.on_change(ifname, healthy, why)

    def _observe(self, msg: Any) -> None:
        name = msg.get_attr("IFLA_IFNAME")
        if name not in self.ports:
            return
        if msg["event"] == "RTM_DELLINK":
            self._report(name, healthy=False, why="unplugged")
        elif msg["flags"] & IFF_UP:
            self._report(name, healthy=True, why="link up")
        else:
            self._report(name, healthy=False, why="link down")

    def _run(self) -> None:
        with netlink(self.fabric_netns) as ipr:
            ipr.bind(groups=RTMGRP_LINK)
            seen = set()
            for msg in ipr.get_links():
                self._observe(msg)
                seen.add(msg.get_attr("IFLA_IFNAME"))
            for port in self.ports:
                if port not in seen:
                    self._report(port, healthy=False, why="unplugged")
            while not self._stop.is_set():
                ready, _, _ = select.select([ipr.fileno()], [], [], 0.5)
                if not ready:
                    continue
                with contextlib.suppress(Exception):  # one garbled message must not end the watch
                    # Read the socket itself: pyroute2's get() may keep messages in its own buffer, where select
                    # cannot see them, so an event would wait for the next one.
                    for msg in ipr.marshal.parse(ipr.recv(1 << 20)):
                        if msg.get("event") in ("RTM_NEWLINK", "RTM_DELLINK"):
                            self._observe(msg)
