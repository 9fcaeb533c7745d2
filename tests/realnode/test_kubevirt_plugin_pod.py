"""``kubevirt verify`` on a real node, reading the node's files through a pod instead of the local filesystem.

The fake plugin (kubevirt-host, nvidia schema) runs under the real kubelet; a VMI's launcher pod gets a vfio-bound
GPU from a named claim and a vGPU from a claim template. A busybox pod shaped like the chart's (labelled
``app.kubernetes.io/name=fakedev``, a ``plugin-nvidia`` container whose arguments name the kubelet root and the CDI
dir, both mounted at their node paths) is what the pod reader execs in. The verdict read through it must be the
one read locally, and the CLI must reach it on its own from the VMI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from fakedev.cli.plugin_claims import plugin_claims
from fakedev.cli.rig import plugin_command
from fakedev.render.published import Schema
from harness.cluster.local import LocalCluster
from harness.kube.waits import wait_pod_phase
from harness.kubevirt.nodefiles import LocalNodeFiles, PodExecNodeFiles, default_kubectl
from harness.kubevirt.pluginpod import CHART_LABEL, find_plugin_pod
from harness.kubevirt.verify import plugin_node_view, verify_vmi
from harness.node.drivers import DriverContext, render_driver_argv
from harness.procs import wait_for
from harness.realnode.node import RealNode
from kubeclient import KubeClient
from kubeclient.resources import (
    DEVICE_CLASSES,
    NAMESPACES,
    PODS,
    RESOURCE_SLICES,
)
from tests.helpers import KUBEVIRT_DRIVER as DRIVER
from tests.helpers import KUBEVIRT_LAUNCHER as LAUNCHER
from tests.helpers import create_vm_objects, kubevirt_vm_objects, quiet_pod

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.xdist_group(name="realnode")]

REAL_NODE_ADDRESS = "127.0.0.4"
READER = "fakedev-reader"


@dataclass(frozen=True, kw_only=True)
class Launched:
    node: RealNode
    kubeconfig: Path
    chart_namespace: str
    vmi: dict[str, Any]
    vmi_file: Path


def _plugin(real_node: RealNode, cluster: LocalCluster) -> subprocess.Popen[bytes]:
    log = (real_node.layout.logs / "plugin-kubevirt.log").open("wb")
    with log:
        return subprocess.Popen(
            render_driver_argv(
                plugin_command(profile="kubevirt-host", schema=Schema.NVIDIA, extra=("--log-level", "INFO")),
                context=DriverContext(
                    node=real_node.name,
                    kubelet_root=real_node.layout.kubelet_root,
                    cdi_dir=real_node.layout.cdi_dir,
                    kubeconfig=cluster.kubeconfig,
                ),
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip


def _reader_pod(real_node: RealNode) -> dict[str, Any]:
    """The chart's pod as far as the reader cares: its label, a plugin-<schema> container naming the roots in its
    arguments, and the two host directories mounted where they are on the node."""
    plugins, cdi_dir = str(real_node.layout.kubelet_root / "plugins"), str(real_node.layout.cdi_dir)
    pod = quiet_pod(READER, node=real_node.name)
    pod["metadata"]["labels"] = dict([CHART_LABEL.split("=")])
    container = pod["spec"]["containers"][0]
    container["name"] = "plugin-nvidia"
    # The arguments become the shell's positional parameters: unused, there to be read from the pod spec.
    container["command"] = ["sh", "-c", "exec sleep 3600", "sh"]
    container["args"] = [f"--kubelet-root={real_node.layout.kubelet_root}", f"--cdi-dir={cdi_dir}"]
    container["volumeMounts"] = [{"name": "plugins", "mountPath": plugins}, {"name": "cdi", "mountPath": cdi_dir}]
    pod["spec"]["volumes"] = [
        {"name": "plugins", "hostPath": {"path": plugins, "type": "Directory"}},
        {"name": "cdi", "hostPath": {"path": cdi_dir, "type": "Directory"}},
    ]
    return pod


def _delete_pod(kube: KubeClient, name: str, *, namespace: str) -> None:
    kube.delete(PODS, name, namespace=namespace)
    wait_for(lambda: kube.get_or_none(PODS, name, namespace=namespace) is None, timeout=60, what=f"{name} gone")


@pytest.fixture(scope="module")
def launched(
    real_node: RealNode, local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Launched]:
    kube = local_cluster.client
    prefix = f"kvpod-{os.urandom(2).hex()}"
    vm_ns, chart_ns = f"{prefix}-vm", f"{prefix}-chart"
    plugin = _plugin(real_node, local_cluster)
    objects, launcher, vmi = kubevirt_vm_objects(prefix=prefix, node=real_node.name)
    vmi["metadata"]["namespace"] = vm_ns
    try:
        for ns in (vm_ns, chart_ns):
            kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        log = real_node.layout.logs / "plugin-kubevirt.log"
        wait_for(
            lambda: (
                f'driverName="{DRIVER}"' in real_node.log_text("kubelet")
                and any(
                    s["spec"].get("nodeName") == real_node.name
                    for s in kube.list(RESOURCE_SLICES, field_selector=f"spec.driver={DRIVER}")
                )
            ),
            timeout=90,
            what=f"{DRIVER} registered with the kubelet and its slices published",
            abort=lambda: (
                None
                if plugin.poll() is None
                else RuntimeError(f"the plugin exited {plugin.returncode}: {log.read_text()[-2000:]}")
            ),
        )
        create_vm_objects(kube, objects, namespace=vm_ns)
        kube.create(PODS, launcher, namespace=vm_ns)
        kube.create(PODS, _reader_pod(real_node), namespace=chart_ns)
        wait_pod_phase(kube, LAUNCHER, namespace=vm_ns, phase="Running", timeout=120)
        wait_pod_phase(kube, READER, namespace=chart_ns, phase="Running", timeout=120)
        vmi_file = tmp_path_factory.mktemp("vmi") / "vmi.yaml"
        vmi_file.write_text(yaml.safe_dump(vmi))
        yield Launched(
            node=real_node, kubeconfig=local_cluster.kubeconfig, chart_namespace=chart_ns, vmi=vmi, vmi_file=vmi_file
        )
    finally:
        for name, ns in ((LAUNCHER, vm_ns), (READER, chart_ns)):
            if kube.get_or_none(PODS, name, namespace=ns) is not None:
                _delete_pod(kube, name, namespace=ns)
        for obj in objects:
            if obj["kind"] == "DeviceClass":
                kube.delete(DEVICE_CLASSES, obj["metadata"]["name"])
        for ns in (vm_ns, chart_ns):
            kube.delete(NAMESPACES, ns)
        plugin.terminate()
        plugin.wait(timeout=20)


def _pod_files(launched: Launched, kube: KubeClient) -> PodExecNodeFiles:
    plugin = find_plugin_pod(kube, node=launched.node.name, namespace=launched.chart_namespace)
    return PodExecNodeFiles(target=plugin.target, kubeconfig=launched.kubeconfig, kubectl=default_kubectl())


def test_pod_reader_sees_what_the_node_has(launched: Launched, kube: KubeClient) -> None:
    pod, local = _pod_files(launched, kube), LocalNodeFiles()
    plugin_dir = PurePosixPath(launched.node.layout.kubelet_root / "plugins" / DRIVER)
    assert pod.list_dir(plugin_dir) == local.list_dir(plugin_dir)
    checkpoint = plugin_dir / "checkpoint.json"
    assert pod.read_bytes(checkpoint) == local.read_bytes(checkpoint)
    devices = plugin_dir / "sys" / "bus" / "pci" / "devices"
    (bdf, *_) = local.list_dir(devices)
    assert pod.resolve(devices / bdf / "driver") == local.resolve(devices / bdf / "driver")
    assert pod.exists(devices / bdf) and not pod.exists(devices / "0000:ff:1f.7")
    with pytest.raises(FileNotFoundError):
        pod.read_bytes(plugin_dir / "no-such-file")
    with pytest.raises(FileNotFoundError):
        pod.list_dir(checkpoint)  # a file is not a directory


def test_verdict_through_the_pod_is_the_local_one(launched: Launched, kube: KubeClient) -> None:
    plugin = find_plugin_pod(kube, node=launched.node.name, namespace=launched.chart_namespace)
    reports = [
        verify_vmi(
            vmi=launched.vmi,
            client=kube,
            node=plugin_node_view(plugin, files=files, read_checkpoint=plugin_claims),
        )
        for files in (LocalNodeFiles(), _pod_files(launched, kube))
    ]
    local, through_pod = reports
    assert local.ok, local.render()
    assert through_pod.findings == local.findings and through_pod.hostdevs == local.hostdevs
    rules = {f.rule for f in through_pod.findings}
    assert {"slice/pci-bus-id", "sysfs/vfio-bound", "sysfs/mdev", "cdi/vfio-group-node"} <= rules


def _cli(launched: Launched, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fakedev", "kubevirt", "verify", str(launched.vmi_file),
         "--kubeconfig", str(launched.kubeconfig), "--node-files", "plugin-pod", *extra],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_cli_verifies_through_the_plugin_pod(launched: Launched) -> None:
    out = _cli(launched, "--chart-namespace", launched.chart_namespace)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"launcher pod {LAUNCHER}" in out.stdout
    assert "  PASS  sysfs/vfio-bound" in out.stdout and "FAIL" not in out.stdout
    assert "<hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci'>" in out.stdout


def test_cli_names_the_node_when_no_plugin_pod_runs_there(launched: Launched) -> None:
    out = _cli(launched, "--chart-namespace", "kvpod-nothing-here")
    assert out.returncode == 1
    assert f"no Running fakedev plugin pod on node {launched.node.name}" in out.stderr
    assert "namespace kvpod-nothing-here" in out.stderr and "--chart-namespace" in out.stderr
