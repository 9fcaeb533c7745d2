"""More kubelet behaviour of the emulator: newest instance wins, health v1alpha1 fallback, several nodes per process,
and the example README's kubectl commands."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fakedev.cli.rig import FakeNodeRig, plugin_arguments, plugin_driver
from fakedev.render import Schema
from harness.cluster.local import LocalCluster
from harness.kube.waits import wait_list, wait_object
from harness.node.drivers import DriverSpec, template_driver
from harness.node.layout import NodeLayout
from harness.procs import wait_for
from kubeclient import KubeClient
from kubeclient.resources import DEVICE_CLASSES, NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from tests.helpers import claim_body, pod_body
from tests.privileged.conftest import RigFactory

pytestmark = [pytest.mark.cluster, pytest.mark.privileged]
BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def test_newest_registered_instance_gets_the_calls(
    node_rig_factory: RigFactory, kube: KubeClient, test_namespace: str, example_class: str
) -> None:
    rig = node_rig_factory(profile="seed-example")
    hardware = rig.hardware
    assert hardware is not None

    def instance(uid: str) -> DriverSpec:
        return plugin_driver(hardware=hardware, schema=Schema.EXAMPLE, extra=("--rolling-update-uid", uid))

    old = rig.add_driver(instance("old"), name="old", registers_as="gpu.example.com")
    new = rig.add_driver(instance("new"), name="new")
    wait_for(lambda: len(rig.node.plugins.instances) == 2, timeout=20, what="both instances registered")
    inst = rig.node.plugins.instance_for("gpu.example.com")
    assert inst is not None and inst.registration.endpoint.name == "dra-new.sock"
    kube.create(RESOURCE_CLAIMS, claim_body(name="c", device_class=example_class), namespace=test_namespace)
    kube.create(PODS, pod_body(name="p", node=rig.name, claims={"gpu": "c"}), namespace=test_namespace)
    wait_object(
        kube,
        PODS,
        "p",
        namespace=test_namespace,
        what="Running",
        predicate=lambda p: p.get("status", {}).get("phase") == "Running",
    )
    assert "NodePrepareResources" in new.log_path.read_text()
    assert "NodePrepareResources" not in old.log_path.read_text()


def test_health_falls_back_to_v1alpha1(node_rig_factory: RigFactory) -> None:
    rig = node_rig_factory()
    rig.add_driver(
        template_driver(
            (
                sys.executable,
                "-m",
                "tests.drivers.faulty_plugin",
                "--defect",
                "health-v1alpha1-only",
                "--",
                *plugin_arguments(profile="seed-example"),
            )
        ),
        name="faulty",
        registers_as="gpu.example.com",
    )
    inst = rig.node.plugins.instance_for("gpu.example.com")
    assert inst is not None and inst.registration.health_version == "v1alpha1.DRAResourceHealth"
    wait_for(lambda: any(k[0] == "gpu.example.com" for k in rig.node.health), timeout=20, what="health reports")
    opened = [e.detail for e in rig.node.plugins.events if e.kind == "health-opened"]
    assert opened[0] == "v1alpha1.DRAResourceHealth"


def test_one_process_emulates_several_nodes(local_cluster: LocalCluster, kube: KubeClient, unique_name: str) -> None:
    base = Path(tempfile.mkdtemp(prefix="fd-"))  # short (socket paths), and removed: node roots outlive the run
    proc = subprocess.Popen(
        [
            str(BIN / "fakedev"),
            "node",
            "run",
            "--profile",
            "seed-example",
            "--nodes",
            "2",
            "--node-name",
            unique_name,
            "--kubeconfig",
            str(local_cluster.kubeconfig),
            "--base",
            str(base),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    names = [f"{unique_name}-0", f"{unique_name}-1"]
    try:
        for name in names:
            wait_list(
                kube,
                RESOURCE_SLICES,
                field_selector=f"spec.nodeName={name}",
                predicate=bool,
                timeout=60,
                what=f"slices of {name}",
            )
            node = kube.get(NODES, name)
            assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        for name in names:
            for s in kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={name}"):
                kube.delete(RESOURCE_SLICES, s["metadata"]["name"])
            kube.delete(NODES, name)
        shutil.rmtree(base, ignore_errors=True)
    assert proc.returncode == 0, out
    for name in names:
        assert f"node {name}: {NodeLayout.for_node(name, base=base).root}" in out


def test_example_readme_commands_show_what_they_should(
    seed_rig: FakeNodeRig, local_cluster: LocalCluster, kube: KubeClient
) -> None:
    def kubectl(*args: str) -> str:
        return subprocess.run(
            [str(BIN / "kubectl"), "--kubeconfig", str(local_cluster.kubeconfig), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout

    try:
        kubectl("apply", "-f", str(REPO / "examples" / "seed-extended-resource.yaml"))
        wait_object(
            kube,
            PODS,
            "extended-resource-dra-demo",
            namespace="default",
            what="Running",
            predicate=lambda p: p.get("status", {}).get("phase") == "Running",
            timeout=60,
        )
        assert "extendedResourceName: gpu.example.com/device" in kubectl(
            "get", "deviceclass", "example-gpu", "-o", "yaml"
        )
        slices = kubectl("get", "resourceslices.resource.k8s.io", "-o", "wide")
        assert seed_rig.name in slices and "gpu.example.com" in slices
        described = kubectl("describe", "pod", "extended-resource-dra-demo")
        assert "Status:       Running" in described and "FailedScheduling" not in described
        assert "Successfully assigned" in described
        claims = kubectl("get", "resourceclaims.resource.k8s.io", "-A")
        assert "extended-resource-dra-demo-extended-resources-" in claims and "allocated,reserved" in claims
        resources = kubectl("api-resources")
        for kind in ("deviceclasses", "resourceclaims", "resourceslices", "devicetaintrules"):
            assert kind in resources
    finally:
        kube.delete(PODS, "extended-resource-dra-demo", namespace="default", grace_seconds=0)
        kube.delete(DEVICE_CLASSES, "example-gpu")
        wait_for(lambda: not kube.list(RESOURCE_CLAIMS, namespace="default"), timeout=60, what="claim released")
