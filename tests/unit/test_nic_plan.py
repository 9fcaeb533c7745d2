"""What a prepared NIC becomes in the pod (fakedev.nics.plan): names, addresses, MTU and MAC."""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from typing import Any

import pytest

from fakedev.driver.config import DeviceConfig
from fakedev.errors import ClaimError
from fakedev.nics.plan import NicAssignment, compute_assignment, compute_ipv6_pool, compute_pool

NODE = "node-n"


def _assign(
    *,
    config: DeviceConfig | None = None,
    used_names: Collection[str] = (),
    used_addresses: Collection[str] = (),
    ipv6: bool = False,
    claim_uid: str = "uid-1",
    device: str = "pci-0000-08-00-0",
) -> NicAssignment:
    return compute_assignment(
        node_name=NODE,
        claim_uid=claim_uid,
        device=device,
        host_ifname="enp8s0f0np0",
        default_mtu=9000,
        config=config or DeviceConfig(),
        used_names=used_names,
        used_addresses=used_addresses,
        ipv6=ipv6,
    )


def _pool_host(n: int) -> str:
    pool = compute_pool(NODE)
    return f"{pool.network_address + n}/{pool.prefixlen}"


@pytest.mark.parametrize(
    ("used", "expected"),
    [((), "net1"), (("net1",), "net2"), (("net1", "net3"), "net2"), (("net1", "net2", "data0"), "net3")],
    ids=["none-used", "first-used", "gap", "other-names-ignored"],
)
def test_default_name_is_the_lowest_free_net_n(used: tuple[str, ...], expected: str) -> None:
    assert _assign(used_names=used).pod_ifname == expected


def test_configured_name_is_used() -> None:
    assert _assign(config=DeviceConfig(interface_name="data0"), used_names={"net1"}).pod_ifname == "data0"


def test_configured_name_held_by_another_claim_is_refused() -> None:
    with pytest.raises(ClaimError, match="interface name data0 is already used by another claim on this node"):
        _assign(config=DeviceConfig(interface_name="data0"), used_names={"data0"})


def test_pool_is_a_slash_24_of_ten_slash_8_chosen_by_node() -> None:
    pool = compute_pool(NODE)
    assert pool.prefixlen == 24 and pool.subnet_of(ipaddress.IPv4Network("10.0.0.0/8"))
    assert compute_pool(NODE) == pool


@pytest.mark.parametrize(
    ("used", "expected"),
    [((), 2), ((2,), 3), ((2, 3, 5), 4)],
    ids=["first-free-skips-network-and-gateway", "next-after-used", "gap"],
)
def test_pool_addresses_skip_network_gateway_and_used_ones(used: tuple[int, ...], expected: int) -> None:
    assert _assign(used_addresses=[_pool_host(n) for n in used]).addresses == (_pool_host(expected),)


def test_exhausted_pool_is_an_error() -> None:
    every_host = [_pool_host(n) for n in range(2, 255)]
    with pytest.raises(ClaimError, match=rf"the address pool {compute_pool(NODE)} of this node is exhausted"):
        _assign(used_addresses=every_host)


@pytest.mark.parametrize(
    ("addresses", "used", "error"),
    [
        (("192.168.7.5",), (), "addresses: '192.168.7.5' needs a prefix length"),
        (("nope/24",), (), "addresses: 'nope/24' is not an address in CIDR form"),
        (("192.168.7.5/24",), ("192.168.7.5/16",), "address 192.168.7.5 is already assigned to another claim"),
    ],
    ids=["missing-prefix", "not-an-address", "taken"],
)
def test_configured_addresses_are_validated(addresses: tuple[str, ...], used: tuple[str, ...], error: str) -> None:
    with pytest.raises(ClaimError, match=error):
        _assign(config=DeviceConfig(addresses=addresses), used_addresses=used)


def test_configured_addresses_replace_the_pool() -> None:
    config = DeviceConfig(addresses=("192.168.7.5/24", "fd00::5/64"))
    assert _assign(config=config, used_addresses=[_pool_host(2)]).addresses == ("192.168.7.5/24", "fd00::5/64")


def test_ipv6_is_added_from_the_node_pool_when_asked() -> None:
    a = _assign(ipv6=True)
    v6 = compute_ipv6_pool(NODE)
    assert a.addresses == (_pool_host(2), f"{v6.network_address + 2}/64")


def test_ipv6_is_not_added_when_configured_addresses_have_one() -> None:
    config = DeviceConfig(addresses=("192.168.7.5/24", "fd00::5/64"))
    assert _assign(config=config, ipv6=True).addresses == ("192.168.7.5/24", "fd00::5/64")


@pytest.mark.parametrize(
    ("config", "mtu"),
    [(DeviceConfig(), 9000), (DeviceConfig(mtu=1400), 1400)],
    ids=["hardware-default", "configured"],
)
def test_mtu_is_the_configured_one_or_the_hardware_default(config: DeviceConfig, mtu: int) -> None:
    assert _assign(config=config).mtu == mtu


@pytest.mark.parametrize(
    ("change", "same"),
    [({}, True), ({"claim_uid": "uid-2"}, False), ({"device": "veth-fast0"}, False)],
    ids=["same-inputs", "other-claim", "other-device"],
)
def test_mac_is_deterministic_per_claim_and_device(change: dict[str, Any], same: bool) -> None:
    mac = _assign().mac
    other = _assign(**change).mac
    assert (other == mac) is same
    first_octet = int(other.split(":")[0], 16)
    assert first_octet & 0x02 and not first_octet & 0x01  # locally administered unicast
