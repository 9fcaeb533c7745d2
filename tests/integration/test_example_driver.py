"""The DRA example driver (sigs.k8s.io/dra-example-driver), a driver we did not write, driven by our kubelet side."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import cdi
from harness.cluster.local import LocalCluster
from harness.conformance.exdriver import (
    DRIVER_NAME,
    ExampleDriverLayout,
    build_example_driver,
    example_driver_env,
    render_example_driver_args,
)
from harness.node.dra_client import DraConnection
from harness.node.registration import handshake
from harness.procs import wait_for
from harness.runtime.oci import render_container_spec
from kubeclient import JsonObj, KubeClient
from kubeletapi import DRA_V1_VERSION, DRA_V1BETA1_VERSION
from kubeletapi.types import ClaimRef, PrepareResult
from tests.helpers import allocated_claim, claim_body, claim_ref, node_slices

# All tests share one worker under --dist loadgroup, so the binary is built (when missing) by one process only.
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group(name="dra-example-driver")]

NUM_DEVICES = 4


@pytest.fixture(scope="session")
def example_driver_binary_path() -> Path:
    # Builds on first use (about 1.5 min cold) so the suite does not depend on a separate make step; cached after.
    return build_example_driver(progress=lambda _message: None)


@dataclass(frozen=True, kw_only=True)
class RunningDriver:
    node: str
    layout: ExampleDriverLayout
    popen: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def example_driver(
    example_driver_binary_path: Path, local_cluster: LocalCluster, emulated_node: str, short_tmp: Path
) -> Iterator[RunningDriver]:
    layout = ExampleDriverLayout(kubelet_root=short_tmp / "kubelet", cdi_dir=short_tmp / "cdi")
    # The kubelet owns the registration directory; the driver only binds a socket in it and fails if it is missing.
    layout.registrar_dir.mkdir(parents=True)
    argv = render_example_driver_args(
        binary=example_driver_binary_path,
        node_name=emulated_node,
        kubelet_root=layout.kubelet_root,
        cdi_dir=layout.cdi_dir,
        kubeconfig=local_cluster.kubeconfig,
        num_devices=NUM_DEVICES,
    )
    log_path = short_tmp / "driver.log"
    with log_path.open("wb") as log:
        # The parent-death signal keeps a crashed test run from leaving the driver behind.
        popen = subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", "--", *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=example_driver_env(base=os.environ, node_name=emulated_node),
        )
    driver = RunningDriver(node=emulated_node, layout=layout, popen=popen, log_path=log_path)
    try:
        wait_for(
            lambda: stat.S_ISSOCK(layout.registration_socket.stat().st_mode),
            timeout=30,
            what=f"{layout.registration_socket}",
            abort=lambda: None if popen.poll() is None else AssertionError(f"driver exited:\n{driver.log()}"),
        )
        yield driver
    finally:
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
            try:
                popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()


def _prepare(driver: RunningDriver, ref: ClaimRef, *, version: str) -> PrepareResult:
    async def call() -> dict[str, PrepareResult]:
        conn = DraConnection(endpoint=driver.layout.dra_socket)
        try:
            return await conn.prepare([ref], version=version)
        finally:
            await conn.close()

    results = asyncio.run(call())
    assert set(results) == {ref.uid}
    return results[ref.uid]


def _unprepare(driver: RunningDriver, ref: ClaimRef) -> dict[str, str]:
    async def call() -> dict[str, str]:
        conn = DraConnection(endpoint=driver.layout.dra_socket)
        try:
            return await conn.unprepare([ref], version=DRA_V1_VERSION)
        finally:
            await conn.close()

    return asyncio.run(call())


def _allocated(kube: KubeClient, driver: RunningDriver, namespace: str, device_class: str) -> JsonObj:
    return allocated_claim(
        kube, namespace=namespace, node=driver.node, claim=claim_body(name="c", device_class=device_class), pod="p"
    )


def test_registers_through_the_kubelet_handshake(example_driver: RunningDriver) -> None:
    reg = asyncio.run(handshake(example_driver.layout.registration_socket, registered=[]))
    assert reg.driver == DRIVER_NAME
    assert reg.endpoint == example_driver.layout.dra_socket
    assert reg.advertised == (DRA_V1_VERSION, DRA_V1BETA1_VERSION)
    assert reg.dra_version == DRA_V1_VERSION
    assert reg.health_version is None


def test_publishes_a_node_owned_slice_for_the_emulated_node(example_driver: RunningDriver, kube: KubeClient) -> None:
    wait_for(lambda: bool(node_slices(kube, example_driver.node)), timeout=30, what="the driver's ResourceSlice")
    (s,) = node_slices(kube, example_driver.node)
    owner = s["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("Node", example_driver.node)
    assert s["spec"]["driver"] == DRIVER_NAME
    assert s["spec"]["pool"]["name"] == example_driver.node
    assert s["spec"]["pool"]["resourceSliceCount"] == 1
    assert sorted(d["name"] for d in s["spec"]["devices"]) == [f"gpu-{i}" for i in range(NUM_DEVICES)]


@pytest.mark.parametrize("version", [DRA_V1_VERSION, DRA_V1BETA1_VERSION], ids=["v1", "v1beta1"])
def test_prepare_returns_the_allocated_device_with_its_cdi_ids(
    example_driver: RunningDriver, example_class: str, kube: KubeClient, test_namespace: str, version: str
) -> None:
    claim = _allocated(kube, example_driver, test_namespace, example_class)
    ref = claim_ref(claim)
    (allocated,) = claim["status"]["allocation"]["devices"]["results"]
    result = _prepare(example_driver, ref, version=version)
    assert result.error == ""
    (device,) = result.devices
    assert (device.pool, device.device, device.request_names) == (allocated["pool"], allocated["device"], ("gpu",))
    assert device.cdi_device_ids == example_driver.layout.cdi_device_ids(claim_uid=ref.uid, device=device.device)


def test_prepared_cdi_specs_load_and_inject_the_device_env(
    example_driver: RunningDriver, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    ref = claim_ref(_allocated(kube, example_driver, test_namespace, example_class))
    (device,) = _prepare(example_driver, ref, version=DRA_V1_VERSION).devices
    registry = cdi.load_registry(spec_dirs=[example_driver.layout.cdi_dir])
    assert not registry.errors and not registry.conflicts
    base = render_container_spec(args=["true"], env={}, rootfs=Path("/r"), hostname="h", netns_path=None)
    oci = cdi.inject_devices(oci_spec=base, registry=registry, device_ids=list(device.cdi_device_ids))
    index = device.device.removeprefix("gpu-")
    env = oci["process"]["env"]
    assert f"KUBERNETES_NODE_NAME={example_driver.node}" in env
    assert f"DRA_RESOURCE_DRIVER_NAME={DRIVER_NAME}" in env
    assert f"GPU_DEVICE_{index}={device.device}" in env
    assert f"GPU_DEVICE_GPU_{index}_RESOURCE_CLAIM={ref.uid}" in env


def test_unprepare_removes_the_claims_cdi_spec_only(
    example_driver: RunningDriver, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    ref = claim_ref(_allocated(kube, example_driver, test_namespace, example_class))
    _prepare(example_driver, ref, version=DRA_V1_VERSION)
    assert example_driver.layout.claim_cdi_spec(ref.uid).is_file()
    assert _unprepare(example_driver, ref) == {ref.uid: ""}
    assert sorted(example_driver.layout.cdi_dir.iterdir()) == [example_driver.layout.common_cdi_spec]


def test_sigterm_removes_both_sockets(example_driver: RunningDriver, kube: KubeClient) -> None:
    # A SIGTERM while the slice informer is still syncing exits 1, so stop it once it is fully up.
    wait_for(lambda: bool(node_slices(kube, example_driver.node)), timeout=30, what="the driver's ResourceSlice")
    example_driver.popen.send_signal(signal.SIGTERM)
    assert example_driver.popen.wait(timeout=20) == 0
    assert not example_driver.layout.registration_socket.exists()
    assert not example_driver.layout.dra_socket.exists()
