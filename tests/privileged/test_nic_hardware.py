"""The emulated NICs after a power cycle: a NIC that was inside a pod comes back even while the kernel still holds
its old pair's fabric port (a namespace is torn down asynchronously)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakedev.nics.hardware import NicHardware, install, reinstall
from fakedev.nics.ports import NicPort
from harness.procs import RunDir, run_dir
from harness.runtime.netns import create_netns, delete_netns, netns_name
from linuxns import netlink, netns_path

pytestmark = pytest.mark.privileged

PORTS = (
    NicPort(ifname="enp1s0f0", mac="02:00:00:00:01:00", mtu=1500, port="p0"),
    NicPort(ifname="enp1s0f1", mac="02:00:00:00:01:01", mtu=1500, port="p1"),
)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[RunDir]:
    with run_dir(purpose="nichw", base=tmp_path) as rd:
        yield rd


def _links(netns: str) -> set[str]:
    with netlink(netns) as ipr:
        return {link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}


def test_a_nic_whose_pod_namespace_is_not_gone_yet_comes_back_after_a_power_cycle(run: RunDir) -> None:
    hw = NicHardware(
        node_netns=netns_name(run_id=run.run_id, suffix="host"),
        fabric_netns=netns_name(run_id=run.run_id, suffix="fabric"),
    )
    pod = netns_name(run_id=run.run_id, suffix="pod")
    try:
        install(hw, PORTS)
        create_netns(pod)
        # The pod held enp1s0f0; after the power cycle its namespace is still being torn down: the old pair's
        # fabric port p0 is still there when the hardware comes back.
        with netlink(hw.node_netns) as node, netns_path(pod).open("rb") as fd:
            (nic,) = node.link_lookup(ifname="enp1s0f0")
            node.link("set", index=nic, net_ns_fd=fd.fileno())
        assert "p0" in _links(hw.fabric_netns)
        reinstall(hw, PORTS)
        assert {"enp1s0f0", "enp1s0f1"} <= _links(hw.node_netns)
        assert "enp1s0f0" not in _links(pod)  # the stale pair went
        with netlink(hw.fabric_netns) as fab:
            (port,) = fab.get_links(*fab.link_lookup(ifname="p0"))
            assert port.get_attr("IFLA_IFALIAS") == "enp1s0f0"
        reinstall(hw, PORTS)  # nothing stale: nothing changes
        assert {"enp1s0f0", "enp1s0f1"} <= _links(hw.node_netns)
    finally:
        for name in (pod, hw.node_netns, hw.fabric_netns):
            delete_netns(name)
