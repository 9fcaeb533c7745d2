"""Fixtures for emulated nodes: fake node rigs (node emulator + fake plugins) on one background loop per test.

A rig's tear-down drains its pods and reports the network namespaces its node left behind; any such leak fails the
test that made it (the namespaces are removed either way).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakedev.cli.rig import FakeNodeRig, RigSite, RigSpec
from fakedev.render import Schema
from harness.cluster.local import LocalCluster
from harness.node.background import BackgroundLoop
from harness.reaper import reap_all
from kubeclient import KubeClient
from kubeclient.resources import DEVICE_CLASSES

RigFactory = Callable[..., FakeNodeRig]


@pytest.fixture
def node_rig_factory(local_cluster: LocalCluster, kube: KubeClient, unique_name: str) -> Iterator[RigFactory]:
    """``make(profile=..., schemas=..., suffix=..., wipe_grace=...)``: a node named after the test. Without a
    profile the node has no fake devices (for other drivers: ``rig.add_driver``); ``schemas=()`` (the default)
    installs the profile's hardware but starts no plugin yet (``rig.add_plugin``); None starts every schema's."""
    loop = BackgroundLoop()
    loop.start()
    base = Path(tempfile.mkdtemp(prefix="fd-"))
    site = RigSite(client=kube, kubeconfig=local_cluster.kubeconfig, loop=loop, base=base, rootfs_cache=base / "cache")
    rigs: list[FakeNodeRig] = []

    def make(
        *,
        suffix: str = "",
        wipe_grace: float = 30.0,
        profile: str | None = None,
        schemas: tuple[Schema, ...] | None = (),
    ) -> FakeNodeRig:
        rig = FakeNodeRig.start(
            RigSpec(name=f"{unique_name}{suffix}", profile=profile, schemas=schemas, wipe_grace=wipe_grace), site=site
        )
        rigs.append(rig)
        return rig

    yield make
    leaked: list[str] = []
    try:
        for rig in rigs:
            leaked += rig.stop(drain=True)
    finally:
        loop.stop()
        reap_all(base=base)
        shutil.rmtree(base, ignore_errors=True)
    assert not leaked, f"network namespaces the emulated nodes left behind: {leaked}"


@pytest.fixture
def seed_rig(node_rig_factory: RigFactory) -> FakeNodeRig:
    return node_rig_factory(profile="seed-example", schemas=None)


@pytest.fixture
def nic_class(kube: KubeClient, unique_name: str) -> Iterator[str]:
    """A DeviceClass of Ethernet PFs only: InfiniBand ports cannot be veths, and VFs would share the PF's root."""
    expression = (
        'device.driver == "dra.net" && device.attributes["dra.net"].encapsulation == "ether" && '
        '!("isSriovVf" in device.attributes["dra.net"]) && device.attributes["dra.net"].virtual == false'
    )
    kube.create(
        DEVICE_CLASSES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": unique_name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        },
    )
    yield unique_name
    kube.delete(DEVICE_CLASSES, unique_name)
