"""The real node's NIC plumbing, piece by piece with real namespaces: the runc wrapper runs runc inside the NIC
namespace only for specs with ``linux.netDevices`` (and records them), the fakedev-netdevices CNI plugin hands a
pod's interface back under its host name on DEL, and the reaper removes a dead run's pod-network bridge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.procs import SOURCE_ROOT, RunDir, open_run_dir
from harness.realnode.cni_netdevices import SANDBOX_ANNOTATION, render_launcher
from harness.realnode.podnetwork import bridge_name
from harness.realnode.runc_wrapper import render_runc_wrapper
from harness.reaper import reap_orphan_bridges
from harness.runtime.netns import create_netns, delete_netns, netlink, netns_name, netns_path

pytestmark = [pytest.mark.privileged]


@pytest.fixture
def run(tmp_path: Path) -> Iterator[RunDir]:
    rd = open_run_dir(purpose="rn", base=tmp_path)
    try:
        yield rd
    finally:
        for suffix in ("host", "pod"):
            delete_netns(netns_name(run_id=rd.run_id, suffix=suffix))
        rd.remove()


def _netns(run: RunDir, suffix: str) -> str:
    name = netns_name(run_id=run.run_id, suffix=suffix)
    create_netns(name)
    return name


def test_the_wrapper_runs_runc_in_the_nic_namespace_only_for_net_devices(run: RunDir) -> None:
    nic = _netns(run, "host")
    fake_runc = run.path / "runc"
    # Stands in for runc: says which network namespace it ran in and with which arguments.
    fake_runc.write_text('#!/bin/sh\nreadlink /proc/self/ns/net\necho "$@"\n')
    fake_runc.chmod(0o755)
    records = run.path / "records"
    records.mkdir()
    wrapper = run.path / "wrapper"
    wrapper.write_text(render_runc_wrapper(runc=fake_runc, records=records, nic_netns=netns_path(nic)))
    wrapper.chmod(0o755)
    with_nic, plain = run.path / "b-nic", run.path / "b-plain"
    for bundle, spec in ((with_nic, {"linux": {"netDevices": {"eth3": {"name": "net1"}}}}), (plain, {"linux": {}})):
        bundle.mkdir()
        (bundle / "config.json").write_text(json.dumps(spec))

    def ran(*args: str) -> list[str]:
        return subprocess.run([str(wrapper), *args], capture_output=True, text=True, check=True).stdout.splitlines()

    nic_ns = f"net:[{netns_path(nic).stat().st_ino}]"
    host_ns = str(Path("/proc/self/ns/net").readlink())
    assert ran("--root", "/r", "create", "--bundle", str(with_nic), "c1") == [
        nic_ns,
        f"--root /r create --bundle {with_nic} c1",
    ]
    assert json.loads((records / "b-nic.json").read_text())["linux"]["netDevices"] == {"eth3": {"name": "net1"}}
    assert ran("create", f"--bundle={plain}", "c2")[0] == host_ns
    assert ran("state", "c1")[0] == host_ns  # calls without a bundle stay where containerd is
    assert sorted(p.name for p in records.iterdir()) == ["b-nic.json"]


def test_del_hands_the_interface_back_under_its_host_name(run: RunDir) -> None:
    node, pod = _netns(run, "host"), _netns(run, "pod")
    # A NIC as runc leaves it: moved into the pod's namespace and renamed.
    with netlink(node) as ip:
        ip.link("add", ifname="eth7", kind="veth", peer={"ifname": "eth7peer"})
        (idx,) = ip.link_lookup(ifname="eth7")
        mac = ip.get_links(idx)[0].get_attr("IFLA_ADDRESS")
        with netns_path(pod).open("rb") as fd:
            ip.link("set", index=idx, net_ns_fd=fd.fileno())
    with netlink(pod) as ip:
        (idx,) = ip.link_lookup(ifname="eth7")
        ip.link("set", index=idx, ifname="net1")
    records = run.path / "records"
    records.mkdir()
    spec = {"annotations": {SANDBOX_ANNOTATION: "sandbox-1"}, "linux": {"netDevices": {"eth7": {"name": "net1"}}}}
    (records / "c1.json").write_text(json.dumps(spec))
    plugin = run.path / "fakedev-netdevices"
    plugin.write_text(render_launcher(python=sys.executable, sys_path=str(SOURCE_ROOT)))
    plugin.chmod(0o755)
    config = {"cniVersion": "1.0.0", "name": "fakedev", "records": str(records), "sourceNetns": str(netns_path(node))}
    done = subprocess.run(
        [str(plugin)],
        input=json.dumps(config),
        capture_output=True,
        text=True,
        env={**os.environ, "CNI_COMMAND": "DEL", "CNI_NETNS": str(netns_path(pod)), "CNI_CONTAINERID": "sandbox-1",
             "CNI_IFNAME": "eth0", "CNI_PATH": str(run.path)},
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    with netlink(node) as ip:
        (back,) = ip.link_lookup(ifname="eth7")
        assert ip.get_links(back)[0].get_attr("IFLA_ADDRESS") == mac
    with netlink(pod) as ip:
        assert not ip.link_lookup(ifname="net1")
    assert not list(records.iterdir())  # the record is handled, and no errors were logged


def test_the_reaper_removes_a_dead_runs_bridge(tmp_path: Path) -> None:
    dead = "0badc0de"  # no run directory and no process carries this id
    name = bridge_name(dead)
    with netlink(None) as ip:
        ip.link("add", ifname=name, kind="bridge")
    try:
        assert name in reap_orphan_bridges(base=tmp_path)
        with netlink(None) as ip:
            assert not ip.link_lookup(ifname=name)
    finally:
        with netlink(None) as ip:
            for idx in ip.link_lookup(ifname=name):
                ip.link("del", index=idx)
