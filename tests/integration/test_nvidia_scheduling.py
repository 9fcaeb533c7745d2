"""The real kube-scheduler allocating fakedev's nvidia-schema slices through NVIDIA's own DeviceClass CEL.

No kubelet runs here: pods are scheduled and bound, and each claim's ``status.allocation`` is the observable result.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fakedev.model.inventory import MigDevice, NicPf, resolve_inventory
from fakedev.model.profile import NodeProfile, parse_profile
from fakedev.profiles import load_profile
from fakedev.render import RenderedNode, render_node
from fakedev.render.types import OwnerReference
from harness.cluster.local import LocalCluster
from harness.cluster.nodes import NodeHeartbeats, delete_node, register_node
from harness.kube.waits import wait_object
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES

pytestmark = [pytest.mark.cluster]

ONE_H100 = """
name: one-h100
numaNodes: [{id: 0, cpus: "0-7"}]
pcieRoots: [{name: "pci0000:50", numaNode: 0}]
gpus: [{product: h100-sxm5-80gb, root: "pci0000:50", address: "0000:53:00.0"}]
"""
# NVIDIA's DeviceClasses, verbatim selectors (k8s-dra-driver-gpu deployments/helm).
NVIDIA_CLASSES = {
    "gpu.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "mig.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
}
ONE_VGPU_H100 = """
name: one-vgpu-h100
extensions: [vgpu]
features: {compatibilityGroups: true}
pcieRoots: [{name: "pci0000:50"}]
gpus: [{product: h100-sxm5-80gb, root: "pci0000:50", address: "0000:53:00.0",
        vgpu: {modes: [time-sliced, mig-backed]}}]
"""
ALLOCATED_SECONDS = 60.0


@pytest.fixture(scope="module")
def nvidia_classes(local_cluster: LocalCluster) -> Iterator[None]:
    """NVIDIA's two DeviceClasses, created for this module and removed after it (adopted if already there)."""
    client = local_cluster.client
    created = []
    for name, expression in NVIDIA_CLASSES.items():
        if client.get_or_none(DEVICE_CLASSES, name) is None:
            client.create(DEVICE_CLASSES, _device_class(name, expression))
            created.append(name)
    yield
    for name in created:
        client.delete(DEVICE_CLASSES, name)


def _device_class(name: str, expression: str) -> JsonObj:
    spec: JsonObj = {"selectors": [{"cel": {"expression": expression}}]}
    if name == "gpu.nvidia.com":
        spec["extendedResourceName"] = "nvidia.com/gpu"  # as NVIDIA's chart declares it
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


class FakeNode:
    """An emulated Node publishing one profile's slices; removes both on exit."""

    def __init__(self, *, kube: KubeClient, heartbeats: NodeHeartbeats, name: str, profile: NodeProfile) -> None:
        self.kube = kube
        self.heartbeats = heartbeats
        self.name = name
        node = register_node(kube, name=name)
        heartbeats.add(name)
        owner: OwnerReference = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
        self.rendered: RenderedNode = render_node(resolve_inventory(profile, node_name=name), owner=owner)
        for resource_slice in self.rendered.slices:
            kube.create(RESOURCE_SLICES, dict(resource_slice))

    def close(self) -> None:
        for resource_slice in self.rendered.slices:
            self.kube.delete(RESOURCE_SLICES, resource_slice["metadata"]["name"])
        self.heartbeats.discard(self.name)
        delete_node(self.kube, name=self.name)


@pytest.fixture
def one_h100(kube: KubeClient, node_heartbeats: NodeHeartbeats, unique_name: str) -> Iterator[FakeNode]:
    node = FakeNode(
        kube=kube, heartbeats=node_heartbeats, name=unique_name, profile=parse_profile(ONE_H100, source="one-h100.yaml")
    )
    yield node
    node.close()


@pytest.fixture
def one_vgpu_h100(kube: KubeClient, node_heartbeats: NodeHeartbeats, unique_name: str) -> Iterator[FakeNode]:
    node = FakeNode(
        kube=kube,
        heartbeats=node_heartbeats,
        name=unique_name,
        profile=parse_profile(ONE_VGPU_H100, source="one-vgpu-h100.yaml"),
    )
    yield node
    node.close()


@pytest.fixture
def vgpu_class(kube: KubeClient, unique_name: str) -> Iterator[str]:
    name = f"vgpu-{unique_name}"
    kube.create(
        DEVICE_CLASSES,
        _device_class(name, "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vgpu'"),
    )
    yield name
    kube.delete(DEVICE_CLASSES, name)


@pytest.fixture
def dgx(kube: KubeClient, node_heartbeats: NodeHeartbeats, unique_name: str) -> Iterator[FakeNode]:
    node = FakeNode(kube=kube, heartbeats=node_heartbeats, name=unique_name, profile=load_profile("dgx-h100"))
    yield node
    node.close()


def _request(name: str, device_class: str, *selectors: str, count: int = 1) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": exactly}


def _claim_and_pod(
    kube: KubeClient,
    *,
    namespace: str,
    name: str,
    node: str,
    requests: list[dict[str, Any]],
    constraints: list[dict[str, Any]] | None = None,
) -> None:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    kube.create(
        RESOURCE_CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": devices},
        },
        namespace=namespace,
    )
    kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "work",
                        "image": "busybox:1.36",
                        "command": ["true"],
                        "resources": {"claims": [{"name": "devices"}]},
                    }
                ],
                "resourceClaims": [{"name": "devices", "resourceClaimName": name}],
            },
        },
        namespace=namespace,
    )


def _mig_claim(kube: KubeClient, *, namespace: str, name: str, node: str, profile: str) -> None:
    selector = f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"
    _claim_and_pod(
        kube, namespace=namespace, name=name, node=node, requests=[_request("mig", "mig.nvidia.com", selector)]
    )


def _allocated(kube: KubeClient, *, namespace: str, name: str) -> list[JsonObj]:
    claim = wait_object(
        kube,
        RESOURCE_CLAIMS,
        name,
        namespace=namespace,
        timeout=ALLOCATED_SECONDS,
        predicate=lambda c: bool(c.get("status", {}).get("allocation")),
        what="an allocation",
    )
    results: list[JsonObj] = claim["status"]["allocation"]["devices"]["results"]
    return results


def _assert_pending(kube: KubeClient, *, namespace: str, name: str) -> None:
    """The scheduler tried and gave up: the pod is Unschedulable and its claim has no allocation."""
    wait_object(
        kube,
        PODS,
        name,
        namespace=namespace,
        timeout=ALLOCATED_SECONDS,
        what="PodScheduled=False",
        predicate=lambda p: any(
            c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
            for c in p.get("status", {}).get("conditions", [])
        ),
    )
    claim = kube.get(RESOURCE_CLAIMS, name, namespace=namespace)
    assert not claim.get("status", {}).get("allocation")


def _mig(node: FakeNode, result: JsonObj) -> MigDevice:
    model = node.rendered.device(driver=result["driver"], pool=result["pool"], name=result["device"]).model
    assert isinstance(model, MigDevice), result
    return model


def test_mig_device_allocated_through_nvidia_device_class(
    one_h100: FakeNode, kube: KubeClient, test_namespace: str, nvidia_classes: None
) -> None:
    _mig_claim(kube, namespace=test_namespace, name="small", node=one_h100.name, profile="1g.10gb")
    [result] = _allocated(kube, namespace=test_namespace, name="small")
    assert result["driver"] == "gpu.nvidia.com" and result["pool"] == one_h100.name
    assert _mig(one_h100, result).profile.name == "1g.10gb"


def test_full_gpu_refused_while_a_mig_instance_holds_its_counters(
    one_h100: FakeNode, kube: KubeClient, test_namespace: str, nvidia_classes: None
) -> None:
    _mig_claim(kube, namespace=test_namespace, name="mig", node=one_h100.name, profile="1g.10gb")
    _allocated(kube, namespace=test_namespace, name="mig")
    _claim_and_pod(
        kube, namespace=test_namespace, name="whole", node=one_h100.name, requests=[_request("gpu", "gpu.nvidia.com")]
    )
    _assert_pending(kube, namespace=test_namespace, name="whole")
    # Releasing the MIG instance frees its counters, and the waiting pod gets the whole GPU.
    kube.delete(PODS, "mig", namespace=test_namespace, grace_seconds=0)
    kube.delete(RESOURCE_CLAIMS, "mig", namespace=test_namespace)
    [result] = _allocated(kube, namespace=test_namespace, name="whole")
    assert result["device"] == "gpu-0"


def test_placements_never_overlap(
    one_h100: FakeNode, kube: KubeClient, test_namespace: str, nvidia_classes: None
) -> None:
    # 4g@0 takes slices 0-3 and 2g can only go to 4; the one 1g.10gb left fits at 6. Slice 7 stays free, but no
    # 1g.10gb placement starts there, so a second 1g.10gb must wait.
    placements = []
    for name, profile in (("four", "4g.40gb"), ("two", "2g.20gb"), ("one", "1g.10gb")):
        _mig_claim(kube, namespace=test_namespace, name=name, node=one_h100.name, profile=profile)
        [result] = _allocated(kube, namespace=test_namespace, name=name)
        placements.append(_mig(one_h100, result).placement)
    for i, a in enumerate(placements):
        for b in placements[i + 1 :]:
            assert not a.overlaps(b), (a, b)
    assert [p.start for p in placements] == [0, 4, 6]
    _mig_claim(kube, namespace=test_namespace, name="one-more", node=one_h100.name, profile="1g.10gb")
    _assert_pending(kube, namespace=test_namespace, name="one-more")


def test_third_3g40gb_on_one_h100_stays_pending(
    one_h100: FakeNode, kube: KubeClient, test_namespace: str, nvidia_classes: None
) -> None:
    for name in ("first", "second", "third"):
        _mig_claim(kube, namespace=test_namespace, name=name, node=one_h100.name, profile="3g.40gb")
    starts = sorted(
        _mig(one_h100, r).placement.start
        for name in ("first", "second")
        for r in _allocated(kube, namespace=test_namespace, name=name)
    )
    assert starts == [0, 4]
    _assert_pending(kube, namespace=test_namespace, name="third")


def test_gpu_and_nic_allocated_on_the_same_pcie_root(
    dgx: FakeNode, kube: KubeClient, test_namespace: str, nvidia_classes: None, unique_name: str
) -> None:
    nic_class = f"nic-{unique_name}"
    kube.create(DEVICE_CLASSES, _device_class(nic_class, "device.driver == 'dra.net'"))
    try:
        # Pin the GPU to the fifth one, so only the NIC behind pci0000:90 can satisfy the constraint.
        gpu = _request(
            "gpu", "gpu.nvidia.com", "device.attributes['resource.kubernetes.io'].pciBusID == '0000:97:00.0'"
        )
        _claim_and_pod(
            kube,
            namespace=test_namespace,
            name="aligned",
            node=dgx.name,
            requests=[gpu, _request("nic", nic_class)],
            constraints=[{"requests": ["gpu", "nic"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}],
        )
        results = {r["request"]: r for r in _allocated(kube, namespace=test_namespace, name="aligned")}
    finally:
        kube.delete(DEVICE_CLASSES, nic_class)
    gpu_device = dgx.rendered.device(driver="gpu.nvidia.com", pool=dgx.name, name=results["gpu"]["device"])
    nic_device = dgx.rendered.device(driver="dra.net", pool=dgx.name, name=results["nic"]["device"])
    root = "resource.kubernetes.io/pcieRoot"
    assert gpu_device.attributes[root] == nic_device.attributes[root] == {"string": "pci0000:90"}
    assert isinstance(nic_device.model, NicPf) and nic_device.model.ifname == "enp152s0f0np0"


def _vgpu_claim(kube: KubeClient, *, namespace: str, name: str, node: str, device_class: str, vgpu_type: str) -> None:
    selector = f"device.attributes['gpu.nvidia.com'].vgpuType == '{vgpu_type}'"
    _claim_and_pod(kube, namespace=namespace, name=name, node=node, requests=[_request("vgpu", device_class, selector)])


def test_compatibility_groups_keep_vgpu_off_a_gpu_running_bare_mig(
    one_vgpu_h100: FakeNode, kube: KubeClient, test_namespace: str, nvidia_classes: None, vgpu_class: str
) -> None:
    node = one_vgpu_h100.name
    _mig_claim(kube, namespace=test_namespace, name="bare", node=node, profile="1g.10gb")
    _allocated(kube, namespace=test_namespace, name="bare")
    # Counters alone would fit a MIG-backed 1-10C beside it; only the compatibility groups forbid it.
    _vgpu_claim(
        kube, namespace=test_namespace, name="backed", node=node, device_class=vgpu_class, vgpu_type="H100XM-1-10C"
    )
    _assert_pending(kube, namespace=test_namespace, name="backed")
    _mig_claim(kube, namespace=test_namespace, name="bare-too", node=node, profile="1g.10gb")
    _allocated(kube, namespace=test_namespace, name="bare-too")
    # Once no bare MIG instance is left on the GPU, the vGPU fits.
    for name in ("bare", "bare-too"):
        kube.delete(PODS, name, namespace=test_namespace, grace_seconds=0)
        kube.delete(RESOURCE_CLAIMS, name, namespace=test_namespace)
    [result] = _allocated(kube, namespace=test_namespace, name="backed")
    assert result["device"].startswith("gpu-0-vgpu-h100xm-1-10c-")


def test_time_sliced_vgpus_on_one_gpu_share_one_size(
    one_vgpu_h100: FakeNode, kube: KubeClient, test_namespace: str, nvidia_classes: None, vgpu_class: str
) -> None:
    node = one_vgpu_h100.name
    for name in ("twenty-a", "twenty-b"):
        _vgpu_claim(
            kube, namespace=test_namespace, name=name, node=node, device_class=vgpu_class, vgpu_type="H100XM-20C"
        )
        _allocated(kube, namespace=test_namespace, name=name)
    _vgpu_claim(kube, namespace=test_namespace, name="ten", node=node, device_class=vgpu_class, vgpu_type="H100XM-10C")
    _assert_pending(kube, namespace=test_namespace, name="ten")
