"""Differential: one scenario on the node emulator and on the real kubelet, compared as the plugin and the user see it.

The scenario is a pod with a claim from a template for one ``gpu.example.com`` device (the seed example's driver),
run to Running and deleted. Compared: the sequence of calls the fake plugin receives (registration, health stream,
prepare and unprepare with their batch sizes), the container's first line, the claim's status while the pod runs,
and what is left after deletion. Differences the emulator has on purpose are listed in docs/real-node.md.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.cluster.local import LocalCluster
from harness.node.background import BackgroundLoop, BackgroundNode
from harness.node.emulator import NodeEmulator, NodeSettings
from harness.procs import wait_for
from harness.realnode.images import BUSYBOX_IMAGE
from harness.realnode.node import RealNode
from harness.reaper import reap_all
from kubeclient import KubeClient
from kubeclient.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.xdist_group(name="realnode")]
REAL_NODE_ADDRESS = "127.0.0.2"

CALLS = (
    "GetInfo",
    "registered with the kubelet",
    "health stream opened",
    "NodePrepareResources",
    "NodeUnprepareResources",
)


@dataclass(frozen=True, kw_only=True)
class Side:
    """One node (emulated or real) with a fake seed-example plugin whose JSON log we read."""

    node: str
    kubelet_root: Path
    cdi_dir: Path
    plugin_log: Path
    container_output: Callable[[str, str], str]
    """(namespace, pod) → the container's output. The real kubelet serves it through the API server; the emulator
    has no kubelet HTTP endpoint (a known difference), so its runtime's log is read directly."""

    def calls(self) -> list[tuple[str, int]]:
        """(call, claims in it) as the plugin logged them, in order."""
        out = []
        for line in self.plugin_log.read_text(errors="replace").splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if doc.get("msg") in CALLS:
                out.append((doc["msg"], int(doc.get("claims", 0))))
        return out


def _start_plugin(
    *, node: str, kubelet_root: Path, cdi_dir: Path, kubeconfig: Path, log: Path
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [
                sys.executable, "-m", "fakedev", "plugin", "--profile", "seed-example", "--node-name", node,
                "--kubelet-root", str(kubelet_root), "--cdi-dir", str(cdi_dir), "--kubeconfig", str(kubeconfig),
                "--log-level", "INFO", "--log-format", "json",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip


@pytest.fixture(scope="module")
def sides(real_node: RealNode, local_cluster: LocalCluster) -> Iterator[dict[str, Side]]:
    kube = local_cluster.client
    base = Path(tempfile.mkdtemp(prefix="fd-"))
    loop = BackgroundLoop()
    loop.start()
    emulated = BackgroundNode(
        settings=NodeSettings(name="diff-emulated", base=base), client=local_cluster.client, loop=loop
    )
    node = emulated.start()
    procs = []
    try:
        out = {
            "emulated": Side(
                node=node.name,
                kubelet_root=node.paths.kubelet_root,
                cdi_dir=node.paths.cdi,
                plugin_log=base / "plugin.log",
                container_output=lambda ns, pod: _runtime_log(node, ns, pod),
            ),
            "real": Side(
                node=real_node.name,
                kubelet_root=real_node.layout.kubelet_root,
                cdi_dir=real_node.layout.cdi_dir,
                plugin_log=real_node.layout.logs / "diff-plugin.log",
                container_output=lambda ns, pod: api_log(kube, ns, pod),
            ),
        }
        for side in out.values():
            procs.append(
                _start_plugin(
                    node=side.node,
                    kubelet_root=side.kubelet_root,
                    cdi_dir=side.cdi_dir,
                    kubeconfig=local_cluster.kubeconfig,
                    log=side.plugin_log,
                )
            )
        for side in out.values():
            wait_for(
                lambda s=side: ("health stream opened", 0) in s.calls(),  # type: ignore[misc]
                timeout=60,
                what=f"{side.node}: registration and the health stream",
            )
        yield out
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=20)
        emulated.stop(stop_pods=True)
        loop.stop()
        reap_all(base=base)
        shutil.rmtree(base, ignore_errors=True)


def _runtime_log(node: NodeEmulator, namespace: str, pod: str) -> str:
    worker = node.pod_worker(namespace=namespace, name=pod)
    return worker.container_logs() if worker else ""


def api_log(kube: KubeClient, namespace: str, pod: str) -> str:
    status, text = kube.get_text(f"/api/v1/namespaces/{namespace}/pods/{pod}/log")
    return text if status == 200 else ""


def _scenario(kube: KubeClient, side: Side, *, namespace: str, tag: str) -> dict[str, Any]:
    """Run the pod to Running, read what a user sees, delete it; returns the observations."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"diff-{tag}", "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": side.node},
            "hostNetwork": True,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 2,
            "restartPolicy": "Never",
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "diff-gpu"}],
            "containers": [
                {
                    "name": "c",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", "echo device allocated; env | grep ^GPU_DEVICE_ | sort; sleep 3600"],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }
    kube.create(PODS, pod, namespace=namespace)
    name = pod["metadata"]["name"]  # type: ignore[index]
    wait_for(
        lambda: kube.get(PODS, name, namespace=namespace).get("status", {}).get("phase") == "Running",
        timeout=120,
        what=f"{name} Running on {side.node}",
    )
    log = ""

    def logged() -> bool:
        nonlocal log
        log = side.container_output(namespace, name)
        return log.startswith("device allocated") and "GPU_DEVICE" in log

    wait_for(logged, timeout=30, what=f"{name}'s output")
    claim = next(c for c in kube.list(RESOURCE_CLAIMS, namespace=namespace) if c["metadata"]["name"].startswith(name))
    observed = {
        "first_line": log.splitlines()[0],
        "env_names": sorted(line.split("=", 1)[0] for line in log.splitlines()[1:]),
        "reserved_for": [r["resource"] for r in claim["status"].get("reservedFor", [])],
        "device_conditions": [c["type"] for d in claim["status"].get("devices", []) for c in d.get("conditions", [])],
        "cdi_files_while_running": len([p for p in side.cdi_dir.iterdir() if claim["metadata"]["uid"] in p.name]),
    }
    kube.delete(PODS, name, namespace=namespace)
    wait_for(lambda: kube.get_or_none(PODS, name, namespace=namespace) is None, timeout=60, what=f"{name} gone")
    wait_for(
        lambda: ("NodeUnprepareResources", 1) in side.calls(), timeout=60, what=f"{side.node}: NodeUnprepareResources"
    )
    wait_for(
        lambda: kube.get_or_none(RESOURCE_CLAIMS, claim["metadata"]["name"], namespace=namespace) is None,
        timeout=60,
        what="the generated claim deleted",
    )
    observed["cdi_files_after"] = len([p for p in side.cdi_dir.iterdir() if claim["metadata"]["uid"] in p.name])
    observed["calls"] = side.calls()
    return observed


def test_emulated_and_real_node_agree_on_a_claim_template_pod(
    sides: dict[str, Side], kube: KubeClient, test_namespace: str
) -> None:
    kube.create(
        DEVICE_CLASSES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "diff-example-gpu"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
        },
    )
    kube.create(
        RESOURCE_CLAIM_TEMPLATES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "diff-gpu"},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "diff-example-gpu"}}]}}
            },
        },
        namespace=test_namespace,
    )
    try:
        seen = {tag: _scenario(kube, side, namespace=test_namespace, tag=tag) for tag, side in sides.items()}
    finally:
        kube.delete(DEVICE_CLASSES, "diff-example-gpu")
    emulated, real = seen["emulated"], seen["real"]
    assert real["first_line"] == "device allocated"
    assert real["calls"] == [
        ("GetInfo", 0),
        ("registered with the kubelet", 0),
        ("health stream opened", 0),
        ("NodePrepareResources", 1),
        ("NodeUnprepareResources", 1),
    ]
    # Everything the plugin and the user observe is the same on both nodes.
    assert emulated == real
