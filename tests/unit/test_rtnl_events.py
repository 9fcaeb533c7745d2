"""rtnetlink notifications decoded from bytes laid out as the kernel's UAPI headers lay them out."""

from __future__ import annotations

import socket
import struct

import pytest

from fakedev.nics.addresses import NamespaceAddresses
from linuxns.errors import RtnlError
from linuxns.rtnl import (
    IFA_ADDRESS,
    IFA_LOCAL,
    IFLA_IFNAME,
    NLMSG_OVERRUN,
    RTM_DELADDR,
    RTM_NEWADDR,
    RTM_NEWLINK,
    AddressEvent,
    LinkEvent,
    parse_rt_events,
)


def _attr(kind: int, value: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(value), kind) + value
    return raw + b"\0" * (-len(raw) % 4)


def _message(kind: int, body: bytes) -> bytes:
    raw = struct.pack("=IHHII", 16 + len(body), kind, 0, 0, 0) + body
    return raw + b"\0" * (-len(raw) % 4)


def _link(kind: int, *, index: int, name: str) -> bytes:
    return _message(kind, struct.pack("=BxHiII", 0, 1, index, 0, 0) + _attr(IFLA_IFNAME, name.encode() + b"\0"))


def _addr(kind: int, *, index: int, family: int, prefix: int, attrs: bytes) -> bytes:
    return _message(kind, struct.pack("=BBBBI", family, prefix, 0, 0, index) + attrs)


def test_links_and_addresses_are_decoded_and_folded() -> None:
    data = (
        _link(RTM_NEWLINK, index=7, name="eth1")
        # a point-to-point IPv4 address: IFA_LOCAL is the interface's own, IFA_ADDRESS the peer's
        + _addr(
            RTM_NEWADDR,
            index=7,
            family=socket.AF_INET,
            prefix=24,
            attrs=_attr(IFA_ADDRESS, bytes([10, 0, 0, 9])) + _attr(IFA_LOCAL, bytes([10, 0, 0, 2])),
        )
        + _addr(
            RTM_NEWADDR,
            index=7,
            family=socket.AF_INET6,
            prefix=64,
            attrs=_attr(IFA_ADDRESS, bytes.fromhex("fd00" + "00" * 13 + "05")),
        )
        + _addr(
            RTM_DELADDR,
            index=7,
            family=socket.AF_INET6,
            prefix=64,
            attrs=_attr(IFA_ADDRESS, bytes.fromhex("fd00" + "00" * 13 + "05")),
        )
    )
    events = parse_rt_events(data)
    assert events == [
        LinkEvent(index=7, ifname="eth1", gone=False),
        AddressEvent(index=7, cidr="10.0.0.2/24", gone=False),
        AddressEvent(index=7, cidr="fd00::5/64", gone=False),
        AddressEvent(index=7, cidr="fd00::5/64", gone=True),
    ]
    assert NamespaceAddresses().fold(events).of(frozenset({"eth1", "eth2"})) == {"eth1": ("10.0.0.2/24",), "eth2": ()}


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (_link(RTM_NEWLINK, index=1, name="eth0")[:-4], "message of length 44 at byte 0 of 40"),
        (
            _message(RTM_NEWLINK, struct.pack("=BxHiII", 0, 1, 3, 0, 0) + struct.pack("=HH", 40, IFLA_IFNAME)),
            "runs past",
        ),
        (struct.pack("=IHHII", 64, RTM_NEWLINK, 0, 0, 0), "message of length 64"),
        (_message(NLMSG_OVERRUN, b""), "overrun"),
    ],
    ids=["torn-message", "attribute-past-its-message", "length-past-the-read", "overrun"],
)
def test_bytes_that_are_not_whole_notifications_are_refused(data: bytes, problem: str) -> None:
    with pytest.raises(RtnlError, match=problem):
        parse_rt_events(data)
