"""Health stream, slice republishing, call faults and NVIDIA-schema preparation of the fake plugin."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import cdi
from harness.kube.waits import wait_list
from harness.node.dra_client import DraConnection
from harness.runtime.oci import render_container_spec
from kubeclient import KubeClient
from kubeclient.resources import RESOURCE_SLICES
from kubeletapi import DRA_V1_VERSION, HEALTH_V1_VERSION
from kubeletapi.types import DeviceHealth, Health
from tests.helpers import allocated_claim, claim_body, claim_ref, next_report
from tests.integration.conftest import PluginProcess

pytestmark = pytest.mark.cluster
FAKEDEV = Path(sys.executable).parent / "fakedev"


def _fault(plugin: PluginProcess, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [str(FAKEDEV), "fault", "--kubelet-root", str(plugin.kubelet_root), "--driver", plugin.driver, *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    answer: dict[str, Any] = json.loads(out.stdout)
    return answer


def _wait_slices(
    kube: KubeClient, node: str, predicate: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    return wait_list(
        kube, RESOURCE_SLICES, field_selector=f"spec.nodeName={node}", predicate=predicate, timeout=20, what="slices"
    )


def test_health_stream_sends_a_full_report_then_each_change(
    plugin_factory: Callable[..., PluginProcess], emulated_node: str, kube: KubeClient
) -> None:
    plugin = plugin_factory(node=emulated_node)
    _wait_slices(kube, emulated_node, lambda s: len(s) == 1)

    async def scenario() -> list[list[DeviceHealth]]:
        conn = DraConnection(endpoint=plugin.dra_socket)
        stream = conn.watch_health(version=HEALTH_V1_VERSION)
        reports = [await next_report(stream, what="first health report (every device)")]
        answer = await asyncio.to_thread(
            _fault, plugin, "health", "gpu-3", "--state", "Unhealthy", "--message", "XID 79", "--taint", "NoExecute"
        )
        assert answer["ok"], answer
        reports.append(await next_report(stream, what="health report of gpu-3 turning Unhealthy"))
        # Republishing coalesces changes, so see the taint land before lifting it.
        await asyncio.to_thread(_wait_slices, kube, emulated_node, lambda s: s[0]["spec"]["pool"]["generation"] == 2)
        await asyncio.to_thread(_fault, plugin, "health", "gpu-3", "--state", "Healthy")
        reports.append(await next_report(stream, what="health report of gpu-3 turning Healthy again"))
        await stream.aclose()
        await conn.close()
        return reports

    full, sick, well = asyncio.run(scenario())
    assert [d.device for d in full] == [f"gpu-{i}" for i in range(8)]
    assert {d.health for d in full} == {Health.HEALTHY}
    assert {d.timeout_seconds for d in full} == {30}
    (changed,) = sick
    assert (changed.device, changed.health, changed.message) == ("gpu-3", Health.UNHEALTHY, "XID 79")
    assert changed.last_updated >= full[3].last_updated
    assert [(d.device, d.health) for d in well] == [("gpu-3", Health.HEALTHY)]

    # The taint came and went with two republishes, each bumping the pool generation.
    (final,) = _wait_slices(kube, emulated_node, lambda s: s[0]["spec"]["pool"]["generation"] == 3)
    assert all("taints" not in d for d in final["spec"]["devices"])


def test_unhealthy_taint_is_published_in_the_slice(
    plugin_factory: Callable[..., PluginProcess], emulated_node: str, kube: KubeClient
) -> None:
    plugin = plugin_factory(node=emulated_node)
    _wait_slices(kube, emulated_node, lambda s: len(s) == 1)
    assert _fault(plugin, "health", "gpu-1", "--state", "Unhealthy", "--message", "ECC", "--taint", "NoSchedule")["ok"]
    (tainted,) = _wait_slices(kube, emulated_node, lambda s: s[0]["spec"]["pool"]["generation"] == 2)
    taints = {d["name"]: d.get("taints") for d in tainted["spec"]["devices"]}
    assert taints["gpu-1"][0]["key"] == "fakedev.io/unhealthy"
    assert taints["gpu-1"][0]["effect"] == "NoSchedule"
    assert [n for n, t in taints.items() if t] == ["gpu-1"]
    status = _fault(plugin, "status")
    assert next(d for d in status["devices"] if d["device"] == "gpu-1")["health"] == "Unhealthy"


def test_bad_control_requests_are_refused_and_the_plugin_keeps_serving(
    plugin_factory: Callable[..., PluginProcess], emulated_node: str
) -> None:
    plugin = plugin_factory(node=emulated_node)
    unknown = _fault(plugin, "health", "gpu-99", "--state", "Unhealthy")
    assert not unknown["ok"] and "gpu-99" in unknown["error"]
    assert plugin.alive()
    assert _fault(plugin, "status")["ok"]


def test_prepare_fails_n_times_then_succeeds(
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    device_class: Callable[..., str],
    kube: KubeClient,
    test_namespace: str,
) -> None:
    plugin = plugin_factory(node=emulated_node)
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=emulated_node,
        claim=claim_body(name="c", device_class=device_class()),
        pod="p",
    )
    assert _fault(plugin, "prepare", "--fail", "2", "--error", "GPU fell off the bus")["ok"]

    async def three() -> list[str]:
        conn = DraConnection(endpoint=plugin.dra_socket)
        errors = []
        for _ in range(3):
            result = await conn.prepare([claim_ref(claim)], version=DRA_V1_VERSION)
            errors.append(result[claim["metadata"]["uid"]].error)
        await conn.close()
        return errors

    assert asyncio.run(three()) == ["GPU fell off the bus", "GPU fell off the bus", ""]


def test_mig_device_is_prepared_with_its_uuid_and_nodes(
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    device_class: Callable[..., str],
    kube: KubeClient,
    test_namespace: str,
) -> None:
    plugin = plugin_factory(node=emulated_node, profile="dgx-h100", driver="gpu.nvidia.com", schema="nvidia")
    mig = device_class(
        expression="device.attributes['gpu.nvidia.com'].type == 'mig' && "
        "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
    )
    claim = allocated_claim(
        kube, namespace=test_namespace, node=emulated_node, claim=claim_body(name="mig", device_class=mig), pod="p"
    )
    ref = claim_ref(claim)

    async def prepare() -> Any:
        conn = DraConnection(endpoint=plugin.dra_socket)
        try:
            return await conn.prepare([ref], version=DRA_V1_VERSION)
        finally:
            await conn.close()

    result = asyncio.run(prepare())[ref.uid]
    assert result.error == ""
    (device,) = result.devices
    assert "-mig-1g10gb-19-" in device.device
    registry = cdi.load_registry(spec_dirs=[plugin.cdi_dir])
    base = render_container_spec(args=["true"], env={}, rootfs=Path("/r"), hostname="h", netns_path=None)
    oci = cdi.inject_devices(oci_spec=base, registry=registry, device_ids=list(device.cdi_device_ids))
    env = dict(e.split("=", 1) for e in oci["process"]["env"])
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")
    assert env["NVIDIA_VISIBLE_DEVICES"][4:][14] == "5"  # MIG UUIDs are version-5 style
    paths = {d["path"] for d in oci["linux"]["devices"]}
    parent = device.device.split("-mig-")[0].removeprefix("gpu-")
    assert {f"/dev/nvidia{parent}", "/dev/nvidiactl", "/dev/nvidia-uvm"} <= paths
    assert any(p.startswith("/dev/nvidia-caps/nvidia-cap") for p in paths)
    # Every node the spec names exists under the plugin's fake /dev as a harmless char device.
    for node in registry.resolve(device.cdi_device_ids[0]).device.container_edits.device_nodes:
        st = Path(node.host_path).stat()
        assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3)
        assert node.host_path.startswith(str(plugin.plugin_dir))
