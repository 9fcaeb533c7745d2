"""The private dockerd's names and daemon.json (pure): run-scoped names the reaper can read back, and a config that
changes nothing outside the run."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from harness.docker.config import (
    DaemonPaths,
    bridge_address,
    bridge_name,
    cgroup_parent,
    render_daemon_config,
    run_of_bridge,
)
from harness.realnode.podnetwork import bridge_name as real_node_bridge


def test_the_bridge_name_fits_ifnamsiz_and_gives_its_run_back() -> None:
    name = bridge_name("0123abcd")
    assert len(name) <= 15
    assert run_of_bridge(name) == "0123abcd"


@pytest.mark.parametrize("ifname", ["eth0", "fdk", "fdkXYZ", real_node_bridge("0123abcd")], ids=str)
def test_other_interfaces_belong_to_no_docker_run(ifname: str) -> None:
    assert run_of_bridge(ifname) is None


def test_the_gateway_is_the_subnet_s_first_address() -> None:
    assert str(bridge_address(ipaddress.IPv4Network("10.201.0.0/24"))) == "10.201.0.1/24"


def test_the_config_keeps_state_in_the_run_and_touches_no_firewall() -> None:
    paths = DaemonPaths(root=Path("/tmp/fakedev-docker-0123abcd/docker"))
    config = json.loads(render_daemon_config(paths=paths, run_id="0123abcd"))
    assert config["data-root"].startswith(str(paths.root))
    assert config["exec-root"].startswith(str(paths.root))
    assert config["hosts"] == [f"unix://{paths.socket}"]
    assert config["bridge"] == "fdk0123abcd"
    assert config["cgroup-parent"] == f"/{cgroup_parent('0123abcd')}"
    assert (config["iptables"], config["ip-masq"], config["ip-forward"]) == (False, False, False)
    assert config["userland-proxy"] is True
