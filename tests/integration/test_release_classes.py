"""Each NVIDIA driver release's own DeviceClasses, on a node rendered at that release, through the real kube-scheduler:
the gpu, mig and vfio classes allocate exactly the devices of their type.

One emulated node per release with what every release can publish (a full GPU, a GPU with pre-created MIG instances)
and, from v25.12.0, a GPU bound to vfio-pci. Each class gets one claim for all of its devices (allocationMode All),
the claims side by side; no kubelet runs, so a claim's ``status.allocation`` is the observable result. The classes
are created under test-unique names with the release's spec unchanged: the selectors decide, not the names.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from fakedev.model.inventory import GpuDevice, MigDevice, PassthroughGpu, resolve_inventory
from fakedev.model.profile import parse_profile
from fakedev.model.releases import DriverReleases, NvidiaRelease, at_least
from fakedev.render import RenderedNode, Schema, render_node
from fakedev.render.classes import NVIDIA_DRIVER, ClassOrigin, render_device_classes
from fakedev.render.types import OwnerReference
from harness.cluster.nodes import NodeHeartbeats, delete_node, register_node
from harness.kube.waits import wait_object
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from tests.helpers import pod_body

pytestmark = [pytest.mark.cluster]

ALLOCATED_SECONDS = 60.0
# The model kind each type's devices are (names differ between releases; the kind does not).
KINDS = {"gpu": GpuDevice, "mig": MigDevice, "vfio": PassthroughGpu}
CLASS_TYPES = {"gpu.nvidia.com": "gpu", "mig.nvidia.com": "mig", "vfio.gpu.nvidia.com": "vfio"}


def _profile(release: NvidiaRelease) -> str:
    # v25.8.1 publishes no vfio devices; the later releases do next to full GPUs and pre-created MIG (not next to
    # dynamic MIG, whose feature gate excludes passthrough): docs/research/nvidia-releases.md 1.1, 2.1, 3.1.
    vfio = (
        '\n  - {product: h100-sxm5-80gb, root: "pci0000:70", address: "0000:73:00.0", passthrough: true}'
        if at_least(release, NvidiaRelease.V25_12_0)
        else ""
    )
    return f"""
name: classes-{release.value.replace(".", "-")}
releases: {{nvidia: {release.value}}}
pcieRoots: [{{name: "pci0000:50"}}, {{name: "pci0000:60"}}, {{name: "pci0000:70"}}]
gpus:
  - {{product: h100-sxm5-80gb, root: "pci0000:50", address: "0000:53:00.0", mig: {{mode: disabled}}}}
  - product: h100-sxm5-80gb
    root: "pci0000:60"
    address: "0000:63:00.0"
    mig: {{mode: static, instances: [{{profile: 3g.40gb, start: 0}}, {{profile: 1g.10gb, start: 4}}]}}{vfio}
"""


@dataclass(frozen=True, kw_only=True)
class ReleaseNode:
    name: str
    release: NvidiaRelease
    rendered: RenderedNode

    def types(self) -> dict[str, set[str]]:
        """The node's published device names by their ``type`` attribute."""
        out: dict[str, set[str]] = {}
        for ref, device in self.rendered.devices.items():
            if ref.driver == NVIDIA_DRIVER:
                out.setdefault(device.attributes["type"]["string"], set()).add(ref.device)
        return out


@pytest.fixture(params=list(NvidiaRelease), ids=[r.value for r in NvidiaRelease])
def release_node(
    request: pytest.FixtureRequest, kube: KubeClient, node_heartbeats: NodeHeartbeats, unique_name: str
) -> Iterator[ReleaseNode]:
    release: NvidiaRelease = request.param
    profile = parse_profile(_profile(release), source=f"classes-{release.value}.yaml")
    node = register_node(kube, name=unique_name)
    node_heartbeats.add(unique_name)
    owner: OwnerReference = {"apiVersion": "v1", "kind": "Node", "name": unique_name, "uid": node["metadata"]["uid"]}
    rendered = render_node(resolve_inventory(profile, node_name=unique_name), schemas=[Schema.NVIDIA], owner=owner)
    try:
        for resource_slice in rendered.slices:
            kube.create(RESOURCE_SLICES, dict(resource_slice))
        yield ReleaseNode(name=unique_name, release=release, rendered=rendered)
    finally:
        node_heartbeats.discard(unique_name)
        delete_node(kube, name=unique_name)


@pytest.fixture
def release_classes(release_node: ReleaseNode, kube: KubeClient, unique_name: str) -> Iterator[dict[str, str]]:
    """The release chart's GPU-driver classes, created under test-unique names: release name → created name."""
    classes = render_device_classes(
        schema=Schema.NVIDIA, releases=DriverReleases(nvidia=release_node.release), origins=[ClassOrigin.CHART]
    )
    created: dict[str, str] = {}
    try:
        for device_class in classes:
            name = device_class["metadata"]["name"]
            if name in CLASS_TYPES:
                created[name] = f"{unique_name}.{name}"
                kube.create(DEVICE_CLASSES, {**device_class, "metadata": {"name": created[name]}})
        yield created
    finally:
        for name in created.values():
            kube.delete(DEVICE_CLASSES, name)


def _claim_all(kube: KubeClient, *, namespace: str, name: str, node: str, device_class: str) -> None:
    request = {"name": "all", "exactly": {"deviceClassName": device_class, "allocationMode": "All"}}
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}},
    }
    kube.create(RESOURCE_CLAIMS, claim, namespace=namespace)
    kube.create(PODS, pod_body(name=name, node=node, claims={"devices": name}), namespace=namespace)


def _allocation(kube: KubeClient, *, namespace: str, name: str) -> list[JsonObj]:
    claim = wait_object(
        kube,
        RESOURCE_CLAIMS,
        name,
        namespace=namespace,
        timeout=ALLOCATED_SECONDS,
        predicate=lambda c: bool(c.get("status", {}).get("allocation")),
        what=f"claim {name} allocated",
    )
    results: list[JsonObj] = claim["status"]["allocation"]["devices"]["results"]
    return results


def test_release_classes_allocate_exactly_their_type(
    release_node: ReleaseNode, release_classes: dict[str, str], kube: KubeClient, test_namespace: str
) -> None:
    expected = {"gpu.nvidia.com", "mig.nvidia.com"}
    if at_least(release_node.release, NvidiaRelease.V25_12_0):
        expected.add("vfio.gpu.nvidia.com")
    assert set(release_classes) == expected  # v25.8.1's chart has no vfio class
    published = release_node.types()
    assert set(published) == {CLASS_TYPES[c] for c in expected}
    claims = {c: CLASS_TYPES[c] for c in expected}
    for release_name, device_type in claims.items():
        _claim_all(
            kube,
            namespace=test_namespace,
            name=device_type,
            node=release_node.name,
            device_class=release_classes[release_name],
        )
    for device_type in claims.values():
        results = _allocation(kube, namespace=test_namespace, name=device_type)
        assert {r["device"] for r in results} == published[device_type]
        for result in results:
            assert result["driver"] == NVIDIA_DRIVER and result["pool"] == release_node.name
            device = release_node.rendered.device(driver=NVIDIA_DRIVER, pool=result["pool"], name=result["device"])
            assert device.attributes["type"] == {"string": device_type}
            assert isinstance(device.model, KINDS[device_type]), result
