"""Every built-in profile's ResourceSlices are created on the real 1.37 kube-apiserver and read back unchanged."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from fakedev.model.inventory import resolve_inventory
from fakedev.profiles import builtin_profile_names, load_profile
from fakedev.render import RenderedNode, render_node
from fakedev.render.types import OwnerReference
from harness.cluster.nodes import NodeHeartbeats, delete_node, register_node
from harness.kube.waits import wait_list, wait_object
from kubeclient import KubeClient
from kubeclient.resources import RESOURCE_POOL_STATUS_REQUESTS, RESOURCE_SLICES

pytestmark = [pytest.mark.cluster]


@pytest.fixture
def node(kube: KubeClient, node_heartbeats: NodeHeartbeats, unique_name: str) -> Iterator[str]:
    register_node(kube, name=unique_name)
    node_heartbeats.add(unique_name)
    yield unique_name
    node_heartbeats.discard(unique_name)
    delete_node(kube, name=unique_name)


def _create_all(kube: KubeClient, rendered: RenderedNode) -> list[dict[str, object]]:
    return [kube.create(RESOURCE_SLICES, dict(s)) for s in rendered.slices]


def _delete_all(kube: KubeClient, rendered: RenderedNode) -> None:
    for resource_slice in rendered.slices:
        kube.delete(RESOURCE_SLICES, resource_slice["metadata"]["name"])


@pytest.mark.parametrize("profile", builtin_profile_names(), ids=builtin_profile_names())
def test_profile_slices_are_created_and_read_back_unchanged(kube: KubeClient, node: str, profile: str) -> None:
    rendered = render_node(resolve_inventory(load_profile(profile), node_name=node))
    try:
        created = _create_all(kube, rendered)
        # Byte-equal specs mean every alpha field survived (gates on) and every quantity was already canonical.
        for sent, stored in zip(rendered.slices, created, strict=True):
            assert json.dumps(stored["spec"], sort_keys=True) == json.dumps(sent["spec"], sort_keys=True)
        listed = kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}")
        assert sorted(s["metadata"]["name"] for s in listed) == sorted(s["metadata"]["name"] for s in rendered.slices)
    finally:
        _delete_all(kube, rendered)


def test_slices_owned_by_their_node_are_collected_with_it(
    kube: KubeClient, node_heartbeats: NodeHeartbeats, unique_name: str
) -> None:
    uid = register_node(kube, name=unique_name)["metadata"]["uid"]
    owner: OwnerReference = {"apiVersion": "v1", "kind": "Node", "name": unique_name, "uid": uid}
    rendered = render_node(resolve_inventory(load_profile("seed-example"), node_name=unique_name), owner=owner)
    try:
        _create_all(kube, rendered)
        delete_node(kube, name=unique_name)
        wait_list(
            kube,
            RESOURCE_SLICES,
            field_selector=f"spec.nodeName={unique_name}",
            predicate=lambda items: not items,
            timeout=60,
            what="the garbage collector to remove the node's slices",
        )
    finally:
        _delete_all(kube, rendered)


def test_pool_status_controller_reads_the_partition_type_attribute(kube: KubeClient, node: str) -> None:
    rendered = render_node(resolve_inventory(load_profile("hgx-h200"), node_name=node))
    request = f"status-{node}"
    try:
        _create_all(kube, rendered)
        kube.create(
            RESOURCE_POOL_STATUS_REQUESTS,
            {
                "apiVersion": "resource.k8s.io/v1alpha3",
                "kind": "ResourcePoolStatusRequest",
                "metadata": {"name": request},
                "spec": {"driver": "gpu.nvidia.com", "poolName": node},
            },
        )
        status = wait_object(
            kube,
            RESOURCE_POOL_STATUS_REQUESTS,
            request,
            predicate=lambda o: bool(o.get("status")),
            timeout=60,
            what="the controller's answer",
        )["status"]
    finally:
        kube.delete(RESOURCE_POOL_STATUS_REQUESTS, request)
        _delete_all(kube, rendered)
    [pool] = status["pools"]
    assert pool["totalDevices"] == 8 * 26 and pool["resourceSliceCount"] == 9
    # Known 1.37 limitation, kept visible on purpose: the controller wants one counter cost (counter set included) per
    # partition type, so fakedev types partitions per GPU and placement — and eight GPUs then exceed the 32-type cap.
    # A one-GPU pool gets its summary (drill matrix/resource-pool-status).
    assert pool["validationError"].startswith("PartitionSummaryOverCap:"), pool["validationError"]
