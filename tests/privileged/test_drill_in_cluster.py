"""``fakedev drill --in-cluster`` on the local control plane: an emulated node runs the nvidia plugin with kube
credentials (so it applies DeviceFaults, as the chart's DaemonSet pod does) and a pod labelled as the DaemonSet's
marks it as a chart node. The eviction drill passes with its own assertions through DeviceFault objects; drills whose
faults need the node or the control plane come out BLOCKED with the reason."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakedev.cli.drill import shipped_scenario
from fakedev.cli.drill_cluster_env import ChartDrillEnvironment
from fakedev.render import Schema
from harness.drills.in_cluster import NEEDS_CONTROL_PLANE, NEEDS_NODE
from harness.drills.runner import run_drills
from harness.drills.scenario import load_scenario
from harness.procs import wait_for
from kubeclient import KubeClient
from kubeclient.resources import DEVICE_FAULTS, NAMESPACES, PODS
from tests.integration.conftest import device_fault_crd  # noqa: F401 - the CRD, installed once per control plane
from tests.privileged.conftest import RigFactory

pytestmark = [pytest.mark.cluster, pytest.mark.privileged]


@pytest.fixture
def chart_namespace(kube: KubeClient, unique_name: str) -> Iterator[str]:
    name = f"{unique_name}-chart"
    kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.delete(NAMESPACES, name)


def test_in_cluster_drills_use_device_faults_and_block_what_they_cannot_do(
    device_fault_crd: str,  # noqa: F811 - the fixture imported above
    node_rig_factory: RigFactory,
    chart_namespace: str,
    kube: KubeClient,
) -> None:
    rig = node_rig_factory(profile="dgx-h100", schemas=(Schema.NVIDIA,))
    # What the DaemonSet would have put on the node: a pod with the chart's label (the plugin itself is the rig's).
    kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "fakedev-plugin", "labels": {"app.kubernetes.io/name": "fakedev"}},
            "spec": {
                "nodeName": rig.name,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "plugin", "image": "busybox", "command": ["sleep", "3600"]}],
            },
        },
        namespace=chart_namespace,
    )
    wait_for(
        lambda: kube.get(PODS, "fakedev-plugin", namespace=chart_namespace)["status"].get("phase") == "Running",
        timeout=60,
        what="the plugin pod Running",
    )
    envs: list[ChartDrillEnvironment] = []

    def environment() -> ChartDrillEnvironment:
        envs.append(ChartDrillEnvironment(client=kube, chart_namespace=chart_namespace, node_names=(rig.name,)))
        return envs[-1]

    names = ("unhealthy-gpu-eviction", "node-reboot", "apiserver-outage")
    results = run_drills(
        [load_scenario(shipped_scenario(n)) for n in names],
        client=kube,
        env_factory=environment,
        cluster=None,
        progress=print,
    )
    eviction, reboot, outage = results
    assert eviction.outcome == "passed", eviction.message
    assert eviction.nodes == {"dgx": rig.name}
    assert all(s.outcome == "passed" for s in eviction.steps)
    faults = [s.message for s in eviction.steps if s.kind in ("fault", "recover")]
    assert faults[0].startswith("DeviceFault ") and "applied by gpu.nvidia.com" in faults[0]
    assert faults[-1].startswith("DeviceFault ") and "deleted" in faults[-1]
    assert any(d == "Unhealthy" for s in eviction.samples for d in s.devices.values())
    # Every DeviceFault the drill made is gone (the recovery deleted one, the tear-down the other).
    left = [f["metadata"]["name"] for f in kube.list(DEVICE_FAULTS) if f["spec"]["nodeName"] == rig.name]
    assert left == []
    assert envs[0].made == []

    assert reboot.outcome == "blocked"
    assert f"node-reboot: {NEEDS_NODE}" in reboot.message
    assert [s.outcome for s in reboot.steps].count("blocked") == 1
    assert outage.outcome == "blocked"
    assert NEEDS_CONTROL_PLANE in outage.message
