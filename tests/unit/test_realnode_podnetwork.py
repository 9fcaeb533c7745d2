"""The real node's pod network configuration: bridge names the reaper can read, a subnet clear of the host's routes,
the CNI chain ending in fakedev-netdevices; and the runc wrapper's text."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from harness.errors import ComponentError
from harness.realnode.podnetwork import (
    SUBNET_CANDIDATES,
    PodNetwork,
    bridge_name,
    pick_subnet,
    render_conflist,
    route_networks,
    run_of_bridge,
)
from harness.realnode.runc_wrapper import render_runc_wrapper


def test_bridge_names_carry_the_run_and_fit_ifnamsiz() -> None:
    name = bridge_name("0a1b2c3d")
    assert name == "fdbr0a1b2c3d" and len(name) <= 15
    assert run_of_bridge(name) == "0a1b2c3d"
    assert run_of_bridge("docker0") is None
    assert run_of_bridge("fdbr") is None
    assert run_of_bridge("fdbrNOTHEX") is None


def test_the_subnet_avoids_every_host_route_but_the_default() -> None:
    routes = route_networks([("", 0), ("10.200.0.0", 16), ("192.0.2.0", 24), ("10.201.0.128", 25)])
    assert ipaddress.ip_network("0.0.0.0/0") not in routes  # what netlink gives the default route: no destination
    assert pick_subnet(routes=routes) == ipaddress.ip_network("10.202.0.0/24")
    assert pick_subnet(routes=[]) == SUBNET_CANDIDATES[0]


def test_no_free_subnet_is_a_clear_error() -> None:
    with pytest.raises(ComponentError, match="overlaps a host route"):
        pick_subnet(routes=[ipaddress.ip_network("10.0.0.0/8")])


def test_the_conflist_is_one_bridge_network_ending_in_fakedev_netdevices(tmp_path: Path) -> None:
    network = PodNetwork(bridge="fdbr0a1b2c3d", subnet=ipaddress.IPv4Network("10.203.0.0/24"))
    conflist = json.loads(
        render_conflist(
            network=network, ipam_dir=tmp_path / "ipam", records=tmp_path / "rec", source_netns=Path("/run/netns/n")
        )
    )
    assert conflist["cniVersion"] == "1.0.0"  # no STATUS calls before the node is Ready
    assert [p["type"] for p in conflist["plugins"]] == ["bridge", "portmap", "fakedev-netdevices"]
    bridge = conflist["plugins"][0]
    assert bridge["bridge"] == "fdbr0a1b2c3d" and bridge["isGateway"] is True and bridge["ipMasq"] is False
    (range_,) = bridge["ipam"]["ranges"][0]
    assert range_ == {"subnet": "10.203.0.0/24", "gateway": "10.203.0.1"}
    assert "routes" not in bridge["ipam"]  # no default route: nothing a pod sends leaves the machine
    assert bridge["ipam"]["dataDir"] == str(tmp_path / "ipam")
    assert conflist["plugins"][2] == {
        "type": "fakedev-netdevices",
        "records": str(tmp_path / "rec"),
        "sourceNetns": "/run/netns/n",
    }
    assert network.gateway == ipaddress.ip_address("10.203.0.1")


def test_the_runc_wrapper_enters_the_nic_namespace_only_for_net_devices(tmp_path: Path) -> None:
    text = render_runc_wrapper(runc=Path("/c/runc"), records=tmp_path, nic_netns=Path("/run/netns/fakedev-x-host"))
    assert text.startswith("#!/bin/sh\n")
    assert 'exec nsenter --net=/run/netns/fakedev-x-host -- /c/runc "$@"' in text
    assert text.rstrip().endswith('exec /c/runc "$@"')
    plain = render_runc_wrapper(runc=Path("/c/runc"), records=tmp_path, nic_netns=None)
    assert "nsenter" not in plain
