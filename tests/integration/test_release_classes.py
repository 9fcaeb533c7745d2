"""Each NVIDIA driver release's own DeviceClasses, on a node rendered at that release, through the real kube-scheduler:
the gpu, mig and vfio classes allocate exactly the devices of their type.

Per release, emulated nodes with what every release can publish (a full GPU, a GPU with pre-created MIG instances)
and, from v25.12.0, a GPU bound to vfio-pci — on a node of its own from v0.4.1, which would also give the full GPU a
vfio sibling fakedev does not model. Each class gets one claim for all of its devices (allocationMode All), pinned
to the node that has them, the claims side by side; no kubelet runs, so a claim's ``status.allocation`` is the
observable result. The classes
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


_FULL_AND_MIG = """
  - {product: h100-sxm5-80gb, root: "pci0000:50", address: "0000:53:00.0", mig: {mode: disabled}}
  - product: h100-sxm5-80gb
    root: "pci0000:60"
    address: "0000:63:00.0"
    mig: {mode: static, instances: [{profile: 3g.40gb, start: 0}, {profile: 1g.10gb, start: 4}]}"""
_VFIO = """
  - {product: h100-sxm5-80gb, root: "pci0000:70", address: "0000:73:00.0", passthrough: true}"""


def _profiles(release: NvidiaRelease) -> list[str]:
    """The GPUs of each node: v25.8.1 publishes no vfio devices; v25.12.0 publishes them next to full GPUs; from
    v0.4.1 a vfio GPU's node has no GPU without MIG devices (docs/research/nvidia-releases.md 1.1, 2.1, 3.1)."""
    if not at_least(release, NvidiaRelease.V25_12_0):
        return [_FULL_AND_MIG]
    if release is NvidiaRelease.V25_12_0:
        return [_FULL_AND_MIG + _VFIO]
    return [_FULL_AND_MIG, _VFIO]


def _profile(release: NvidiaRelease, *, index: int, gpus: str) -> str:
    return f"""
name: classes-{release.value.replace(".", "-")}-{index}
releases: {{nvidia: {release.value}}}
pcieRoots: [{{name: "pci0000:50"}}, {{name: "pci0000:60"}}, {{name: "pci0000:70"}}]
gpus:{gpus}
"""


@dataclass(frozen=True, kw_only=True)
class ReleaseNodes:
    release: NvidiaRelease
    rendered: dict[str, RenderedNode]
    """By node name."""

    def types(self) -> dict[str, tuple[str, set[str]]]:
        """Each published ``type``: the node that has its devices, and their names (one node per type here)."""
        out: dict[str, tuple[str, set[str]]] = {}
        for node, rendered in self.rendered.items():
            for ref, device in rendered.devices.items():
                if ref.driver == NVIDIA_DRIVER:
                    owner, names = out.setdefault(device.attributes["type"]["string"], (node, set()))
                    assert owner == node, "a type on two nodes"
                    names.add(ref.device)
        return out


@pytest.fixture(params=list(NvidiaRelease), ids=[r.value for r in NvidiaRelease])
def release_nodes(
    request: pytest.FixtureRequest, kube: KubeClient, node_heartbeats: NodeHeartbeats, unique_name: str
) -> Iterator[ReleaseNodes]:
    release: NvidiaRelease = request.param
    rendered: dict[str, RenderedNode] = {}
    try:
        for index, gpus in enumerate(_profiles(release)):
            name = f"{unique_name}-{index}"
            profile = parse_profile(_profile(release, index=index, gpus=gpus), source=f"{name}.yaml")
            node = register_node(kube, name=name)
            node_heartbeats.add(name)
            owner: OwnerReference = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
            rendered[name] = render_node(
                resolve_inventory(profile, node_name=name), schemas=[Schema.NVIDIA], owner=owner
            )
            for resource_slice in rendered[name].slices:
                kube.create(RESOURCE_SLICES, dict(resource_slice))
        yield ReleaseNodes(release=release, rendered=rendered)
    finally:
        for name in rendered:
            node_heartbeats.discard(name)
            delete_node(kube, name=name)


@pytest.fixture
def release_classes(release_nodes: ReleaseNodes, kube: KubeClient, unique_name: str) -> Iterator[dict[str, str]]:
    """The release chart's GPU-driver classes, created under test-unique names: release name → created name."""
    classes = render_device_classes(
        schema=Schema.NVIDIA, releases=DriverReleases(nvidia=release_nodes.release), origins=[ClassOrigin.CHART]
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
    release_nodes: ReleaseNodes, release_classes: dict[str, str], kube: KubeClient, test_namespace: str
) -> None:
    expected = {"gpu.nvidia.com", "mig.nvidia.com"}
    if at_least(release_nodes.release, NvidiaRelease.V25_12_0):
        expected.add("vfio.gpu.nvidia.com")
    assert set(release_classes) == expected  # v25.8.1's chart has no vfio class
    published = release_nodes.types()
    assert set(published) == {CLASS_TYPES[c] for c in expected}
    claims = {c: CLASS_TYPES[c] for c in expected}
    for release_name, device_type in claims.items():
        _claim_all(
            kube,
            namespace=test_namespace,
            name=device_type,
            node=published[device_type][0],
            device_class=release_classes[release_name],
        )
    for device_type in claims.values():
        node, names = published[device_type]
        results = _allocation(kube, namespace=test_namespace, name=device_type)
        assert {r["device"] for r in results} == names
        for result in results:
            assert result["driver"] == NVIDIA_DRIVER and result["pool"] == node
            device = release_nodes.rendered[node].device(driver=NVIDIA_DRIVER, pool=node, name=result["device"])
            assert device.attributes["type"] == {"string": device_type}
            assert isinstance(device.model, KINDS[device_type]), result
