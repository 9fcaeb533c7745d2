"""Fixtures for emulated nodes: a node emulator on a background loop plus the fake plugin as its driver."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fakedev.model.inventory import resolve_inventory
from fakedev.nics.hardware import remove as remove_hardware
from fakedev.nics.node import NodeNics, install_node_nics
from fakedev.profiles import load_profile
from harness.cluster.local import LocalCluster
from harness.node.background import BackgroundLoop, BackgroundNode
from harness.node.drivers import DriverContext, DriverProcess, template_driver
from harness.node.emulator import NodeEmulator, NodeSettings, node_run_id
from harness.runtime.netns import clean_run_netns, delete_netns, list_run_netns
from kubeclient import KubeClient
from kubeclient.resources import NODES, PODS, RESOURCE_SLICES


def fake_plugin_command(*, profile: str, schema: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    return (
        sys.executable,
        "-m",
        "fakedev",
        "plugin",
        "--profile",
        profile,
        "--schema",
        schema,
        "--node-name",
        "{node}",
        "--kubelet-root",
        "{kubelet_root}",
        "--cdi-dir",
        "{cdi_dir}",
        "--kubeconfig",
        "{kubeconfig}",
        *extra,
    )


@dataclass(kw_only=True)
class NodeRig:
    """An emulated node and the driver processes serving it."""

    background: BackgroundNode
    kubeconfig: Path
    nics: NodeNics | None = None
    drivers: list[DriverProcess] = field(default_factory=list)

    @property
    def node(self) -> NodeEmulator:
        assert self.background.node is not None
        return self.background.node

    @property
    def name(self) -> str:
        return self.background.settings.name

    def add_driver(
        self, template: tuple[str, ...], *, name: str = "plugin", wait_for: str | None = None
    ) -> DriverProcess:
        node = self.node
        driver = DriverProcess(
            name=f"{name}-{len(self.drivers)}",
            spec=template_driver(template),
            context=DriverContext(
                node=self.name, kubelet_root=node.paths.kubelet_root, cdi_dir=node.paths.cdi, kubeconfig=self.kubeconfig
            ),
            run=node.run,
        )
        driver.start()
        self.drivers.append(driver)
        if wait_for is not None:
            self.wait_registered(wait_for)
        return driver

    def wait_registered(self, driver: str, *, timeout: float = 20.0) -> None:
        self.background.loop.call(self.node.plugins.wait_registered(driver, timeout=timeout), timeout=timeout + 5)


@pytest.fixture
def node_rig_factory(
    local_cluster: LocalCluster, kube: KubeClient, unique_name: str
) -> Iterator[Callable[..., NodeRig]]:
    loop = BackgroundLoop()
    loop.start()
    base = Path(tempfile.mkdtemp(prefix="fd-"))
    rigs: list[NodeRig] = []
    hardware: list[NodeNics] = []

    def make(*, suffix: str = "", wipe_grace: float = 30.0, nic_profile: str | None = None) -> NodeRig:
        name = f"{unique_name}{suffix}"
        nics = None
        if nic_profile is not None:
            nics = install_node_nics(
                resolve_inventory(load_profile(nic_profile), node_name=name),
                node_run_id=node_run_id(name),
                fabric_run_id=node_run_id(name),
            )
            hardware.extend([nics] if nics else [])
        settings = NodeSettings(
            name=name,
            base=base,
            slice_wipe_grace=wipe_grace,
            rootfs_cache=base / "cache",
            node_netns=nics.hardware.node_netns if nics else None,
        )
        rig = NodeRig(
            background=BackgroundNode(settings=settings, client=kube, loop=loop),
            kubeconfig=local_cluster.kubeconfig,
            nics=nics,
        )
        rig.background.start()
        _USED_RUN_IDS.add(rig.node.run.run_id)
        rigs.append(rig)
        return rig

    yield make
    try:
        for rig in rigs:
            for d in rig.drivers:
                d.stop()
            for pod in kube.list(PODS, field_selector=f"spec.nodeName={rig.name}"):
                kube.delete(PODS, pod["metadata"]["name"], namespace=pod["metadata"]["namespace"], grace_seconds=0)
            try:
                rig.background.stop(stop_pods=True)
            finally:
                # Even when stopping timed out, nothing of the node may stay behind.
                clean_run_netns(node_run_id(rig.name))
            for s in kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={rig.name}"):
                kube.delete(RESOURCE_SLICES, s["metadata"]["name"])
            kube.delete(NODES, rig.name)
    finally:
        for nics in hardware:
            remove_hardware(nics.hardware)
            delete_netns(nics.hardware.fabric_netns)
        loop.stop()
    from harness.reaper import reap_all

    reap_all(base=base)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def seed_rig(node_rig_factory: Callable[..., NodeRig]) -> NodeRig:
    rig = node_rig_factory()
    rig.add_driver(fake_plugin_command(profile="seed-example", schema="example"), wait_for="gpu.example.com")
    return rig


_USED_RUN_IDS: set[str] = set()


@pytest.fixture(scope="session", autouse=True)
def no_leaked_namespaces() -> Iterator[None]:
    """After this worker's tests, none of the namespaces its emulated nodes made may remain."""
    yield
    leaked = [n for rid in sorted(_USED_RUN_IDS) for n in list_run_netns(rid)]
    assert not leaked, f"network namespaces left behind: {leaked}"
