"""``kubevirt verify --node-files plugin-pod`` against the Helm chart on a real kubelet: the image imported into
containerd, the chart installed with the kubevirt-host profile and the nvidia schema, a VMI's launcher pod given a
vfio-bound GPU and a vGPU by the DaemonSet's plugin, and the verifier reading the node through that plugin pod."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.cluster.local import LocalCluster
from harness.image.assemble import BuiltImage
from harness.kube.waits import wait_pod_phase
from harness.procs import wait_for
from harness.realnode.node import RealNode
from kubeclient import KubeClient
from kubeclient.resources import DEVICE_CLASSES, NAMESPACES, PODS, RESOURCE_SLICES
from tests.helpers import (
    CHART_DIR,
    KUBEVIRT_DRIVER,
    KUBEVIRT_LAUNCHER,
    create_vm_objects,
    kubevirt_vm_objects,
    run_helm,
)

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.xdist_group(name="realnode")]

REAL_NODE_ADDRESS = "127.0.0.5"
RELEASE = "fakedev"


@pytest.fixture(scope="module")
def chart_namespace(local_cluster: LocalCluster, real_node: RealNode, built_image: BuiltImage) -> Iterator[str]:
    """The chart installed for the real node's private roots, the kubevirt-host profile, the nvidia schema only."""
    real_node.import_image(built_image.archive)
    lay = real_node.layout
    namespace = f"kvchart-{os.urandom(2).hex()}"
    base = ["--kubeconfig", str(local_cluster.kubeconfig), "--namespace", namespace]
    run_helm(
        "install", RELEASE, str(CHART_DIR), "--create-namespace", *base,
        "--set", "image.pullPolicy=Never",
        "--set", f"kubeletRoot={lay.kubelet_root}",
        "--set", f"cdiRoot={lay.cdi_dir}",
        "--set", "apiServer.host=127.0.0.1",
        "--set", f"apiServer.port={local_cluster.ports.apiserver}",
        "--set", f"nodeSelector.kubernetes\\.io/hostname={real_node.name}",
        "--set", "terminationGracePeriodSeconds=5",
        "--set", "profile.default=kubevirt-host",
        "--set", "drivers.nvidia.enabled=true",
        "--set", "drivers.example.enabled=false",
    )  # fmt: skip
    try:
        yield namespace
    finally:
        run_helm("uninstall", RELEASE, "--wait", *base, check=False)
        local_cluster.client.delete(NAMESPACES, namespace)


def _cli(kubeconfig: Path, vmi_file: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fakedev", "kubevirt", "verify", str(vmi_file), "--kubeconfig", str(kubeconfig),
         "--node-files", "plugin-pod", *extra],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_verify_reads_a_chart_node_through_its_plugin_pod(
    real_node: RealNode,
    local_cluster: LocalCluster,
    kube: KubeClient,
    chart_namespace: str,
    test_namespace: str,
    tmp_path: Path,
) -> None:
    node = real_node.name
    wait_for(
        lambda: any(
            s["spec"].get("nodeName") == node
            for s in kube.list(RESOURCE_SLICES, field_selector=f"spec.driver={KUBEVIRT_DRIVER}")
        ),
        timeout=120,
        what=f"the chart's plugin to publish {KUBEVIRT_DRIVER} slices for {node}",
    )
    prefix = f"kvchart-{os.urandom(2).hex()}"
    objects, launcher, vmi = kubevirt_vm_objects(prefix=prefix, node=node)
    vmi["metadata"]["namespace"] = test_namespace
    vmi_file = tmp_path / "vmi.yaml"
    vmi_file.write_text(yaml.safe_dump(vmi))
    try:
        create_vm_objects(kube, objects, namespace=test_namespace)
        kube.create(PODS, launcher, namespace=test_namespace)
        wait_pod_phase(kube, KUBEVIRT_LAUNCHER, namespace=test_namespace, phase="Running", timeout=120)
        out = _cli(local_cluster.kubeconfig, vmi_file, "--chart-namespace", chart_namespace)
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"launcher pod {KUBEVIRT_LAUNCHER}" in out.stdout and "FAIL" not in out.stdout
        for rule in ("slice/pci-bus-id", "sysfs/vfio-bound", "sysfs/mdev", "sysfs/iommu-group", "cdi/vfio-group-node"):
            assert f"  PASS  {rule}" in out.stdout, out.stdout
        assert "<hostdev mode='subsystem' type='pci' managed='no'>" in out.stdout
    finally:
        kube.delete(PODS, KUBEVIRT_LAUNCHER, namespace=test_namespace)
        wait_for(
            lambda: kube.get_or_none(PODS, KUBEVIRT_LAUNCHER, namespace=test_namespace) is None,
            timeout=60,
            what="the launcher pod gone",
        )
        for obj in objects:
            if obj["kind"] == "DeviceClass":
                kube.delete(DEVICE_CLASSES, obj["metadata"]["name"])
