"""KubeVirt PCI attribute verification on a prepared node: the passing case, and each broken case for its reason.

One launcher pod (a vfio-bound GPU from a named claim, a vGPU from a claim template) runs the virt-launcher stand-in
under runc on an emulated ``kubevirt-host`` node; each broken case damages one file on the node, runs the verifier,
and restores the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from fakedev.cli.drill import shipped_scenario
from fakedev.cli.drill_env import FakedevDrillEnvironment
from harness.cluster.local import LocalCluster
from harness.drills.runner import DrillRun
from harness.drills.scenario import load_scenario
from harness.kube.manifests import apply_objects
from harness.kubevirt.launcher import V1ALPHA1
from harness.kubevirt.verify import Report, emulated_container_log, emulated_node_view, verify_vmi
from harness.node.layout import NodeLayout
from kubeclient import JsonObj
from kubeclient.resources import NAMESPACES, PODS

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.slow]
POD = "virt-launcher-testvm"


@dataclass
class Launched:
    cluster: LocalCluster
    run: DrillRun
    layout: NodeLayout
    pod: JsonObj
    vmi: dict[str, object]

    def verify(self) -> Report:
        pod = self.cluster.client.get(PODS, POD, namespace=self.run.namespace)
        log = emulated_container_log(self.layout, pod=pod, container="compute")
        return verify_vmi(
            vmi=self.vmi,
            client=self.cluster.client,
            node=emulated_node_view(self.layout),
            pod=pod,
            container_output=log,
        )

    def metadata_file(self, request: str) -> Path:
        (found,) = (self.layout.plugins / "gpu.nvidia.com" / "dra-device-metadata").glob(f"*/{request}/metadata.json")
        return found


@pytest.fixture(scope="module")
def launched(local_cluster: LocalCluster) -> Iterator[Launched]:
    client = local_cluster.client
    scenario = load_scenario(shipped_scenario("kubevirt-pci"))
    env = FakedevDrillEnvironment(client=client, kubeconfig=local_cluster.kubeconfig)
    run = DrillRun(scenario=scenario, client=client, env=env, cluster=local_cluster, progress=lambda _: None)
    prefix = f"kv-{os.urandom(2).hex()}"
    run.namespace = f"drill-{prefix}"
    client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": run.namespace}})
    try:
        run.nodes = env.start_nodes(scenario, prefix=prefix)
        for c in scenario.classes:
            run.make_class(c.name, c.cel, c.extended_resource_name, prefix=prefix)
        for workload in ("claims", "vm"):
            apply_objects(client, run.objects(workload), namespace=run.namespace)
        deadline = time.monotonic() + 90
        while True:
            pod = client.get(PODS, POD, namespace=run.namespace)
            layout = env.node_layout(pod["spec"].get("nodeName", ""))
            log = emulated_container_log(layout, pod=pod, container="compute") if layout else None
            if log and "hostdevs" in log:
                break
            assert time.monotonic() < deadline, f"the launcher stand-in did not report: {pod.get('status')}"
            time.sleep(0.2)
        env_vars = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        vmi = json.loads(env_vars["VMI_JSON"])
        vmi["metadata"]["namespace"] = run.namespace
        assert layout is not None
        yield Launched(cluster=local_cluster, run=run, layout=layout, pod=pod, vmi=vmi)
    finally:
        run.teardown()


@contextlib.contextmanager
def damaged(path: Path, text: str) -> Iterator[None]:
    original = path.read_bytes()
    path.write_text(text)
    try:
        yield
    finally:
        path.write_bytes(original)


def _failed(report: Report) -> set[str]:
    return {f.rule for f in report.failed()}


def _stream(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _with_pci_bus_id(path: Path, value: str) -> str:
    objects = _stream(path)
    for o in objects:
        for r in o["requests"]:  # type: ignore[attr-defined]
            for d in r["devices"]:
                d["attributes"]["resource.kubernetes.io/pciBusID"] = {"string": value}
    return "\n".join(json.dumps(o) for o in objects) + "\n"


def test_passing_case_agrees_inside_and_outside_the_container(launched: Launched) -> None:
    report = launched.verify()
    assert report.ok, report.render()
    rules = {f.rule for f in report.findings}
    assert {"slice/pci-bus-id", "sysfs/vfio-bound", "sysfs/mdev", "cdi/vfio-group-node", "container/agrees"} <= rules
    pci, mdev = report.hostdevs
    assert "type='pci'" in pci and "bus='0x4b' slot='0x00' function='0x0'" in pci and "ua-dra-gpu-gpu1" in pci
    assert "type='mdev'" in mdev and "ua-dra-gpu-vgpu1" in mdev
    # What the container printed is exactly what the host derived.
    log = emulated_container_log(launched.layout, pod=launched.pod, container="compute")
    assert log is not None and pci in log and mdev in log


def test_two_metadata_files_in_one_request_directory(launched: Launched) -> None:
    spec_file = next(launched.layout.cdi.glob("gpu.nvidia.com_metadata_*_gpu.json"))
    spec = json.loads(spec_file.read_text())
    (mount,) = spec["devices"][0]["containerEdits"]["mounts"]
    extra = dict(mount, containerPath=mount["containerPath"].replace("gpu.nvidia.com-", "other.example.com-"))
    spec["devices"][0]["containerEdits"]["mounts"].append(extra)
    with damaged(spec_file, json.dumps(spec)):
        assert _failed(launched.verify()) == {"launcher/one-metadata-file", "launcher/gpu-count", "container/agrees"}


def test_no_v1alpha1_object_in_the_stream(launched: Launched) -> None:
    path = launched.metadata_file("gpu")
    only_beta = "\n".join(json.dumps(o) for o in _stream(path) if o["apiVersion"] != V1ALPHA1) + "\n"
    with damaged(path, only_beta):
        assert _failed(launched.verify()) == {"launcher/v1alpha1-object", "launcher/gpu-count", "container/agrees"}


def _pci_bus_id(path: Path) -> str:
    (o, *_) = _stream(path)
    return str(o["requests"][0]["devices"][0]["attributes"]["resource.kubernetes.io/pciBusID"]["string"])  # type: ignore[index]


def test_uppercase_bdf(launched: Launched) -> None:
    path = launched.metadata_file("gpu")
    upper = _pci_bus_id(path).upper()
    assert upper != _pci_bus_id(path), "the profile's passthrough GPUs sit on buses with hex letters"
    with damaged(path, _with_pci_bus_id(path, upper)):
        report = launched.verify()
    # KubeVirt's pattern accepts it and libvirt gets the same address (the container agrees), but it disagrees with
    # the slice and names no sysfs device, so neither its vfio binding nor its IOMMU group can be checked.
    assert _failed(report) == {"metadata/bdf-canonical", "slice/pci-bus-id", "sysfs/pci-device", "cdi/vfio-group-node"}


def test_malformed_bdf(launched: Launched) -> None:
    path = launched.metadata_file("gpu")
    with damaged(path, _with_pci_bus_id(path, "0000:41:00")):
        assert _failed(launched.verify()) == {"launcher/bdf-format", "launcher/gpu-count", "container/agrees"}


def test_mdev_uuid_on_a_pci_passthrough_device(launched: Launched) -> None:
    path = launched.metadata_file("gpu")
    objects = _stream(path)
    for o in objects:
        for r in o["requests"]:  # type: ignore[attr-defined]
            for d in r["devices"]:
                d["attributes"]["mdevUUID"] = {"string": "0b6e2f38-4f6d-4b8e-9e55-6a7e9c2f1d10"}
    with damaged(path, "\n".join(json.dumps(o) for o in objects) + "\n"):
        failed = _failed(launched.verify())
    assert failed == {
        "slice/no-stray-mdev",
        "sysfs/mdev",
        "sysfs/iommu-group",
        "cdi/vfio-group-node",
        "container/agrees",
    }


def test_bdf_that_disagrees_with_the_slice(launched: Launched) -> None:
    path = launched.metadata_file("gpu")
    # The node's other passthrough GPU: it exists in sysfs and is bound to vfio-pci, but it is not this device.
    other = "0000:ca:00.0" if _pci_bus_id(path) == "0000:4b:00.0" else "0000:4b:00.0"
    with damaged(path, _with_pci_bus_id(path, other)):
        assert _failed(launched.verify()) == {"slice/pci-bus-id", "cdi/vfio-group-node", "container/agrees"}


def test_missing_vfio_group_node_in_the_cdi_edits(launched: Launched) -> None:
    # The claim spec of the passthrough GPU (the vGPU's carries an MDEV_UUID instead); YAML, as NVIDIA writes it.
    spec_file = next(p for p in launched.layout.cdi.glob("*-claim_*.yaml") if "_PCI_BUS_ID=" in p.read_text())
    spec = yaml.safe_load(spec_file.read_text())
    for device in spec["devices"]:
        nodes = device["containerEdits"].get("deviceNodes", [])
        device["containerEdits"]["deviceNodes"] = [n for n in nodes if n["path"] == "/dev/vfio/vfio"]
    with damaged(spec_file, yaml.safe_dump(spec)):
        assert _failed(launched.verify()) == {"cdi/vfio-group-node"}


def _cli(launched: Launched, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    manifest = tmp_path / "vmi.yaml"
    manifest.write_text(yaml.safe_dump(launched.vmi))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "fakedev",
            "kubevirt",
            "verify",
            str(manifest),
            "--kubeconfig",
            str(launched.cluster.kubeconfig),
            "--node-root",
            str(launched.layout.root),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_reports_every_rule_and_exits_zero(launched: Launched, tmp_path: Path) -> None:
    out = _cli(launched, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"launcher pod {POD}" in out.stdout
    assert "  PASS  sysfs/vfio-bound" in out.stdout and "FAIL" not in out.stdout
    assert "<hostdev mode='subsystem' type='pci' managed='no'>" in out.stdout


def test_cli_exits_one_naming_the_broken_rule(launched: Launched, tmp_path: Path) -> None:
    path = launched.metadata_file("gpu")
    only_beta = "\n".join(json.dumps(o) for o in _stream(path) if o["apiVersion"] != V1ALPHA1) + "\n"
    with damaged(path, only_beta):
        out = _cli(launched, tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "  FAIL  launcher/v1alpha1-object" in out.stdout
    assert "no metadata.resource.k8s.io/v1alpha1 object in the stream" in out.stdout
