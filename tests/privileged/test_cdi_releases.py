"""A container the node emulator runs under runc gets the CDI edits of the fake NVIDIA plugin's specs, as each
driver release writes them: YAML per-claim specs (v0.4.1) or the node's base spec (v25.8.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakedev.cli.rig import plugin_command
from harness.cluster.local import LocalCluster
from harness.conformance.checks import CATALOG, select
from harness.conformance.context import conformance_context
from harness.conformance.runner import run_checks
from harness.kube.waits import wait_pod_phase
from harness.node.drivers import template_driver
from harness.procs import wait_for
from kubeclient import KubeClient
from kubeclient.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS
from tests.helpers import claim_body, device_class_body, driver_is, nvidia_release_profile, pod_body
from tests.privileged.conftest import RigFactory

pytestmark = [pytest.mark.cluster, pytest.mark.privileged]

NVIDIA = "gpu.nvidia.com"
SHOW = "env | grep -E '^(NVIDIA_VISIBLE_DEVICES|FAKEDEV_)' | sort; ls /dev/nvidiactl; sleep 3600"


@pytest.mark.parametrize(
    ("release", "visible", "spec_prefix", "id_prefix"),
    [
        # The claim spec's own void comes first; the device's list, applied after it, wins.
        ("v0.4.1", "GPU-", "k8s.gpu.nvidia.com-claim_", "k8s.gpu.nvidia.com/claim="),
        # The base spec's void is all there is: the container names its GPU by FAKEDEV_<DEVICE>_UUID only.
        ("v25.8.1", "void", "k8s.gpu.nvidia.com-device_base", "k8s.gpu.nvidia.com/device=gpu-"),
    ],
    ids=["v0.4.1", "v25.8.1"],
)
def test_a_container_sees_the_edits_of_the_releases_specs(
    release: str,
    visible: str,
    spec_prefix: str,
    id_prefix: str,
    node_rig_factory: RigFactory,
    kube: KubeClient,
    test_namespace: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    rig = node_rig_factory(profile=str(nvidia_release_profile(tmp_path, release=release)), schemas=None)
    kube.create(DEVICE_CLASSES, device_class_body(name=unique_name, expression=driver_is(NVIDIA)))
    try:
        kube.create(RESOURCE_CLAIMS, claim_body(name="c", device_class=unique_name), namespace=test_namespace)
        pod = pod_body(name="p", node=rig.name, claims={"gpu": "c"}, command=SHOW, grace_seconds=1)
        kube.create(PODS, pod, namespace=test_namespace)
        wait_pod_phase(kube, "p", namespace=test_namespace, phase="Running", timeout=60)
        worker = rig.node.pod_worker(namespace=test_namespace, name="p")
        assert worker is not None
        wait_for(lambda: "/dev/nvidiactl" in worker.container_logs(), timeout=20, what="container output")
        lines = worker.container_logs().splitlines()
        (device,) = kube.get(RESOURCE_CLAIMS, "c", namespace=test_namespace)["status"]["allocation"]["devices"][
            "results"
        ]
        key = device["device"].upper().replace("-", "_")
        (shown,) = [v.split("=", 1)[1] for v in lines if v.startswith("NVIDIA_VISIBLE_DEVICES=")]  # set once
        assert shown.startswith(visible)
        assert any(v.startswith(f"FAKEDEV_{key}_UUID=GPU-") for v in lines)
        assert lines[-1] == "/dev/nvidiactl"
        ids = worker.files.cdi_ids_file("c").read_text().split()
        assert ids[0].startswith(id_prefix) and ids[1].startswith("gpu.nvidia.com/metadata=")
        assert any(p.name.startswith(spec_prefix) and p.suffix == ".yaml" for p in rig.layout.cdi.iterdir())
    finally:
        kube.delete(DEVICE_CLASSES, unique_name)


@pytest.mark.slow
@pytest.mark.parametrize("release", ["v0.4.1", "v25.8.1"])
def test_every_conformance_check_passes_against_the_nvidia_plugin(
    release: str, local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The suite's CDI checks (IDs resolve, valid specs, nothing of a claim left) on each release's layout."""
    profile = nvidia_release_profile(tmp_path, release=release, gpus=4)  # prepare.concurrent holds three claims
    driver = template_driver(plugin_command(profile=str(profile)))
    with conformance_context(client=local_cluster.client, kubeconfig=local_cluster.kubeconfig, driver=driver) as ctx:
        results = run_checks(ctx, select(only=()), progress=lambda _: None)
    # Every check passes, but the recommended status.devices one: no NVIDIA release writes claim status.
    expected = {c.id: "passed" for c in CATALOG} | {"status.devices": "skipped"}
    assert {r.id: r.outcome for r in results} == expected, [r.message for r in results]
