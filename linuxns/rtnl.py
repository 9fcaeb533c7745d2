"""A small rtnetlink client on a raw socket: the few link and address requests a prepare makes, and notifications.

pyroute2 answers each request through an asyncio loop of its own and decodes every reply into objects; a NIC
prepare made five of those and spent milliseconds in them (``make bench``). The messages involved have a fixed
layout in the kernel's UAPI (``linux/netlink.h``, ``linux/rtnetlink.h``, ``linux/if_link.h``, ``linux/if_addr.h``),
so they are built and read here directly: one ``send`` and one ``recv`` per request.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from linuxns.errors import RtnlError
from linuxns.ns import in_netns

RTM_NEWLINK: Final = 16
RTM_DELLINK: Final = 17
RTM_GETLINK: Final = 18
RTM_NEWADDR: Final = 20
RTM_DELADDR: Final = 21
RTM_GETADDR: Final = 22
NLMSG_ERROR: Final = 2
NLMSG_DONE: Final = 3
NLMSG_OVERRUN: Final = 4

NLM_F_REQUEST: Final = 0x1
NLM_F_ACK: Final = 0x4
NLM_F_REPLACE: Final = 0x100
NLM_F_DUMP: Final = 0x300
NLM_F_CREATE: Final = 0x400

IFLA_ADDRESS: Final = 1
IFLA_IFNAME: Final = 3
IFLA_MTU: Final = 4
IFA_ADDRESS: Final = 1
IFA_LOCAL: Final = 2
IFF_UP: Final = 0x1

_NLMSGHDR: Final = struct.Struct("=IHHII")  # length, type, flags, sequence, port
_NLMSGERR: Final = struct.Struct("=i")  # the negated errno (0: an acknowledgement), then the request's header
_IFINFOMSG: Final = struct.Struct("=BxHiII")  # family, (pad), type, index, flags, change
_IFADDRMSG: Final = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, index
_RTATTR: Final = struct.Struct("=HH")  # length, type
_RECV_BYTES: Final = 1 << 16


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attr(kind: int, value: bytes) -> bytes:
    raw = _RTATTR.pack(_RTATTR.size + len(value), kind) + value
    return raw + b"\0" * (_align(len(raw)) - len(raw))


def _attributes(data: bytes, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    at = start
    while at + _RTATTR.size <= end:
        length, kind = _RTATTR.unpack_from(data, at)
        if length < _RTATTR.size or at + length > end:
            raise RtnlError(f"attribute of length {length} at byte {at} runs past its message", code=errno.EBADMSG)
        yield kind & 0x3FFF, data[at + _RTATTR.size : at + length]  # the top bits are the nested/byte-order flags
        at += _align(length)


@dataclass(frozen=True, kw_only=True)
class Message:
    kind: int
    flags: int
    seq: int
    data: bytes
    """The whole message, header included."""

    def body(self, header: struct.Struct) -> tuple[tuple[int, ...], dict[int, bytes]]:
        """The fixed header after the netlink one, and the attributes after that (the last of a kind wins)."""
        start = _NLMSGHDR.size
        if len(self.data) < start + header.size:
            raise RtnlError(f"message of type {self.kind} is too short for its header", code=errno.EBADMSG)
        return header.unpack_from(self.data, start), dict(_attributes(self.data, start + header.size, len(self.data)))


def split_messages(data: bytes) -> list[Message]:
    """The netlink messages in one read of a socket (pure)."""
    found: list[Message] = []
    at = 0
    while at + _NLMSGHDR.size <= len(data):
        length, kind, flags, seq, _port = _NLMSGHDR.unpack_from(data, at)
        if length < _NLMSGHDR.size or at + length > len(data):
            raise RtnlError(f"message of length {length} at byte {at} of {len(data)}", code=errno.EBADMSG)
        found.append(Message(kind=kind, flags=flags, seq=seq, data=data[at : at + length]))
        at += _align(length)
    if len(data) - at >= _NLMSGHDR.size:
        raise RtnlError(f"{len(data) - at} bytes after the last whole message", code=errno.EBADMSG)
    return found


# -- notifications ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LinkEvent:
    index: int
    ifname: str
    gone: bool
    """RTM_DELLINK: the link left the namespace (deleted or moved away), its addresses with it."""


@dataclass(frozen=True, kw_only=True)
class AddressEvent:
    index: int
    cidr: str
    gone: bool


RtEvent = LinkEvent | AddressEvent


def _link_event(message: Message) -> LinkEvent | None:
    (_family, _type, index, _flags, _change), attrs = message.body(_IFINFOMSG)
    name = attrs.get(IFLA_IFNAME)
    if name is None:
        return None
    return LinkEvent(
        index=index, ifname=name.split(b"\0", 1)[0].decode(errors="replace"), gone=message.kind == RTM_DELLINK
    )


def _address_event(message: Message) -> AddressEvent | None:
    (family, prefixlen, _flags, _scope, index), attrs = message.body(_IFADDRMSG)
    # IFA_LOCAL is an IPv4 interface's own address (IFA_ADDRESS is the peer's on point-to-point links).
    raw = (attrs.get(IFA_LOCAL) if family == socket.AF_INET else None) or attrs.get(IFA_ADDRESS)
    if raw is None or family not in (socket.AF_INET, socket.AF_INET6):
        return None
    ip = ipaddress.IPv4Address(raw) if family == socket.AF_INET else ipaddress.IPv6Address(raw)
    return AddressEvent(index=index, cidr=f"{ip}/{prefixlen}", gone=message.kind == RTM_DELADDR)


def parse_rt_events(data: bytes) -> list[RtEvent]:
    """The link and address events in one read of a notification socket (pure); other messages are skipped, an
    overrun (notifications the kernel dropped) is an RtnlError."""
    events: list[RtEvent] = []
    for message in split_messages(data):
        if message.kind == NLMSG_OVERRUN:
            raise RtnlError("the kernel dropped notifications (overrun)", code=errno.ENOBUFS)
        event = (
            _link_event(message)
            if message.kind in (RTM_NEWLINK, RTM_DELLINK)
            else _address_event(message)
            if message.kind in (RTM_NEWADDR, RTM_DELADDR)
            else None
        )
        if event is not None:
            events.append(event)
    return events


# -- requests --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Link:
    index: int
    mac: str


def _ip_attrs(cidr: str) -> tuple[int, int, bytes]:
    iface = ipaddress.ip_interface(cidr)
    family = socket.AF_INET if iface.version == 4 else socket.AF_INET6
    packed = iface.ip.packed
    # iproute2 and pyroute2 send IPv4 addresses as both local and address (no peer); IPv6 as address only.
    attrs = _attr(IFA_ADDRESS, packed) + (_attr(IFA_LOCAL, packed) if family == socket.AF_INET else b"")
    return family, iface.network.prefixlen, attrs


class Rtnl:
    """An rtnetlink socket made in one namespace (it stays there); requests are answered one at a time."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
        self._sock.bind((0, 0))
        self._seq = 0

    def close(self) -> None:
        self._sock.close()

    def _request(self, kind: int, flags: int, body: bytes) -> list[Message]:
        """Send one request; return the messages answering it (a dump's, or none for an acknowledged change)."""
        self._seq += 1
        seq = self._seq
        self._sock.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(body), kind, NLM_F_REQUEST | flags, seq, 0) + body)
        answers: list[Message] = []
        while True:
            for message in split_messages(self._sock.recv(_RECV_BYTES)):
                if message.seq != seq:
                    continue  # a late answer to an earlier request of a caller that gave up on it
                if message.kind == NLMSG_ERROR:
                    (code,) = _NLMSGERR.unpack_from(message.data, _NLMSGHDR.size)
                    if code:
                        raise RtnlError(f"request {kind}: {os.strerror(-code)}", code=-code)
                    return answers
                if message.kind == NLMSG_DONE:
                    return answers
                answers.append(message)
                if not flags & NLM_F_DUMP:
                    return answers  # a single answer (a GET of one object) has no DONE after it

    def link(self, ifname: str) -> Link | None:
        """The link named ``ifname``, or None when the namespace has none."""
        try:
            (answer,) = self._request(
                RTM_GETLINK, 0, _IFINFOMSG.pack(0, 0, 0, 0, 0) + _attr(IFLA_IFNAME, ifname.encode() + b"\0")
            )
        except RtnlError as exc:
            if exc.code == errno.ENODEV:
                return None
            raise
        (_family, _type, index, _flags, _change), attrs = answer.body(_IFINFOMSG)
        return Link(index=index, mac=attrs.get(IFLA_ADDRESS, b"").hex(":"))

    def set_link(self, index: int, *, mac: str, mtu: int, up: bool = False) -> None:
        """Set the MAC and MTU of link ``index`` (and bring it up), in one request."""
        flags = IFF_UP if up else 0
        attrs = _attr(IFLA_ADDRESS, bytes.fromhex(mac.replace(":", ""))) + _attr(IFLA_MTU, struct.pack("=I", mtu))
        self._request(RTM_NEWLINK, NLM_F_ACK, _IFINFOMSG.pack(0, 0, index, flags, flags) + attrs)

    def addresses(self, index: int) -> list[str]:
        """The addresses of link ``index``, in CIDR form."""
        found: list[str] = []
        for message in self._request(RTM_GETADDR, NLM_F_DUMP, _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
            event = _address_event(message) if message.kind == RTM_NEWADDR else None
            if event is not None and event.index == index:
                found.append(event.cidr)
        return found

    def add_address(self, index: int, cidr: str) -> None:
        """Put ``cidr`` on link ``index`` (replacing the same address if it is there already)."""
        family, prefixlen, attrs = _ip_attrs(cidr)
        self._request(
            RTM_NEWADDR,
            NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
            _IFADDRMSG.pack(family, prefixlen, 0, 0, index) + attrs,
        )

    def delete_address(self, index: int, cidr: str) -> None:
        family, prefixlen, attrs = _ip_attrs(cidr)
        try:
            self._request(RTM_DELADDR, NLM_F_ACK, _IFADDRMSG.pack(family, prefixlen, 0, 0, index) + attrs)
        except RtnlError as exc:
            if exc.code != errno.EADDRNOTAVAIL:  # gone already (an IPv6 address goes with the last IPv4 one, …)
                raise

    def flush_addresses(self, index: int) -> None:
        for cidr in self.addresses(index):
            self.delete_address(index, cidr)


@contextlib.contextmanager
def rtnl(netns: str | None) -> Iterator[Rtnl]:
    """An rtnetlink socket in namespace ``netns`` (None: the caller's)."""
    with in_netns(netns):
        sock = Rtnl()
    try:
        yield sock
    finally:
        sock.close()
