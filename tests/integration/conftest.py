"""Fixtures for tests that run the fake plugin as a process against the worker's control plane."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from fakedev.cli.rig import plugin_command
from fakedev.plugin.paths import PluginPaths
from fakedev.render import Schema
from harness.cluster.local import LocalCluster
from harness.cluster.nodes import NodeHeartbeats, delete_node, register_node
from harness.node.drivers import DriverContext, render_driver_argv
from harness.procs import wait_for
from kubeclient import KubeClient
from kubeclient.resources import CUSTOM_RESOURCE_DEFINITIONS, DEVICE_CLASSES, DEVICE_FAULTS, RESOURCE_SLICES
from tests.helpers import EXAMPLE_DRIVER, device_class_body, driver_is

FAKEDEV = Path(sys.executable).parent / "fakedev"


@dataclass(kw_only=True)
class PluginProcess:
    """A `fakedev plugin` process with private kubelet root, CDI dir and log."""

    node: str
    driver: str
    root: Path
    cdi_dir: Path
    log_path: Path
    argv: list[str]
    rolling_update_uid: str | None = None
    popen: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)
    umask: int | None = None
    """The process's umask; None: the test runner's."""

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def paths(self) -> PluginPaths:
        return PluginPaths(
            kubelet_root=self.kubelet_root, driver=self.driver, rolling_update_uid=self.rolling_update_uid
        )

    @property
    def plugin_dir(self) -> Path:
        return self.paths.plugin_dir

    @property
    def registration_socket(self) -> Path:
        return self.paths.registration_socket

    @property
    def dra_socket(self) -> Path:
        return self.paths.dra_socket

    @property
    def checkpoint(self) -> Path:
        return self.plugin_dir / "checkpoint.json"

    def _starts(self) -> int:
        return self.log().count("plugin ready") if self.log_path.exists() else 0

    def start(self) -> None:
        # A killed predecessor leaves its socket behind, so wait for this process to say it serves.
        before = self._starts()
        with self.log_path.open("ab") as log:
            # The parent-death signal keeps a crashed test run from leaving plugins behind.
            self.popen = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", "--", *self.argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                umask=-1 if self.umask is None else self.umask,
            )
        wait_for(
            lambda: self._starts() > before,
            timeout=20,
            what=f"{self.registration_socket}",
            abort=lambda: None if self.alive() else AssertionError(f"plugin exited:\n{self.log()}"),
        )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.popen is not None
        self.popen.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.popen.wait(timeout=20)

    def stop(self) -> None:
        if self.alive():
            self.kill(signal.SIGTERM)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp dir with a short path: Unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="fd-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def plugin_factory(local_cluster: LocalCluster, short_tmp: Path) -> Iterator[Callable[..., PluginProcess]]:
    started: list[PluginProcess] = []

    def make(
        *,
        node: str,
        profile: str = "seed-example",
        driver: str = "gpu.example.com",
        schema: str | None = None,
        rolling_update_uid: str | None = None,
        extra: tuple[str, ...] = (),
        start: bool = True,
        root: Path | None = None,
        env: dict[str, str] | None = None,
        umask: int | None = None,
    ) -> PluginProcess:
        base = root or short_tmp / f"p{len(started)}"
        base.mkdir(parents=True, exist_ok=True)
        rolling = ("--rolling-update-uid", rolling_update_uid) if rolling_update_uid else ()
        argv = render_driver_argv(
            plugin_command(profile=profile, schema=Schema(schema) if schema else None, extra=(*rolling, *extra)),
            context=DriverContext(
                node=node, kubelet_root=base / "kubelet", cdi_dir=base / "cdi", kubeconfig=local_cluster.kubeconfig
            ),
        )
        proc = PluginProcess(
            node=node,
            driver=driver,
            root=base,
            cdi_dir=base / "cdi",
            log_path=base / "plugin.log",
            argv=argv,
            rolling_update_uid=rolling_update_uid,
            env=env or {},
            umask=umask,
        )
        started.append(proc)
        if start:
            proc.start()
        return proc

    yield make
    for proc in started:
        proc.stop()


@pytest.fixture
def emulated_node(kube: KubeClient, unique_name: str, node_heartbeats: NodeHeartbeats) -> Iterator[str]:
    """A registered, Ready emulated Node; its slices and the Node are removed afterwards."""
    register_node(kube, name=unique_name)
    node_heartbeats.add(unique_name)
    yield unique_name
    node_heartbeats.discard(unique_name)
    for s in kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={unique_name}"):
        kube.delete(RESOURCE_SLICES, s["metadata"]["name"])
    delete_node(kube, name=unique_name)


@pytest.fixture
def device_class(kube: KubeClient, unique_name: str) -> Iterator[Callable[..., str]]:
    created: list[str] = []

    def make(*, driver: str = EXAMPLE_DRIVER, expression: str | None = None, suffix: str = "") -> str:
        name = f"{unique_name}{suffix}"
        cel = expression or driver_is(driver)
        kube.create(DEVICE_CLASSES, device_class_body(name=name, expression=cel))
        created.append(name)
        return name

    yield make
    for name in created:
        kube.delete(DEVICE_CLASSES, name)


DEVICE_FAULT_CRD = Path(__file__).parents[2] / "deploy/helm/fakedev/crds/devicefaults.fakedev.io.yaml"


@pytest.fixture(scope="session")
def device_fault_crd(local_cluster: LocalCluster) -> str:
    """The shipped DeviceFault CRD, installed once per control plane and served (its name)."""
    kube = KubeClient.from_kubeconfig(local_cluster.kubeconfig)
    body = yaml.safe_load(DEVICE_FAULT_CRD.read_text())
    name: str = body["metadata"]["name"]
    if kube.get_or_none(CUSTOM_RESOURCE_DEFINITIONS, name) is None:
        kube.create(CUSTOM_RESOURCE_DEFINITIONS, body)

    def established() -> bool:
        crd = kube.get(CUSTOM_RESOURCE_DEFINITIONS, name)
        conditions = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
        kube.list(DEVICE_FAULTS)  # served, not only accepted
        return conditions.get("Established") == "True"

    wait_for(established, timeout=30, what=f"CRD {name} established")
    return name


@pytest.fixture
def device_faults(kube: KubeClient, device_fault_crd: str) -> Iterator[list[str]]:
    """Names of DeviceFaults a test created; they are deleted afterwards (cluster-scoped, so nobody else would)."""
    names: list[str] = []
    yield names
    for name in names:
        kube.delete(DEVICE_FAULTS, name)
