"""What a prepared NIC becomes inside the pod (pure): interface name, MAC, MTU and addresses.

Names default to ``net<N>`` with N the lowest number free on the node (so two claims in one pod never collide); MACs
are deterministic and locally administered; IPv4 addresses come from the node's /24 pool (or the claim's config),
never handed out twice, and go back to the pool on unprepare.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Final

from fakedev.driver.config import DeviceConfig
from fakedev.errors import ClaimError
from fakedev.model.identity import mac_address

POOL_PREFIX: Final = 24


@dataclass(frozen=True, kw_only=True)
class NicAssignment:
    device: str
    host_ifname: str
    pod_ifname: str
    mac: str
    mtu: int
    addresses: tuple[str, ...]
    """CIDR form, e.g. 10.23.7.2/24."""


@dataclass(frozen=True, kw_only=True)
class HostNic:
    """A NIC function as the node has it before prepare: the name, MAC and MTU unprepare gives back."""

    ifname: str
    mac: str
    mtu: int


@dataclass(frozen=True, kw_only=True)
class PreparedNic:
    """A NIC as prepare configures it on the node: what the pod gets, and the hardware MAC/MTU to restore later."""

    assignment: NicAssignment
    hardware_mac: str
    hardware_mtu: int


def compute_pool(node_name: str) -> ipaddress.IPv4Network:
    """A /24 of 10.0.0.0/8 chosen from the node name, so nodes rarely share one and runs are reproducible."""
    digest = hashlib.sha256(f"fakedev-pool/{node_name}".encode()).digest()
    return ipaddress.IPv4Network(f"10.{digest[0]}.{digest[1]}.0/{POOL_PREFIX}")


def compute_ipv6_pool(node_name: str) -> ipaddress.IPv6Network:
    digest = hashlib.sha256(f"fakedev-pool6/{node_name}".encode()).digest()
    return ipaddress.IPv6Network(
        f"fd{digest[0]:02x}:{digest[1]:02x}{digest[2]:02x}:{digest[3]:02x}{digest[4]:02x}::/64"
    )


def _free_name(used: Collection[str]) -> str:
    n = 1
    while f"net{n}" in used:
        n += 1
    return f"net{n}"


def _free_address(pool: ipaddress.IPv4Network | ipaddress.IPv6Network, used: Collection[str]) -> str:
    taken = {ipaddress.ip_interface(a).ip for a in used}
    for host in pool.hosts():
        if int(host) - int(pool.network_address) < 2:
            continue  # .1 stays free for a gateway a user may add
        if host not in taken:
            return f"{host}/{pool.prefixlen}"
    raise ClaimError(f"the address pool {pool} of this node is exhausted")


def check_addresses(addresses: Iterable[str], *, used: Collection[str]) -> tuple[str, ...]:
    """Validate configured addresses (CIDR form) and refuse any already held by another claim."""
    taken = {ipaddress.ip_interface(a).ip for a in used}
    out = []
    for a in addresses:
        try:
            iface = ipaddress.ip_interface(a)
        except ValueError as exc:
            raise ClaimError(f"invalid opaque config: addresses: {a!r} is not an address in CIDR form") from exc
        if "/" not in a:
            raise ClaimError(f"invalid opaque config: addresses: {a!r} needs a prefix length (CIDR form)")
        if iface.ip in taken:
            raise ClaimError(f"address {iface.ip} is already assigned to another claim on this node")
        out.append(str(iface))
    return tuple(out)


def claim_mac(*, node_name: str, claim_uid: str, device: str) -> str:
    """The MAC prepare gives ``device`` for claim ``claim_uid``: derived from the UID, so unprepare recognises a NIC
    a prepare configured even when the plugin died before recording the claim."""
    return mac_address(node=node_name, key=f"pod-nic/{claim_uid}/{device}")


def compute_assignment(
    *,
    node_name: str,
    claim_uid: str,
    device: str,
    host_ifname: str,
    default_mtu: int,
    config: DeviceConfig,
    used_names: Collection[str],
    used_addresses: Collection[str],
    ipv6: bool,
) -> NicAssignment:
    if config.interface_name is not None and config.interface_name in used_names:
        raise ClaimError(f"interface name {config.interface_name} is already used by another claim on this node")
    addresses = (
        check_addresses(config.addresses, used=used_addresses)
        if config.addresses
        else (_free_address(compute_pool(node_name), used_addresses),)
    )
    if ipv6 and not any(ipaddress.ip_interface(a).version == 6 for a in addresses):
        addresses = (*addresses, _free_address(compute_ipv6_pool(node_name), used_addresses))
    return NicAssignment(
        device=device,
        host_ifname=host_ifname,
        pod_ifname=config.interface_name or _free_name(used_names),
        mac=claim_mac(node_name=node_name, claim_uid=claim_uid, device=device),
        mtu=config.mtu or default_mtu,
        addresses=addresses,
    )
