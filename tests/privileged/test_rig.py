"""A fake node rig end to end: a power cycle brings a pod's NIC back, and a stop leaves nothing — or says what it
left."""

from __future__ import annotations

import asyncio
import gc

import pytest

from fakedev.cli.rig import FakeNodeRig
from fakedev.render import Schema
from harness.kube.waits import wait_pod_phase
from harness.procs import wait_for
from harness.runtime.netns import create_netns, list_run_netns
from kubeclient import KubeClient
from kubeclient.resources import NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from linuxns import list_netns, netlink
from tests.helpers import claim_body, pod_body, wait_claim_status
from tests.privileged.conftest import RigFactory

pytestmark = [pytest.mark.cluster, pytest.mark.privileged]


def _nic_pod(kube: KubeClient, *, namespace: str, node: str, device_class: str) -> None:
    kube.create(RESOURCE_CLAIMS, claim_body(name="net", device_class=device_class), namespace=namespace)
    pod = pod_body(
        name="p", node=node, claims={"net": "net"}, command="ip -o link; sleep 3600", grace_seconds=1, restart="Always"
    )
    kube.create(PODS, pod, namespace=namespace)


def _links(netns: str) -> set[str]:
    with netlink(netns) as ipr:
        return {str(link.get_attr("IFLA_IFNAME")) for link in ipr.get_links()}


def _logs(rig: FakeNodeRig, namespace: str) -> str:
    worker = rig.node.pod_worker(namespace=namespace, name="p")
    return worker.container_logs() if worker else ""


def _container_id(kube: KubeClient, namespace: str) -> str:
    (status,) = kube.get(PODS, "p", namespace=namespace)["status"]["containerStatuses"]
    return str(status.get("containerID", ""))


def test_a_power_cycle_brings_the_pods_nic_back_with_its_plugin(
    node_rig_factory: RigFactory, nic_class: str, kube: KubeClient, test_namespace: str
) -> None:
    rig = node_rig_factory(profile="nic-only", schemas=(Schema.DRANET,))
    assert rig.nics is not None
    _nic_pod(kube, namespace=test_namespace, node=rig.name, device_class=nic_class)
    wait_pod_phase(kube, "p", namespace=test_namespace, phase="Running")
    (entry,) = wait_claim_status(kube, "net", namespace=test_namespace)["status"]["devices"]
    ifname = entry["networkData"]["interfaceName"]
    wait_for(lambda: ifname in _logs(rig, test_namespace), timeout=20, what=f"{ifname} inside the pod")
    boot, before = rig.layout.boot_id.read_text(), _container_id(kube, test_namespace)
    # Which NIC the pod holds: it has left the node's namespace for the pod's.
    in_pod = {p.ifname for p in rig.nics.ports} - _links(rig.nics.hardware.node_netns)
    assert len(in_pod) == 1

    rig.reboot()

    assert rig.layout.boot_id.read_text() != boot
    assert rig.plugins["dra.net"].starts == 2
    wait_for(
        lambda: _container_id(kube, test_namespace) not in ("", before), timeout=90, what="the container started again"
    )
    # The NIC was plugged back and handed to the restarted pod under the same name.
    wait_for(lambda: ifname in _logs(rig, test_namespace), timeout=30, what=f"{ifname} in the pod again")
    assert {p.ifname for p in rig.nics.ports} - _links(rig.nics.hardware.node_netns) == in_pod


def test_a_drained_stop_leaves_nothing_of_the_node(
    node_rig_factory: RigFactory, nic_class: str, kube: KubeClient, test_namespace: str
) -> None:
    rig = node_rig_factory(profile="nic-only", schemas=(Schema.DRANET,))
    _nic_pod(kube, namespace=test_namespace, node=rig.name, device_class=nic_class)
    wait_pod_phase(kube, "p", namespace=test_namespace, phase="Running")
    assert len(rig.layout.sandboxes()) == 1

    assert rig.stop(drain=True) == []

    assert list_run_netns(rig.layout.run_id) == []
    assert kube.get_or_none(NODES, rig.name) is None
    assert kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={rig.name}") == []
    assert not rig.plugins["dra.net"].alive()


def test_a_stop_names_what_the_node_left_behind(node_rig_factory: RigFactory) -> None:
    rig = node_rig_factory()
    stray = rig.layout.pod("00000000-0000-4000-8000-00000000dead").sandbox_netns  # a sandbox of no pod
    create_netns(stray)

    leaked = rig.stop()

    assert leaked == [stray]
    assert list_netns(stray) == []  # reported, and removed all the same


def _pod_tasks_in_memory(uids: set[str]) -> list[str]:
    gc.collect()
    return [t.get_name() for t in gc.get_objects() if isinstance(t, asyncio.Task) and t.get_name()[4:] in uids]


def test_pods_that_came_and_went_leave_no_task_behind(
    node_rig_factory: RigFactory, kube: KubeClient, test_namespace: str
) -> None:
    """The emulator kept every pod worker's finished task, one per pod it ever ran: memory that grew through a
    soak's churn. Once a pod is gone its task is gone too."""
    rig = node_rig_factory()
    uids = set()
    for i in range(3):
        created = kube.create(PODS, pod_body(name=f"p{i}", node=rig.name, grace_seconds=0), namespace=test_namespace)
        uids.add(created["metadata"]["uid"])
    for i in range(3):
        wait_pod_phase(kube, f"p{i}", namespace=test_namespace, phase="Running")
    assert len(_pod_tasks_in_memory(uids)) == 3  # the check sees running workers' tasks
    for i in range(3):
        kube.delete(PODS, f"p{i}", namespace=test_namespace)
    wait_for(lambda: kube.list(PODS, namespace=test_namespace) == [], timeout=60, what="the pods to go")
    wait_for(lambda: rig.node.workers == {}, timeout=30, what="the emulator to forget the pods")

    wait_for(lambda: _pod_tasks_in_memory(uids) == [], timeout=10, what="the pods' tasks to be released")
