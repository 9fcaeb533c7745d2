"""DeviceFault objects applied by a real `fakedev plugin` process against the real control plane: health stream,
slice taints, failing prepares, `until`, other nodes' and drivers' faults, errors in status, restarts, and the
`fakedev fault --kubeconfig` round trip."""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from fakedev.plugin.protocol import ControlClient
from harness.cluster.local import LocalCluster
from harness.node.dra_client import DraConnection
from harness.procs import wait_for
from kubeclient import KubeClient
from kubeclient.resources import DEVICE_FAULTS, RESOURCE_SLICES
from kubeclient.timestamps import render_time, utc_now
from kubeletapi import DRA_V1_VERSION, HEALTH_V1_VERSION
from kubeletapi.types import Health
from tests.helpers import allocated_claim, claim_body, claim_ref, next_report
from tests.integration.conftest import PluginProcess

pytestmark = pytest.mark.cluster
DRIVER = "gpu.example.com"


def _create(
    kube: KubeClient, names: list[str], name: str, *, node: str, driver: str = DRIVER, **spec: Any
) -> dict[str, Any]:
    names.append(name)
    body = {
        "apiVersion": "fakedev.io/v1alpha1",
        "kind": "DeviceFault",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "driver": driver, **spec},
    }
    created: dict[str, Any] = kube.create(DEVICE_FAULTS, body)
    return created


def _status_of(kube: KubeClient, name: str, phase: str, *, timeout: float = 20) -> dict[str, Any]:
    """The fault's status once its phase is ``phase``."""
    seen: dict[str, Any] = {}

    def reached() -> bool:
        seen.clear()
        seen.update(kube.get(DEVICE_FAULTS, name).get("status") or {})
        return seen.get("phase") == phase

    wait_for(reached, timeout=timeout, what=f"DeviceFault {name} {phase} (status: {seen})")
    return dict(seen)


def _health(plugin: PluginProcess, device: str) -> tuple[str, str]:
    status = ControlClient(path=plugin.plugin_dir / "control.sock").status()
    entry = next(d for d in status["devices"] if d["device"] == device)
    return entry["health"], entry["message"]


def test_unhealthy_fault_reaches_the_health_stream_until_it_is_deleted(
    device_faults: list[str],
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    kube: KubeClient,
    unique_name: str,
) -> None:
    plugin = plugin_factory(node=emulated_node)

    async def scenario() -> tuple[Any, Any, dict[str, Any]]:
        conn = DraConnection(endpoint=plugin.dra_socket)
        stream = conn.watch_health(version=HEALTH_V1_VERSION)
        await next_report(stream, what="first health report")
        await asyncio.to_thread(
            _create,
            kube,
            device_faults,
            unique_name,
            node=emulated_node,
            kind="Unhealthy",
            device="gpu-2",
            unhealthy={"message": "XID 48"},
        )
        sick = await next_report(stream, what="gpu-2 turning Unhealthy")
        status = await asyncio.to_thread(_status_of, kube, unique_name, "Applied")
        await asyncio.to_thread(kube.delete, DEVICE_FAULTS, unique_name)
        well = await next_report(stream, what="gpu-2 Healthy again after the DeviceFault went")
        await stream.aclose()
        await conn.close()
        return sick, well, status

    sick, well, status = asyncio.run(scenario())
    assert [(d.device, d.health, d.message) for d in sick] == [("gpu-2", Health.UNHEALTHY, "XID 48")]
    assert [(d.device, d.health) for d in well] == [("gpu-2", Health.HEALTHY)]
    assert status["observedGeneration"] == 1
    assert status["appliedTime"] and "clearedTime" not in status and "error" not in status


def test_taint_fault_is_published_in_the_slice(
    device_faults: list[str],
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    kube: KubeClient,
    unique_name: str,
) -> None:
    plugin = plugin_factory(node=emulated_node)
    taint = {"effect": "NoSchedule", "key": "example.com/maintenance", "value": "bios"}
    _create(kube, device_faults, unique_name, node=emulated_node, kind="Taint", device="gpu-1", taint=taint)

    def tainted() -> bool:
        (s,) = kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={emulated_node}")
        devices = {d["name"]: d.get("taints") for d in s["spec"]["devices"]}
        return [n for n, t in devices.items() if t] == ["gpu-1"] and devices["gpu-1"][0]["key"] == taint["key"]

    _status_of(kube, unique_name, "Applied")
    assert tainted()  # Applied is written only once the slice shows the taint
    (published,) = kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={emulated_node}")
    got = next(d for d in published["spec"]["devices"] if d["name"] == "gpu-1")["taints"][0]
    assert {k: got[k] for k in ("key", "value", "effect")} == taint
    assert _health(plugin, "gpu-1")[0] == "Healthy"  # a taint alone says nothing about health
    kube.delete(DEVICE_FAULTS, unique_name)
    wait_for(lambda: not tainted(), timeout=20, what="the taint lifted")


def test_fail_prepare_fails_exactly_n_calls(
    device_faults: list[str],
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    device_class: Callable[..., str],
    kube: KubeClient,
    test_namespace: str,
    unique_name: str,
) -> None:
    plugin = plugin_factory(node=emulated_node)
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=emulated_node,
        claim=claim_body(name="c", device_class=device_class()),
        pod="p",
    )
    _create(
        kube,
        device_faults,
        unique_name,
        node=emulated_node,
        kind="FailPrepare",
        failPrepare={"count": 2, "message": "fabric manager down"},
    )
    _status_of(kube, unique_name, "Applied")

    async def four() -> list[str]:
        conn = DraConnection(endpoint=plugin.dra_socket)
        errors = []
        for _ in range(4):
            result = await conn.prepare([claim_ref(claim)], version=DRA_V1_VERSION)
            errors.append(result[claim["metadata"]["uid"]].error)
        await conn.close()
        return errors

    assert asyncio.run(four()) == ["fabric manager down", "fabric manager down", "", ""]


def test_until_in_the_near_future_clears_the_fault(
    device_faults: list[str],
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    kube: KubeClient,
    unique_name: str,
) -> None:
    plugin = plugin_factory(node=emulated_node)
    until = render_time(utc_now() + datetime.timedelta(seconds=4))
    _create(kube, device_faults, unique_name, node=emulated_node, kind="Unhealthy", device="gpu-4", until=until)
    applied = _status_of(kube, unique_name, "Applied")
    assert _health(plugin, "gpu-4")[0] == "Unhealthy"
    cleared = _status_of(kube, unique_name, "Cleared")
    assert cleared["appliedTime"] == applied["appliedTime"]
    assert cleared["clearedTime"] >= until
    assert _health(plugin, "gpu-4") == ("Healthy", "")


def test_until_in_the_past_is_never_applied(
    device_faults: list[str],
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    kube: KubeClient,
    unique_name: str,
) -> None:
    plugin = plugin_factory(node=emulated_node)
    until = render_time(utc_now() - datetime.timedelta(minutes=5))
    _create(kube, device_faults, unique_name, node=emulated_node, kind="Unhealthy", device="gpu-4", until=until)
    cleared = _status_of(kube, unique_name, "Cleared")
    assert "appliedTime" not in cleared
    assert _health(plugin, "gpu-4") == ("Healthy", "")


def test_faults_for_other_nodes_and_drivers_are_ignored(
    device_faults: list[str],
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    kube: KubeClient,
    unique_name: str,
) -> None:
    plugin = plugin_factory(node=emulated_node)
    other_node, other_driver, mine = (f"{unique_name[:40]}-{s}" for s in ("node", "driver", "mine"))
    unhealthy = {"kind": "Unhealthy", "device": "gpu-0"}
    _create(kube, device_faults, other_node, node=f"{emulated_node}-elsewhere", **unhealthy)
    _create(kube, device_faults, other_driver, node=emulated_node, driver="gpu.nvidia.com", **unhealthy)
    # Faults are taken in the order they come: once this one is applied, the two before it were seen.
    _create(kube, device_faults, mine, node=emulated_node, kind="Unhealthy", device="gpu-5")
    _status_of(kube, mine, "Applied")
    assert "status" not in kube.get(DEVICE_FAULTS, other_node)
    assert "status" not in kube.get(DEVICE_FAULTS, other_driver)
    assert _health(plugin, "gpu-0") == ("Healthy", "")
    assert _health(plugin, "gpu-5")[0] == "Unhealthy"


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"kind": "Unhealthy", "device": "gpu-99"}, "publishes no device 'gpu-99'"),
        ({"kind": "NicUnplug", "device": "gpu-3"}, "gpu-3 is not a NIC"),
    ],
    ids=["unknown-device", "not-a-nic"],
)
def test_a_fault_that_cannot_be_applied_says_why_in_its_status(
    device_faults: list[str],
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    kube: KubeClient,
    unique_name: str,
    spec: dict[str, Any],
    error: str,
) -> None:
    plugin = plugin_factory(node=emulated_node)
    _create(kube, device_faults, unique_name, node=emulated_node, **spec)
    failed = _status_of(kube, unique_name, "Failed")
    assert error in failed["error"]
    assert failed["observedGeneration"] == 1 and "appliedTime" not in failed
    assert plugin.alive()


def test_a_fault_that_exists_before_the_plugin_starts_is_applied(
    device_faults: list[str],
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    kube: KubeClient,
    unique_name: str,
) -> None:
    _create(kube, device_faults, unique_name, node=emulated_node, kind="Unhealthy", device="gpu-7")
    plugin = plugin_factory(node=emulated_node)
    first = _status_of(kube, unique_name, "Applied")
    assert _health(plugin, "gpu-7")[0] == "Unhealthy"
    # A restart applies it again and keeps the status as it was (nothing to rewrite).
    plugin.stop()
    plugin.start()
    wait_for(lambda: _health(plugin, "gpu-7")[0] == "Unhealthy", timeout=20, what="gpu-7 unhealthy after restart")
    assert kube.get(DEVICE_FAULTS, unique_name)["status"] == first


def _fakedev_fault(local_cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fakedev", "fault", "--kubeconfig", str(local_cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_fakedev_fault_kubeconfig_round_trip(
    device_faults: list[str],
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    kube: KubeClient,
    local_cluster: LocalCluster,
) -> None:
    plugin = plugin_factory(node=emulated_node)
    target = ("--node", emulated_node, "--driver", DRIVER)
    made = _fakedev_fault(local_cluster, *target, "health", "gpu-6", "--state", "Unhealthy", "--message", "ECC")
    assert made.returncode == 0, made.stderr
    name = made.stdout.strip()
    device_faults.append(name)
    spec = kube.get(DEVICE_FAULTS, name)["spec"]
    assert (spec["nodeName"], spec["driver"], spec["kind"], spec["device"]) == (
        emulated_node,
        DRIVER,
        "Unhealthy",
        "gpu-6",
    )
    _status_of(kube, name, "Applied")
    assert _health(plugin, "gpu-6") == ("Unhealthy", "ECC")

    listed = _fakedev_fault(local_cluster, *target, "list")
    assert listed.returncode == 0, listed.stderr
    (row,) = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert row == [name, emulated_node, DRIVER, "gpu-6", "Unhealthy", "Applied"]

    cleared = _fakedev_fault(local_cluster, "--node", emulated_node, "clear")
    assert (cleared.returncode, cleared.stdout.split()) == (0, [name])
    wait_for(lambda: _health(plugin, "gpu-6") == ("Healthy", ""), timeout=20, what="gpu-6 healthy after clear")
    assert kube.get_or_none(DEVICE_FAULTS, name) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("health", "gpu-0", "--state", "Unhealthy"), "--node is required"),
        (("--node", "n", "health", "gpu-0", "--state", "Healthy"), "delete the DeviceFault"),
        (("--node", "n", "prepare", "--fail", "1", "--delay", "2"), "give --fail N or --delay S"),
        (("--node", "n", "--for", "soon", "nic", "down", "nic-0"), "--for: a duration"),
        (("--node", "n", "unprepare", "--fail", "1"), "needs the control socket"),
    ],
    ids=["no-node", "healthy", "fail-and-delay", "bad-for", "unprepare"],
)
def test_fakedev_fault_kubeconfig_refuses_what_no_device_fault_can_say(
    local_cluster: LocalCluster, device_fault_crd: str, args: tuple[str, ...], message: str
) -> None:
    out = _fakedev_fault(local_cluster, *args)
    assert out.returncode != 0 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_nic_down_makes_the_nic_unhealthy_and_noexecute_tainted(
    device_faults: list[str],
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    kube: KubeClient,
    unique_name: str,
) -> None:
    plugin = plugin_factory(node=emulated_node, profile="nic-only", driver="dra.net", schema="dranet")
    nic = "pci-0000-08-00-0"
    _create(kube, device_faults, unique_name, node=emulated_node, driver="dra.net", kind="NicDown", device=nic)
    _status_of(kube, unique_name, "Applied")
    health, message = _health(plugin, nic)
    assert health == "Unhealthy" and message.startswith("link down")

    def taint() -> dict[str, Any] | None:
        for s in kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={emulated_node}"):
            for d in s["spec"]["devices"]:
                if d["name"] == nic and d.get("taints"):
                    found: dict[str, Any] = d["taints"][0]
                    return found
        return None

    wait_for(lambda: taint() is not None, timeout=20, what=f"{nic} tainted in its slice")
    assert (taint() or {})["effect"] == "NoExecute"
