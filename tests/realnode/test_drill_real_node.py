"""The KubeVirt drill on the real node: ``fakedev drill kubevirt-pci --real-node``, the scenario file unchanged.

The virt-launcher stand-in runs under the real containerd (runc, the pod network), from the image the drill imported
into the node and serves from the node's registry under the name the scenario's pod uses; the kubelet pulls it like
any ``:latest`` image. The drill's checks (the PCI and mdev hostdevs printed in the container, their agreement with
the slice, the claim, sysfs and the CDI edits) pass, and the report says the drill ran on the real node.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakedev.cli.drill import shipped_scenario
from harness.cluster.local import LocalCluster
from harness.drills.scenario import load_scenario
from kubeclient import KubeClient
from kubeclient.resources import NODES, RESOURCE_SLICES

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.xdist_group(name="realnode")]

REAL_NODE_ADDRESS = "127.0.0.6"
LAUNCHER = "virt-launcher-testvm"
PASSTHROUGH_BUSES = {"0x4b", "0xca"}
"""The buses of kubevirt-host's vfio-bound GPUs (either may be allocated)."""
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@dataclass(frozen=True, kw_only=True)
class Drilled:
    done: subprocess.CompletedProcess[str]
    report_dir: Path
    drill: dict[str, Any]
    """The drill's entry in report.json."""


@pytest.fixture(scope="module")
def drilled(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Drilled:
    report_dir = tmp_path_factory.mktemp("drill-real-node")
    done = subprocess.run(
        [
            sys.executable, "-m", "fakedev", "drill", "kubevirt-pci", "--real-node",
            "--address", REAL_NODE_ADDRESS, "--kubeconfig", str(local_cluster.kubeconfig),
            "--ca", str(local_cluster.layout.pki), "--report-dir", str(report_dir),
        ],
        capture_output=True,
        text=True,
        timeout=1500,  # the host lock may make it wait for another real node to stop
        check=False,
    )  # fmt: skip
    report = report_dir / "report.json"
    assert report.is_file(), done.stdout + done.stderr[-4000:]
    (drill,) = json.loads(report.read_text())["drills"]
    return Drilled(done=done, report_dir=report_dir, drill=drill)


def test_the_drill_passes_on_the_real_node(drilled: Drilled) -> None:
    assert drilled.done.returncode == 0, drilled.done.stdout + drilled.done.stderr[-4000:]
    drill = drilled.drill
    assert drill["outcome"] == "passed", drill["message"]
    assert drill["nodeKind"] == "real" and drill["nodes"] == {"kv": REAL_NODE_ADDRESS}
    scenario = load_scenario(shipped_scenario("kubevirt-pci"))
    assert [s["title"] for s in drill["steps"]] == [s.title for s in scenario.steps]
    assert {s["outcome"] for s in drill["steps"]} == {"passed"}
    assert "kubevirt-pci: passed in " in drilled.done.stderr
    assert f"on real node(s) {REAL_NODE_ADDRESS}" in drilled.done.stderr
    page = (drilled.report_dir / "report.html").read_text()
    assert f"the real node (this machine&#x27;s kubelet and containerd): kv → {REAL_NODE_ADDRESS} (nvidia)" in page


def test_the_stand_in_printed_both_hostdevs_in_its_container(drilled: Drilled) -> None:
    printed = drilled.drill["outputs"][LAUNCHER]
    assert printed.rstrip().endswith("virt-launcher-standin: 2 hostdevs")
    (pci,) = re.findall(r"<hostdev mode='subsystem' type='pci' managed='no'>.*?</hostdev>", printed, re.DOTALL)
    bus = re.search(r"<address domain='0x0000' bus='(0x[0-9a-f]{2})' slot='0x00' function='0x0'/>", pci)
    assert bus is not None and bus.group(1) in PASSTHROUGH_BUSES, pci
    assert "<alias name='ua-dra-gpu-gpu1'/>" in pci
    (mdev,) = re.findall(
        r"<hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci'>.*?</hostdev>", printed, re.DOTALL
    )
    assert re.search(rf"<address uuid='{UUID}'/>", mdev) and "<alias name='ua-dra-gpu-vgpu1'/>" in mdev


def test_the_stand_in_image_came_from_the_node_registry(drilled: Drilled) -> None:
    # The pod names fakedev.local/virt-launcher-standin:latest: the kubelet pulls it (Always, for :latest), and
    # containerd resolves it at the node's registry, which serves the archive the drill imported.
    registry = (drilled.report_dir / "real-node" / "kubevirt-pci" / "registry.log").read_text()
    assert "/v2/virt-launcher-standin/manifests/latest?ns=fakedev.local 200" in registry


def test_the_node_is_gone_after_the_drill(drilled: Drilled, kube: KubeClient) -> None:
    assert kube.get_or_none(NODES, REAL_NODE_ADDRESS) is None
    assert not kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={REAL_NODE_ADDRESS}")
