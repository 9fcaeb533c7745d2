"""The address watcher folds the kernel's notifications instead of dumping the namespace: after every kind of change
a NIC goes through (addresses added and removed, a rename, a move out and back, a deletion) its snapshot equals a
fresh dump's, in a namespace the test makes."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakedev.nics.addresses import Addresses, AddressWatcher, read_addresses
from harness.procs import RunDir, open_run_dir
from harness.runtime.netns import create_netns, delete_netns, netns_name
from linuxns import netlink

NAMES = frozenset({"w0", "w1", "w2"})


@pytest.fixture
def run(tmp_path: Path) -> Iterator[RunDir]:
    rd = open_run_dir(purpose="addr", base=tmp_path)
    yield rd
    rd.remove()


def test_the_watchers_snapshot_follows_every_change_without_dumps(run: RunDir) -> None:
    node, away = netns_name(run_id=run.run_id, suffix="node"), netns_name(run_id=run.run_id, suffix="away")
    create_netns(node)
    create_netns(away)
    snapshots: queue.Queue[Addresses] = queue.Queue()
    watcher = AddressWatcher(netns=node, ifnames=NAMES, on_change=snapshots.put)
    try:
        with netlink(node) as ipr:
            ipr.link("add", ifname="w0", kind="veth", peer={"ifname": "p0"})
            ipr.link("add", ifname="w1", kind="veth", peer={"ifname": "p1"})
        watcher.start()
        assert snapshots.get(timeout=10) == {"w0": (), "w1": (), "w2": ()}

        def settles_at(expected: Addresses) -> None:
            """Snapshots arrive until the watcher reports ``expected``, which a dump must agree with."""
            seen = snapshots.get(timeout=10)
            while seen != expected:
                seen = snapshots.get(timeout=10)
            assert read_addresses(node, ifnames=NAMES) == expected

        with netlink(node) as ipr:
            w0, w1 = ipr.link_lookup(ifname="w0")[0], ipr.link_lookup(ifname="w1")[0]
            ipr.addr("add", index=w0, address="10.61.0.2", prefixlen=24)
            ipr.addr("add", index=w0, address="fd61::2", prefixlen=64)
            ipr.addr("add", index=w1, address="10.62.0.2", prefixlen=16)
        settles_at({"w0": ("10.61.0.2/24", "fd61::2/64"), "w1": ("10.62.0.2/16",), "w2": ()})

        with netlink(node) as ipr:
            ipr.addr("del", index=w0, address="10.61.0.2", prefixlen=24)
            ipr.link("set", index=w1, ifname="w2")  # a rename keeps the index and its addresses
        settles_at({"w0": ("fd61::2/64",), "w1": (), "w2": ("10.62.0.2/16",)})

        with netlink(node) as ipr:
            ipr.link("set", index=w0, net_ns_fd=f"/var/run/netns/{away}")  # moved out: gone with its addresses
        settles_at({"w0": (), "w1": (), "w2": ("10.62.0.2/16",)})

        with netlink(away) as ipr:
            back = ipr.link_lookup(ifname="w0")[0]
            ipr.link("set", index=back, net_ns_fd=f"/var/run/netns/{node}")
        with netlink(node) as ipr:
            w0 = ipr.link_lookup(ifname="w0")[0]
            ipr.addr("add", index=w0, address="10.61.0.9", prefixlen=24)
            ipr.link("del", index=ipr.link_lookup(ifname="w2")[0])
        settles_at({"w0": ("10.61.0.9/24",), "w1": (), "w2": ()})
    finally:
        watcher.stop()
        delete_netns(node)
        delete_netns(away)
