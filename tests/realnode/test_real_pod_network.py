"""The real node's pod network and images: the node is Ready, an ordinary pod gets its own namespace and an address of
the node's pod subnet, `kubectl logs`, `exec` and `port-forward` reach it, images come by the names users write, and
an image the node cannot provide fails with an event that lists what it has."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from harness.cluster.local import LocalCluster
from harness.kube.waits import wait_pod_phase
from harness.kubevirt.nodefiles import default_kubectl
from harness.procs import wait_for
from harness.realnode.node import RealNode
from kubeclient import KubeClient
from kubeclient.resources import EVENTS, NODES, PODS
from linuxns import netlink

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.xdist_group(name="realnode")]
REAL_NODE_ADDRESS = "127.0.0.9"
FORWARD_PORT = 18431


def _pod(name: str, *, node: str, image: str, command: str, policy: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": image, "command": ["sh", "-c", command]}
    if policy:
        container["imagePullPolicy"] = policy
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    }


def _kubectl(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(default_kubectl()), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def web(real_node: RealNode, kube: KubeClient, test_namespace: str) -> Iterator[dict[str, Any]]:
    """A pod with busybox's httpd serving its root on port 8080, as a user would write it."""
    kube.create(
        PODS,
        _pod("web", node=real_node.name, image="busybox:1.36", command="echo serving; exec httpd -f -p 8080 -h /"),
        namespace=test_namespace,
    )
    yield wait_pod_phase(kube, "web", namespace=test_namespace, phase="Running", timeout=120)
    kube.delete(PODS, "web", namespace=test_namespace)
    wait_for(lambda: kube.get_or_none(PODS, "web", namespace=test_namespace) is None, timeout=60, what="web gone")


def test_the_node_is_ready_with_its_pod_network(real_node: RealNode, kube: KubeClient) -> None:
    def ready() -> dict[str, Any] | None:
        conditions = kube.get(NODES, real_node.name)["status"].get("conditions", [])
        return next((c for c in conditions if c["type"] == "Ready" and c["status"] == "True"), None)

    wait_for(lambda: ready() is not None, timeout=60, what=f"Node {real_node.name} Ready")
    assert (ready() or {})["reason"] == "KubeletReady"
    assert real_node.network is not None
    conflist = json.loads(next(real_node.layout.cni_conf.glob("*.conflist")).read_text())
    assert conflist["plugins"][0]["bridge"] == real_node.network.bridge


def test_a_pod_gets_its_own_address_and_kubectl_reaches_it(
    real_node: RealNode, web: dict[str, Any], local_cluster: LocalCluster, test_namespace: str
) -> None:
    assert real_node.network is not None
    ip = ipaddress.ip_address(web["status"]["podIP"])
    assert ip in real_node.network.subnet and ip != real_node.network.gateway
    assert not web["spec"].get("hostNetwork")

    logs = _kubectl(local_cluster, "-n", test_namespace, "logs", "web")
    assert logs.returncode == 0 and logs.stdout.splitlines() == ["serving"], logs

    done = _kubectl(local_cluster, "-n", test_namespace, "exec", "web", "--", "ip", "-o", "-4", "addr", "show", "eth0")
    assert done.returncode == 0, done.stderr
    assert f"inet {ip}/{real_node.network.subnet.prefixlen}" in done.stdout

    # The host reaches the pod through the node's bridge (it holds the gateway address).
    with netlink(None) as host:
        (bridge,) = host.link_lookup(ifname=real_node.network.bridge)
        assert f"{real_node.network.gateway}" in [a.get_attr("IFA_ADDRESS") for a in host.get_addr(index=bridge)]

    forward = subprocess.Popen(
        [
            str(default_kubectl()), "--kubeconfig", str(local_cluster.kubeconfig), "-n", test_namespace,
            "port-forward", "pod/web", f"{FORWARD_PORT}:8080", "--address", "127.0.0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        body: list[bytes] = []

        def fetch() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{FORWARD_PORT}/etc/hostname", timeout=2) as answer:
                body.append(answer.read())
            return True

        wait_for(fetch, timeout=30, what="kubectl port-forward to the pod's httpd")
        assert body[-1].decode().strip() == "web"
    finally:
        forward.terminate()
        forward.communicate(timeout=20)


def test_images_come_by_the_names_users_write(real_node: RealNode, kube: KubeClient, test_namespace: str) -> None:
    # busybox:1.36 is IfNotPresent, untagged and :latest are Always (a pull from the node's registry every time).
    names = {"tagged": "busybox:1.36", "untagged": "busybox", "full": "docker.io/library/busybox:1.37.0"}
    for pod, image in names.items():
        kube.create(
            PODS, _pod(pod, node=real_node.name, image=image, command="echo ran; sleep 3600"), namespace=test_namespace
        )
    for pod in names:
        wait_pod_phase(kube, pod, namespace=test_namespace, phase="Running", timeout=120)
    pulled = [
        e
        for e in kube.list(EVENTS, namespace=test_namespace)
        if e.get("reason") == "Pulled" and e["involvedObject"]["name"] == "untagged"
    ]
    assert pulled, "the untagged image (policy Always) was pulled"
    # Always asks the registry: the node's own one answered for docker.io's library/busybox.
    assert "/v2/library/busybox/manifests/latest" in real_node.log_text("registry")


def test_an_image_the_node_lacks_fails_with_the_available_ones(
    real_node: RealNode, kube: KubeClient, test_namespace: str
) -> None:
    kube.create(
        PODS, _pod("missing", node=real_node.name, image="nginx:1.27", command="true"), namespace=test_namespace
    )

    def failure() -> dict[str, Any] | None:
        return next(
            (
                e
                for e in kube.list(EVENTS, namespace=test_namespace)
                if e.get("reason") == "Failed" and e["involvedObject"]["name"] == "missing"
            ),
            None,
        )

    wait_for(lambda: failure() is not None, timeout=60, what="the image pull failure event")
    failed = failure() or {}
    message = failed["message"]
    assert 'Failed to pull image "nginx:1.27"' in message
    assert "is not on this node; images available: busybox:<any tag>" in message

    def waiting_reason() -> str:
        (status,) = kube.get(PODS, "missing", namespace=test_namespace)["status"]["containerStatuses"]
        return str(status["state"].get("waiting", {}).get("reason"))

    wait_for(lambda: waiting_reason() in ("ErrImagePull", "ImagePullBackOff"), timeout=60, what="ErrImagePull")
