"""The chart's fleet on a real kubelet v1.37 and containerd 2.4: `helm install` with 2 replicas × 10 emulated nodes
(status mode), 20 Nodes Ready with slices, a pod on an emulated node prepared by its replica (the replica's own
metrics say so), the replica's pod deleted and replaced without a duplicate Node, a scale-down to one replica
removing ten Nodes with their slices, an upgrade to containers mode (a privileged replica running pods under runc:
the container's output read back through the replica), and nothing left after uninstall.

One test, in order: each step needs the state the previous one left.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections.abc import Iterator

import pytest

from harness.cluster.local import LocalCluster
from harness.cluster.nodes import LEASE_NAMESPACE, register_node
from harness.image.assemble import BuiltImage
from harness.kubevirt.nodefiles import default_kubectl
from harness.procs import wait_for
from harness.realnode.node import RealNode
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import (
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    STATEFUL_SETS,
)
from tests.helpers import CHART_DIR, claim_template_body, pod_body, pod_running_and_ready, run_helm, scrape_metrics

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.xdist_group(name="realnode")]

REAL_NODE_ADDRESS = "127.0.0.10"
RELEASE = "fleet"
NAMESPACE = "fakedev-fleet"
FLEET = "fleet-fakedev"  # the release's full name: node name prefix and fakedev.io/fleet label
STATEFULSET = f"{FLEET}-fleet"
REPLICAS = 2
PER_REPLICA = 10
NVIDIA = "gpu.nvidia.com"
FLEET_BASE = "/var/lib/fakedev/fleet"  # the chart's --base: the replica's node directories (an emptyDir)


def _free_port_pair() -> int:
    """A port P with P + 1 free too: replicas on one host network serve metrics on P + ordinal."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
        with contextlib.suppress(OSError), socket.socket() as second:
            second.bind(("127.0.0.1", port + 1))
            return port
    raise AssertionError("no two consecutive free ports on 127.0.0.1")


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return _free_port_pair()


@pytest.fixture(scope="module")
def helm_args(
    local_cluster: LocalCluster, real_node: RealNode, built_image: BuiltImage, metrics_port: int
) -> Iterator[list[str]]:
    """A fleet-only release on the real node: no plugin DaemonSet, the fleet's pods on the real node's host network
    (the API server listens on 127.0.0.1 only), metrics on loopback."""
    real_node.import_image(built_image.archive)
    args = [
        "--kubeconfig", str(local_cluster.kubeconfig), "--namespace", NAMESPACE,
        "--set", "image.pullPolicy=Never",
        "--set", "apiServer.host=127.0.0.1",
        "--set", f"apiServer.port={local_cluster.ports.apiserver}",
        "--set", "plugins.enabled=false",
        "--set", "fleet.enabled=true",
        "--set", f"fleet.replicas={REPLICAS}",
        "--set", f"fleet.nodesPerReplica={PER_REPLICA}",
        "--set", "fleet.profile=dgx-h100",
        "--set", "fleet.pods=status",
        "--set", "fleet.metrics.address=127.0.0.1",
        "--set", f"fleet.metrics.port={metrics_port}",
        "--set", f"fleet.nodeSelector.kubernetes\\.io/hostname={real_node.name}",
    ]  # fmt: skip
    yield args
    run_helm("uninstall", RELEASE, "--kubeconfig", str(local_cluster.kubeconfig), "--namespace", NAMESPACE, check=False)


def _kubectl(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(default_kubectl()), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _fleet_nodes(kube: KubeClient, *, replica: int | None = None) -> list[str]:
    selector = f"fakedev.io/fleet={FLEET}" + (f",fakedev.io/fleet-replica={replica}" if replica is not None else "")
    return sorted(n["metadata"]["name"] for n in kube.list(NODES, label_selector=selector))


def _ready(node: JsonObj) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))


def _nodes_with_slices(kube: KubeClient) -> set[str]:
    return {s["spec"]["nodeName"] for s in kube.list(RESOURCE_SLICES) if s["spec"]["driver"] == NVIDIA}


def _all_up(kube: KubeClient, names: list[str]) -> bool:
    nodes = {n["metadata"]["name"]: n for n in kube.list(NODES, label_selector=f"fakedev.io/fleet={FLEET}")}
    return sorted(nodes) == names and all(_ready(n) for n in nodes.values()) and set(names) <= _nodes_with_slices(kube)


def _fleet_pods(kube: KubeClient) -> list[JsonObj]:
    return kube.list(PODS, namespace=NAMESPACE)


def _replica_pod(kube: KubeClient, ordinal: int) -> JsonObj | None:
    return kube.get_or_none(PODS, f"{STATEFULSET}-{ordinal}", namespace=NAMESPACE)


def _metric(port: int, name: str, **labels: str) -> float | None:
    try:
        return scrape_metrics(port).get((name, tuple(sorted(labels.items()))))
    except OSError:
        return None  # the replica is not serving (yet, or any more)


@contextlib.contextmanager
def _explained(kube: KubeClient) -> Iterator[None]:
    """On a failure, add what the fleet's containers said."""
    try:
        yield
    except Exception as exc:
        said = []
        for pod in _fleet_pods(kube):
            path = f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}/log"
            said.append(f"--- {pod['metadata']['name']}:\n{kube.get_text(path)[1][-4000:]}")
        raise AssertionError(f"{exc}\n" + "\n".join(said)) from exc


def test_a_fleet_from_the_chart_runs_replaces_and_scales_down(
    local_cluster: LocalCluster,
    real_node: RealNode,
    kube: KubeClient,
    helm_args: list[str],
    test_namespace: str,
    metrics_port: int,
) -> None:
    names = [f"{FLEET}-{r}-{k}" for r in range(REPLICAS) for k in range(PER_REPLICA)]
    with _explained(kube):
        # -- install: 2 replicas × 10 emulated nodes, Ready, each with its in-process plugin's slices ---------------
        run_helm("install", RELEASE, str(CHART_DIR), "--create-namespace", *helm_args)
        wait_for(lambda: _all_up(kube, sorted(names)), timeout=300, what="20 emulated Nodes Ready with slices")
        for name in names:
            labels = kube.get(NODES, name)["metadata"]["labels"]
            assert labels["fakedev.io/emulated"] == "true" and labels["fakedev.io/fleet"] == FLEET
        for ordinal in range(REPLICAS):
            pod = _replica_pod(kube, ordinal)
            assert pod is not None and pod["spec"]["nodeName"] == real_node.name  # the fleet runs on the real node
        wait_for(
            lambda: _metric(metrics_port + 1, "fakedev_fleet_nodes", state="ready") == PER_REPLICA,
            timeout=60,
            what="replica 1's metrics to count its ten nodes ready",
        )

        # -- a pod on an emulated node of replica 1: prepared by that replica's plugin, marked Running -------------
        target = f"{FLEET}-1-3"
        kube.create(
            RESOURCE_CLAIM_TEMPLATES, claim_template_body("one-gpu", device_class=NVIDIA), namespace=test_namespace
        )
        workload = pod_body(name="worker", node=target, templates={"gpu": "one-gpu"})
        workload["spec"]["tolerations"] = [{"key": "fakedev.io/emulated", "operator": "Exists"}]
        kube.create(PODS, workload, namespace=test_namespace)
        wait_for(
            lambda: pod_running_and_ready(kube, namespace=test_namespace, name="worker"),
            timeout=90,
            what="the pod on an emulated node Running",
        )
        (claim,) = kube.list(RESOURCE_CLAIMS, namespace=test_namespace)
        assert claim["status"]["allocation"]["devices"]["results"][0]["pool"] == target
        prepared = ("fakedev_dra_prepare_requests_total", {"driver": NVIDIA, "result": "ok"})
        assert _metric(metrics_port + 1, prepared[0], **prepared[1]) == 1
        assert _metric(metrics_port, prepared[0], **prepared[1]) is None  # replica 0 prepared nothing

        # -- replica 1's pod deleted: the StatefulSet replaces it, the Nodes are adopted, nothing duplicated -------
        old = _replica_pod(kube, 1)
        assert old is not None
        kube.delete(PODS, old["metadata"]["name"], namespace=NAMESPACE)
        wait_for(
            lambda: (
                (pod := _replica_pod(kube, 1)) is not None
                and pod["metadata"]["uid"] != old["metadata"]["uid"]
                and pod.get("status", {}).get("phase") == "Running"
            ),
            timeout=180,
            what="replica 1 replaced and Running",
        )
        # The replacement boots the nodes afresh (emptyDir) and prepares the pod's claim again.
        wait_for(
            lambda: _metric(metrics_port + 1, prepared[0], **prepared[1]) == 1,
            timeout=120,
            what="the replacement to prepare the claim again",
        )
        wait_for(lambda: _all_up(kube, sorted(names)), timeout=120, what="the same 20 Nodes Ready again")
        assert _fleet_nodes(kube) == sorted(names)
        assert pod_running_and_ready(kube, namespace=test_namespace, name="worker")

        # -- scale to one replica: replica 1 decommissions its ten Nodes with their slices, Leases and pods --------
        kube.patch(STATEFUL_SETS, STATEFULSET, {"spec": {"replicas": 1}}, namespace=NAMESPACE, patch_type="merge")
        wait_for(lambda: _fleet_nodes(kube, replica=1) == [], timeout=180, what="replica 1's Nodes removed")
        assert _fleet_nodes(kube) == sorted(names[:PER_REPLICA])
        assert not _nodes_with_slices(kube) & set(names[PER_REPLICA:])
        for name in names[PER_REPLICA:]:
            assert kube.get_or_none(LEASES, name, namespace=LEASE_NAMESPACE) is None
        wait_for(
            lambda: kube.get_or_none(PODS, "worker", namespace=test_namespace) is None,
            timeout=60,
            what="the pod of a decommissioned node gone",
        )

        # -- upgrade to containers mode: the replica's pod is replaced by a privileged one running pods under runc ----
        before = _replica_pod(kube, 0)
        assert before is not None
        run_helm(
            "upgrade", RELEASE, str(CHART_DIR), *helm_args,
            "--set", "fleet.replicas=1", "--set", "fleet.pods=containers",
        )  # fmt: skip
        wait_for(
            lambda: (
                (pod := _replica_pod(kube, 0)) is not None
                and pod["metadata"]["uid"] != before["metadata"]["uid"]
                and pod.get("status", {}).get("phase") == "Running"
            ),
            timeout=180,
            what="replica 0 replaced by its containers-mode pod",
        )
        wait_for(lambda: _all_up(kube, sorted(names[:PER_REPLICA])), timeout=120, what="replica 0's Nodes adopted")
        hello = pod_body(
            name="hello",
            node=f"{FLEET}-0-4",
            templates={"gpu": "one-gpu"},
            command="echo hello from an emulated node; env | grep NVIDIA_VISIBLE_DEVICES; sleep 3600",
        )
        hello["spec"]["tolerations"] = [{"key": "fakedev.io/emulated", "operator": "Exists"}]
        kube.create(PODS, hello, namespace=test_namespace)
        wait_for(
            lambda: pod_running_and_ready(kube, namespace=test_namespace, name="hello"),
            timeout=90,
            what="the pod's container running under the replica's runc",
        )
        (status,) = kube.get(PODS, "hello", namespace=test_namespace)["status"]["containerStatuses"]
        assert status["containerID"].startswith("runc://")
        replica = f"{STATEFULSET}-0"
        logs = [
            "-n", NAMESPACE, "exec", replica, "--", "fakedev", "node", "logs", "hello", "-n", test_namespace,
            "--in-cluster", "--base", FLEET_BASE,
        ]  # fmt: skip
        wait_for(
            lambda: "NVIDIA_VISIBLE_DEVICES=GPU-" in _kubectl(local_cluster, *logs).stdout,
            timeout=30,
            what="the container's output (with the CDI edits' environment) read through the replica",
        )
        assert "hello from an emulated node" in _kubectl(local_cluster, *logs).stdout

        # -- uninstall: the hook drains the fleet first; no Node, slice, Lease or fleet pod stays --------------------
        # A Node no running replica owns (as a replica killed mid-decommission leaves it): the hook removes it.
        stray = f"{FLEET}-0-99"
        register_node(kube, name=stray, labels={"fakedev.io/fleet": FLEET, "fakedev.io/fleet-replica": "0"})
        run_helm("uninstall", RELEASE, *helm_args[:4])
        wait_for(lambda: _fleet_pods(kube) == [], timeout=180, what="the fleet's pods gone")
        wait_for(lambda: _fleet_nodes(kube) == [], timeout=60, what="every emulated Node gone")
        assert not _nodes_with_slices(kube) & set(names)
        for name in [*names, stray]:
            assert kube.get_or_none(LEASES, name, namespace=LEASE_NAMESPACE) is None
        kube.delete(NAMESPACES, NAMESPACE)
