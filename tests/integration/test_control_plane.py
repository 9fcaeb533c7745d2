"""The local 1.37 control plane does what DRA needs: APIs served, gates on, scheduler allocates, controllers act."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cluster.local import LocalCluster
from harness.cluster.nodes import (
    LEASE_NAMESPACE,
    NodeHeartbeats,
    delete_node,
    register_node,
    renew_lease,
)
from harness.drills.requirements import cluster_gates
from harness.kube.manifests import apply_objects, load_manifest_file
from harness.kube.waits import wait_object
from harness.procs import wait_for
from kubeclient.client import KubeClient
from kubeclient.resources import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    LEASES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
)
from tests.helpers import example_slice_body, pod_body

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "examples" / "seed-extended-resource.yaml"
KUBECTL = Path(sys.executable).parent / "kubectl"


def _kubectl(cluster: LocalCluster, *args: str) -> str:
    done = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(cluster.kubeconfig), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
    return done.stdout


@pytest.fixture
def example_node(kube: KubeClient, unique_name: str, node_heartbeats: NodeHeartbeats) -> Iterator[str]:
    """An emulated Node with a hand-written slice of two gpu.example.com devices."""
    register_node(kube, name=unique_name)
    node_heartbeats.add(unique_name)
    kube.create(RESOURCE_SLICES, example_slice_body(node=unique_name))
    yield unique_name
    node_heartbeats.discard(unique_name)
    kube.delete(RESOURCE_SLICES, f"{unique_name}-example")
    delete_node(kube, name=unique_name)


def test_api_resources_lists_every_dra_kind(local_cluster: LocalCluster) -> None:
    out = _kubectl(local_cluster, "api-resources", "--no-headers")
    served = {(cols[0], cols[-3]) for cols in (line.split() for line in out.splitlines())}
    expected = {
        ("deviceclasses", "resource.k8s.io/v1"),
        ("resourceclaims", "resource.k8s.io/v1"),
        ("resourceclaimtemplates", "resource.k8s.io/v1"),
        ("resourceslices", "resource.k8s.io/v1"),
        ("devicetaintrules", "resource.k8s.io/v1"),
        ("resourcepoolstatusrequests", "resource.k8s.io/v1alpha3"),
    }
    assert expected <= served


def test_server_reports_release_version(local_cluster: LocalCluster) -> None:
    status, body = local_cluster.client.get_text("/version")
    assert status == 200
    assert '"gitVersion": "v1.37.2"' in body


DRA_RELATED_GATES = (
    "ResourceHealthStatus",
    "ResourceHealthStatusMessage",
    "GenericWorkload",
    "SchedulerPreQueueingHints",
)
"""Gates DRA features need whose names do not say DRA (device health in pod status, PodGroups for workload claims,
queueing hints for pods waiting on devices)."""

_OFFERED_GATE = re.compile(r"^\s+(?:\w+:)?(?P<name>\w+)=true\|false \((?P<stage>ALPHA|BETA) ", re.MULTILINE)


def _settable_gates(binary: str) -> set[str]:
    """The gates ``--feature-gates`` offers in the binary's ``--help`` (alpha and beta: GA gates are not offered)."""
    done = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60, check=False)
    text = done.stdout + done.stderr
    assert "--feature-gates" in text, f"{binary} --help has no --feature-gates flag:\n{text[-500:]}"
    # The flag's help runs until the next flag.
    section = re.split(r"\n\s+--", text.split("--feature-gates", 1)[1], maxsplit=1)[0]
    return {m["name"] for m in _OFFERED_GATE.finditer(section)}


def test_every_dra_feature_gate_the_apiserver_offers_is_enabled(local_cluster: LocalCluster) -> None:
    """Compared with the built binary's own list, so a gate our config forgot (or a new one) is caught."""
    offered = _settable_gates(local_cluster.processes["kube-apiserver"].argv[0])
    dra = sorted(g for g in offered if "DRA" in g or "DynamicResource" in g or g in DRA_RELATED_GATES)
    assert dra, f"kube-apiserver --help lists no DRA gate among {sorted(offered)}"

    gates = cluster_gates(local_cluster.client)

    assert gates, "kube-apiserver /metrics reports no feature gates"
    assert {g: gates[g].enabled if g in gates else "not reported" for g in dra} == dict.fromkeys(dra, True)


def test_seed_extended_resource_pod_is_allocated_through_dra(
    kube: KubeClient, example_node: str, test_namespace: str
) -> None:
    objects = load_manifest_file(SEED)
    device_class = next(o for o in objects if o["kind"] == "DeviceClass")
    pod = next(o for o in objects if o["kind"] == "Pod")
    try:
        apply_objects(kube, [device_class])
        stored = kube.get(DEVICE_CLASSES, "example-gpu")
        assert stored["spec"]["extendedResourceName"] == "gpu.example.com/device"

        apply_objects(kube, [pod], namespace=test_namespace)
        bound = wait_object(
            kube,
            PODS,
            pod["metadata"]["name"],
            namespace=test_namespace,
            predicate=lambda p: bool(p["spec"].get("nodeName")),
            what="scheduled",
        )
        assert bound["spec"]["nodeName"] == example_node

        status = wait_object(
            kube,
            PODS,
            pod["metadata"]["name"],
            namespace=test_namespace,
            predicate=lambda p: bool(p.get("status", {}).get("extendedResourceClaimStatus")),
            what="extendedResourceClaimStatus",
        )["status"]["extendedResourceClaimStatus"]
        claim = kube.get(RESOURCE_CLAIMS, status["resourceClaimName"], namespace=test_namespace)
        results = claim["status"]["allocation"]["devices"]["results"]
        assert [(r["driver"], r["pool"]) for r in results] == [("gpu.example.com", example_node)]
        assert results[0]["device"] in {"gpu-0", "gpu-1"}
        assert status["requestMappings"][0]["resourceName"] == "gpu.example.com/device"
    finally:
        kube.delete(DEVICE_CLASSES, "example-gpu")


def test_claim_template_is_instantiated_by_the_resourceclaim_controller(
    kube: KubeClient, example_node: str, example_class: str, test_namespace: str
) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": example_class}}]}}},
    }
    kube.create(RESOURCE_CLAIM_TEMPLATES, template, namespace=test_namespace)
    kube.create(
        PODS,
        pod_body(name="templated", node=example_node, templates={"gpu": "one-gpu"}),
        namespace=test_namespace,
    )
    pod = wait_object(
        kube,
        PODS,
        "templated",
        namespace=test_namespace,
        predicate=lambda p: bool(p.get("status", {}).get("resourceClaimStatuses")),
        what="resourceClaimStatuses",
    )
    claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = wait_object(
        kube,
        RESOURCE_CLAIMS,
        claim_name,
        namespace=test_namespace,
        predicate=lambda c: bool(c.get("status", {}).get("allocation")),
        what="allocated",
    )
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    assert claim["metadata"]["ownerReferences"][0]["name"] == "templated"
    assert claim["status"]["reservedFor"][0]["name"] == "templated"


def test_noexecute_taint_rule_makes_the_eviction_controller_delete_the_pod(
    kube: KubeClient, example_node: str, example_class: str, test_namespace: str, unique_name: str
) -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": example_class}}]}},
    }
    kube.create(RESOURCE_CLAIMS, claim, namespace=test_namespace)
    kube.create(
        PODS,
        pod_body(name="victim", node=example_node, claims={"gpu": "gpu"}),
        namespace=test_namespace,
    )
    allocated = wait_object(
        kube,
        RESOURCE_CLAIMS,
        "gpu",
        namespace=test_namespace,
        predicate=lambda c: bool(c.get("status", {}).get("allocation")),
        what="allocated",
    )
    device = allocated["status"]["allocation"]["devices"]["results"][0]["device"]
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": unique_name},
        "spec": {
            "deviceSelector": {"driver": "gpu.example.com", "pool": example_node, "device": device},
            "taint": {"key": "fakedev.io/maintenance", "value": "drill", "effect": "NoExecute"},
        },
    }
    kube.create(DEVICE_TAINT_RULES, rule)
    try:
        # No kubelet runs on the emulated node yet, so the deleted pod stays Terminating: the controller's
        # delete shows as a deletionTimestamp plus the DisruptionTarget condition it sets first.
        evicted = wait_object(
            kube,
            PODS,
            "victim",
            namespace=test_namespace,
            predicate=lambda p: bool(p["metadata"].get("deletionTimestamp")),
            what="deleted by the taint controller",
        )
        reasons = {c["type"]: c.get("reason") for c in evicted["status"].get("conditions", [])}
        assert reasons.get("DisruptionTarget") == "DeletionByDeviceTaintManager"
    finally:
        kube.delete(DEVICE_TAINT_RULES, unique_name)
        kube.delete(PODS, "victim", namespace=test_namespace, grace_seconds=0)


def test_a_nodes_lease_is_owned_by_it_and_goes_with_it(kube: KubeClient, unique_name: str) -> None:
    """A Node deleted without its Lease (a fleet replica died, someone ran kubectl delete node) takes the Lease along:
    the Node owns it, as a kubelet's does, and the garbage collector removes it; renewals keep the reference."""
    node = register_node(kube, name=unique_name)
    renew_lease(kube, name=unique_name)  # a heartbeat's apply must not drop the owner reference
    lease = kube.get(LEASES, unique_name, namespace=LEASE_NAMESPACE)
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": unique_name, "uid": node["metadata"]["uid"]}
    ]
    kube.delete(NODES, unique_name)
    wait_for(
        lambda: kube.get_or_none(LEASES, unique_name, namespace=LEASE_NAMESPACE) is None,
        timeout=60,
        what="the garbage collector to remove the deleted Node's Lease",
    )


def test_heartbeats_renew_by_update_keep_the_owner_and_survive_a_conflicting_write(
    kube: KubeClient, unique_name: str
) -> None:
    """After the first renewal (an apply) a node's Lease is renewed by update of the object as last stored, as the
    kubelet does; a write by someone else meanwhile (a conflict) falls back to an apply, and nothing drops the
    Node's owner reference."""
    node = register_node(kube, name=unique_name)
    renewals: list[bool] = []
    beats = NodeHeartbeats(client=kube, interval=0.2, on_renew=renewals.append)
    beats.add(unique_name)
    beats.start()
    try:

        def renew_time() -> str:
            return str(kube.get(LEASES, unique_name, namespace=LEASE_NAMESPACE)["spec"]["renewTime"])

        first = renew_time()
        wait_for(lambda: renew_time() != first and len(renewals) >= 3, timeout=30, what="renewals by update")
        # someone else writes the Lease: the heartbeat's stored copy is stale now
        kube.patch(LEASES, unique_name, {"metadata": {"labels": {"touched": "yes"}}}, namespace=LEASE_NAMESPACE)
        seen = len(renewals)
        wait_for(lambda: len(renewals) >= seen + 3, timeout=30, what="renewals after the conflicting write")
        assert all(renewals), "a renewal failed"
        lease = kube.get(LEASES, unique_name, namespace=LEASE_NAMESPACE)
        assert lease["metadata"]["labels"] == {"touched": "yes"}
        assert lease["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": unique_name, "uid": node["metadata"]["uid"]}
        ]
        managers = {(m["manager"], m["operation"]) for m in lease["metadata"]["managedFields"]}
        assert ("fakedev", "Update") in managers  # renewed by update, not only by apply
    finally:
        beats.stop()
        delete_node(kube, name=unique_name)
