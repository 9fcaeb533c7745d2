"""The real node's pod network (pure: names and numbers in, CNI configuration out).

One CNI network per node: a Linux bridge in the host's namespace whose name carries the run id (``fdbr<id>``, so
the reaper can tell whose it is), a private /24 that clashes with no route of the host, addresses from
``host-local`` kept in the node's private ``/var/lib``, and ``portmap`` for ``hostPort``. The bridge holds the
gateway address, so the host reaches pods, but pods get no default route: nothing a pod sends leaves the machine.
``cniVersion`` 1.0.0 keeps containerd from calling the plugins' STATUS (1.1.0+) before the node is Ready.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness.errors import ComponentError

CNI_VERSION: Final = "1.0.0"
NETWORK_NAME: Final = "fakedev"
CONFLIST_NAME: Final = "10-fakedev.conflist"
PLUGINS: Final = ("bridge", "host-local", "loopback", "portmap")
"""The CNI plugin binaries the node's containerd needs (``loopback`` for its own ``lo`` network)."""
NETDEVICES_PLUGIN: Final = "fakedev-netdevices"
BRIDGE_PREFIX: Final = "fdbr"
SUBNET_CANDIDATES: Final = tuple(ipaddress.IPv4Network(f"10.{x}.0.0/24") for x in range(200, 250))


@dataclass(frozen=True, kw_only=True)
class PodNetwork:
    bridge: str
    subnet: ipaddress.IPv4Network

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        return self.subnet.network_address + 1


def bridge_name(run_id: str) -> str:
    """``fdbr<run id>``: 12 characters, within IFNAMSIZ, and the reaper can find the run it belongs to."""
    return f"{BRIDGE_PREFIX}{run_id}"


def run_of_bridge(ifname: str) -> str | None:
    """The run id in a bridge name this module made, else ``None``."""
    if not ifname.startswith(BRIDGE_PREFIX):
        return None
    rest = ifname.removeprefix(BRIDGE_PREFIX)
    return rest if rest and all(c in "0123456789abcdef" for c in rest) else None


def pick_subnet(*, routes: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> ipaddress.IPv4Network:
    """The first candidate /24 that overlaps no route of the host (the default route does not count)."""
    taken = [r for r in routes if r.version == 4 and r.prefixlen > 0]
    for candidate in SUBNET_CANDIDATES:
        if not any(candidate.overlaps(r) for r in taken):
            return candidate
    raise ComponentError(
        f"every pod subnet fakedev tries ({SUBNET_CANDIDATES[0]} … {SUBNET_CANDIDATES[-1]}) overlaps a host route"
    )


def render_conflist(*, network: PodNetwork, ipam_dir: Path, records: Path, source_netns: Path | None) -> str:
    """The node's one CNI network: bridge + host-local, portmap (``hostPort``), then ``fakedev-netdevices``, which
    hands claimed NICs back on ``DEL`` (plugins are deleted in reverse order: it runs first)."""
    conflist = {
        "cniVersion": CNI_VERSION,
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": network.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(network.subnet), "gateway": str(network.gateway)}]],
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {
                "type": NETDEVICES_PLUGIN,
                "records": str(records),
                "sourceNetns": str(source_netns) if source_netns is not None else "",
            },
        ],
    }
    return json.dumps(conflist, indent=2) + "\n"


def route_networks(destinations: Sequence[tuple[str, int]]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Routes as (destination, prefix length) pairs — what netlink reports — as networks."""
    return [ipaddress.ip_network(f"{dst}/{length}", strict=False) for dst, length in destinations if dst]
