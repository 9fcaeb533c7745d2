"""The fake plugin under a real kubelet v1.37 and containerd 2: registration, prepare, CDI injection by the
runtime, the pod's output, unprepare on deletion."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fakedev.cli.rig import plugin_command
from harness.cluster.local import LocalCluster
from harness.kube.waits import wait_pod_phase
from harness.node.drivers import DriverContext, render_driver_argv
from harness.procs import wait_for
from harness.realnode.node import RealNode
from kubeclient import KubeClient
from kubeclient.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.xdist_group(name="realnode")]

SEED = Path(__file__).parents[2] / "fakedev" / "examples" / "seed-extended-resource.yaml"
METADATA_GLOB = "/var/run/kubernetes.io/dra-device-attributes/*/*/*/*-metadata.json"


@pytest.fixture(scope="module")
def plugin(real_node: RealNode, local_cluster: LocalCluster) -> Iterator[subprocess.Popen[bytes]]:
    log = (real_node.layout.logs / "plugin.log").open("wb")
    proc = subprocess.Popen(
        render_driver_argv(
            plugin_command(profile="seed-example", extra=("--log-level", "INFO")),
            context=DriverContext(
                node=real_node.name,
                kubelet_root=real_node.layout.kubelet_root,
                cdi_dir=real_node.layout.cdi_dir,
                kubeconfig=local_cluster.kubeconfig,
            ),
        ),
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def _seed_objects(node: str) -> tuple[dict[str, object], dict[str, object]]:
    """The seed example with its pod pinned to the real node (another node of the worker's cluster could offer the
    same class) and a command that also prints what the runtime injected."""
    device_class, pod = yaml.safe_load_all(SEED.read_text())
    spec = pod["spec"]
    spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    spec["automountServiceAccountToken"] = False
    spec["terminationGracePeriodSeconds"] = 2
    container = spec["containers"][0]
    # Besides the example's line: what the runtime injected from the CDI specs.
    container["command"] = ["sh", "-c", f"echo device allocated; env | sort; cat {METADATA_GLOB}; echo; sleep 3600"]
    return device_class, pod


def test_real_kubelet_runs_the_seed_example_through_the_fake_plugin(
    real_node: RealNode, plugin: subprocess.Popen[bytes], kube: KubeClient
) -> None:
    wait_for(
        lambda: (
            'driverName="gpu.example.com"' in real_node.log_text("kubelet")
            and "connected=true" in real_node.log_text("kubelet")
        ),
        timeout=60,
        what="the kubelet to log the registration of gpu.example.com",
    )
    kubelet_log = real_node.log_text("kubelet")
    assert "RegisterPlugin started" in kubelet_log

    device_class, pod = _seed_objects(real_node.name)
    kube.create(DEVICE_CLASSES, device_class)
    name = pod["metadata"]["name"]  # type: ignore[index]
    try:
        kube.create(PODS, pod, namespace="default")
        wait_pod_phase(kube, name, namespace="default", phase="Running", timeout=120)
        status, output = kube.get_text(f"/api/v1/namespaces/default/pods/{name}/log")
        assert status == 200, output
        lines = output.splitlines()
        assert lines[0] == "device allocated"
        env = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("{"))
        assert env["GPU_DEVICE_0"].startswith("gpu-")  # from the claim's CDI spec
        claim_uid = next(
            c["metadata"]["uid"]
            for c in kube.list(RESOURCE_CLAIMS, namespace="default")
            if c["metadata"]["name"].startswith(name)
        )
        spec_files = sorted(p.name for p in real_node.layout.cdi_dir.iterdir())
        assert any(claim_uid in f for f in spec_files), spec_files
        seen = json.loads(next(line for line in lines if line.startswith("{")))
        written = [
            json.loads(line)
            for p in (real_node.layout.kubelet_root / "plugins" / "gpu.example.com").rglob("*.json")
            if p.name != "checkpoint.json"
            for line in p.read_text().splitlines()
            if line.strip()
        ]
        assert seen["kind"] == "DeviceMetadata" and seen in written  # the very file the plugin wrote
        plugin_log = (real_node.layout.logs / "plugin.log").read_text()
        assert "NodePrepareResources" in plugin_log
    finally:
        kube.delete(PODS, name, namespace="default")
        wait_for(
            lambda: kube.get_or_none(PODS, name, namespace="default") is None,
            timeout=60,
            what=f"pod {name} deleted",
        )
        kube.delete(DEVICE_CLASSES, "example-gpu")
    wait_for(
        lambda: "NodeUnprepareResources" in (real_node.layout.logs / "plugin.log").read_text(),
        timeout=60,
        what="the kubelet to call NodeUnprepareResources",
    )
    wait_for(
        lambda: not any(claim_uid in p.name for p in real_node.layout.cdi_dir.iterdir()),
        timeout=30,
        what="the claim's CDI specs removed by unprepare",
    )
