"""The CDI specs and IDs the fake NVIDIA plugin answers NodePrepareResources with, per driver release, through the
real plugin process and a claim the real scheduler allocated (nvidia-releases.md §1.4, §2.4, §3.4)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

import cdi
from harness.node.dra_client import DraConnection
from kubeclient import KubeClient
from kubeclient.resources import RESOURCE_CLAIMS
from kubeletapi import DRA_V1_VERSION
from kubeletapi.types import ClaimRef, PrepareResult
from tests.helpers import allocated_claim, claim_body, claim_ref, nvidia_release_profile
from tests.integration.conftest import PluginProcess

pytestmark = pytest.mark.cluster

NVIDIA = "gpu.nvidia.com"
BASE = "k8s.gpu.nvidia.com-device_base.yaml"


async def _call(plugin: PluginProcess, ref: ClaimRef, *, prepare: bool) -> PrepareResult | str:
    conn = DraConnection(endpoint=plugin.dra_socket)
    try:
        if prepare:
            return (await conn.prepare([ref], version=DRA_V1_VERSION))[ref.uid]
        return (await conn.unprepare([ref], version=DRA_V1_VERSION))[ref.uid]
    finally:
        await conn.close()


def _prepared(
    *,
    release: str,
    plugin_factory: Callable[..., PluginProcess],
    device_class: Callable[..., str],
    emulated_node: str,
    kube: KubeClient,
    namespace: str,
    tmp_path: Path,
) -> tuple[PluginProcess, ClaimRef, PrepareResult]:
    profile = nvidia_release_profile(tmp_path, release=release)
    plugin = plugin_factory(node=emulated_node, profile=str(profile), driver=NVIDIA)
    claim = allocated_claim(
        kube,
        namespace=namespace,
        node=emulated_node,
        claim=claim_body(name="c", device_class=device_class(driver=NVIDIA)),
        pod="p",
    )
    ref = claim_ref(claim)
    result = asyncio.run(_call(plugin, ref, prepare=True))
    assert isinstance(result, PrepareResult) and not result.error, result
    return plugin, ref, result


def _spec_files(plugin: PluginProcess) -> list[str]:
    return sorted(p.name for p in plugin.cdi_dir.iterdir())


def _resolve_all(plugin: PluginProcess, result: PrepareResult) -> None:
    """What a runtime does with the answer: every ID resolves, and no spec in the directory is unreadable."""
    registry = cdi.load_registry(spec_dirs=[plugin.cdi_dir])
    assert registry.errors == ()
    registry.resolve_all([i for d in result.devices for i in d.cdi_device_ids])


@pytest.mark.parametrize("release", ["v25.12.0", "v0.4.1"])
def test_a_claim_gets_its_own_yaml_spec_and_claim_ids(
    release: str,
    plugin_factory: Callable[..., PluginProcess],
    device_class: Callable[..., str],
    emulated_node: str,
    kube: KubeClient,
    test_namespace: str,
    tmp_path: Path,
) -> None:
    plugin, ref, result = _prepared(
        release=release,
        plugin_factory=plugin_factory,
        device_class=device_class,
        emulated_node=emulated_node,
        kube=kube,
        namespace=test_namespace,
        tmp_path=tmp_path,
    )
    (device,) = result.devices
    assert device.cdi_device_ids == (
        f"k8s.gpu.nvidia.com/claim={ref.uid}-{device.device}",
        f"gpu.nvidia.com/metadata={ref.uid}_gpu",
    )
    claim_spec = f"k8s.gpu.nvidia.com-claim_{ref.uid}.yaml"
    assert _spec_files(plugin) == sorted([claim_spec, f"gpu.nvidia.com_metadata_{ref.uid}_gpu.json"])
    text = (plugin.cdi_dir / claim_spec).read_text()
    assert text.startswith("---\n")
    doc = yaml.safe_load(text)
    assert doc["kind"] == "k8s.gpu.nvidia.com/claim"
    assert [d["name"] for d in doc["devices"]] == [f"{ref.uid}-{device.device}"]
    assert doc["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    _resolve_all(plugin, result)
    # No NVIDIA release writes ResourceClaim status: the prepared claim has its allocation and nothing else.
    stored = kube.get(RESOURCE_CLAIMS, ref.name, namespace=ref.namespace)
    assert stored["status"]["allocation"] and "devices" not in stored["status"]
    assert asyncio.run(_call(plugin, ref, prepare=False)) == ""
    assert _spec_files(plugin) == []


def test_v25_8_1_answers_ids_of_the_nodes_base_spec_and_keeps_it(
    plugin_factory: Callable[..., PluginProcess],
    device_class: Callable[..., str],
    emulated_node: str,
    kube: KubeClient,
    test_namespace: str,
    tmp_path: Path,
) -> None:
    plugin, ref, result = _prepared(
        release="v25.8.1",
        plugin_factory=plugin_factory,
        device_class=device_class,
        emulated_node=emulated_node,
        kube=kube,
        namespace=test_namespace,
        tmp_path=tmp_path,
    )
    (device,) = result.devices
    assert device.cdi_device_ids == (
        f"k8s.gpu.nvidia.com/device={device.device}",
        f"gpu.nvidia.com/metadata={ref.uid}_gpu",
    )
    assert _spec_files(plugin) == sorted([BASE, f"gpu.nvidia.com_metadata_{ref.uid}_gpu.json"])
    doc = yaml.safe_load((plugin.cdi_dir / BASE).read_text())
    assert doc["kind"] == "k8s.gpu.nvidia.com/device"
    assert [d["name"] for d in doc["devices"]] == ["gpu-0", "gpu-1"]
    assert doc["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"] * 2
    _resolve_all(plugin, result)
    assert asyncio.run(_call(plugin, ref, prepare=False)) == ""
    assert _spec_files(plugin) == [BASE]  # the node's, not the claim's
    plugin.stop()
    (plugin.cdi_dir / BASE).unlink()  # a reboot empties /var/run/cdi
    plugin.start()
    assert _spec_files(plugin) == [BASE]
