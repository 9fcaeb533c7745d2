"""The node emulator plays the kubelet's DRA part against the real control plane, with pods under runc (issue 5)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from fakedev.cli.rig import FakeNodeRig
from fakedev.render import Schema
from harness.kube.manifests import apply_objects, load_manifest_file
from harness.kube.waits import wait_gone, wait_list, wait_pod_phase
from harness.procs import wait_for
from harness.runtime.netns import list_run_netns
from kubeclient import KubeClient
from kubeclient.resources import DEVICE_CLASSES, EVENTS, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from kubeletapi import pluginregistration_v1_pb2 as reg_pb
from kubeletapi import pluginregistration_v1_pb2_grpc as reg_grpc
from tests.helpers import claim_body, pod_body, wait_claim_status
from tests.privileged.conftest import RigFactory

pytestmark = [pytest.mark.cluster, pytest.mark.privileged]

REPO = Path(__file__).resolve().parents[2]
FAKEDEV = Path(sys.executable).parent / "fakedev"
META = "/var/run/kubernetes.io/dra-device-attributes"


def _phase(kube: KubeClient, ns: str, name: str, phase: str, *, timeout: float = 60) -> dict[str, Any]:
    return wait_pod_phase(kube, name, namespace=ns, phase=phase, timeout=timeout)


def _logs(rig: FakeNodeRig, ns: str, name: str) -> str:
    worker = rig.node.pod_worker(namespace=ns, name=name)
    return worker.container_logs() if worker else ""


def test_seed_example_runs_with_cdi_env_and_metadata(
    seed_rig: FakeNodeRig, kube: KubeClient, test_namespace: str
) -> None:
    objects = load_manifest_file(REPO / "examples" / "seed-extended-resource.yaml")
    device_class = next(o for o in objects if o["kind"] == "DeviceClass")
    pod = next(o for o in objects if o["kind"] == "Pod")
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": seed_rig.name}
    pod["spec"]["containers"][0]["command"] = [
        "sh",
        "-c",
        f"echo device allocated; env | grep ^GPU_DEVICE_ | sort; cat {META}/*/*/*/*-metadata.json | "
        "head -c 300; echo; sleep 3600",
    ]
    try:
        apply_objects(kube, [device_class])
        apply_objects(kube, [pod], namespace=test_namespace)
        _phase(kube, test_namespace, "extended-resource-dra-demo", "Running")
        wait_for(
            lambda: "metadata.resource.k8s.io/v1beta1" in _logs(seed_rig, test_namespace, "extended-resource-dra-demo"),
            timeout=20,
            what="container output",
        )
        out = _logs(seed_rig, test_namespace, "extended-resource-dra-demo").splitlines()
        assert out[0] == "device allocated"
        assert out[1].startswith("GPU_DEVICE_") and "=gpu-" in out[1]
        assert '"kind":"DeviceMetadata"' in out[-1]
        (listed,) = kube.list(RESOURCE_CLAIMS, namespace=test_namespace)
        claim = wait_claim_status(kube, listed["metadata"]["name"], namespace=test_namespace)
        assert claim["status"]["devices"][0]["conditions"][0]["type"] == "Ready"
        cli = subprocess.run(
            [
                str(FAKEDEV),
                "node",
                "logs",
                "extended-resource-dra-demo",
                "-n",
                test_namespace,
                "--kubeconfig",
                str(seed_rig.site.kubeconfig),
                "--base",
                str(seed_rig.layout.root.parent),
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert cli.stdout.startswith("device allocated\n")
    finally:
        kube.delete(DEVICE_CLASSES, "example-gpu")


def test_deleting_a_pod_unprepares_and_removes_everything(
    seed_rig: FakeNodeRig, kube: KubeClient, test_namespace: str, example_class: str
) -> None:
    kube.create(RESOURCE_CLAIMS, claim_body(name="c", device_class=example_class), namespace=test_namespace)
    kube.create(PODS, pod_body(name="p", node=seed_rig.name, claims={"gpu": "c"}), namespace=test_namespace)
    _phase(kube, test_namespace, "p", "Running")
    assert len(list(seed_rig.layout.cdi.iterdir())) == 2
    assert len(list_run_netns(seed_rig.node.run.run_id)) == 1
    kube.delete(PODS, "p", namespace=test_namespace, grace_seconds=1)
    wait_gone(kube, PODS, "p", namespace=test_namespace, timeout=30)
    assert list(seed_rig.layout.cdi.iterdir()) == []
    assert list_run_netns(seed_rig.node.run.run_id) == []
    assert "devices" not in wait_claim_status(kube, "c", namespace=test_namespace, present=False).get("status", {})
    calls = [(method, uids) for method, _, uids in seed_rig.node.dra.calls]
    uid = kube.get(RESOURCE_CLAIMS, "c", namespace=test_namespace)["metadata"]["uid"]
    assert calls == [("NodePrepareResources", [uid]), ("NodeUnprepareResources", [uid])]


def test_exit_codes_become_pod_phase(
    seed_rig: FakeNodeRig, kube: KubeClient, test_namespace: str, example_class: str
) -> None:
    kube.create(RESOURCE_CLAIMS, claim_body(name="c", device_class=example_class), namespace=test_namespace)
    kube.create(
        PODS,
        pod_body(name="p", node=seed_rig.name, claims={"gpu": "c"}, command="echo bye; exit 3"),
        namespace=test_namespace,
    )
    pod = _phase(kube, test_namespace, "p", "Failed")
    (status,) = pod["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == 3
    assert _logs(seed_rig, test_namespace, "p") == "bye\n"
    # A finished pod releases its devices at once, as the kubelet does.
    wait_for(lambda: list(seed_rig.layout.cdi.iterdir()) == [], timeout=20, what="unprepare after exit")


def test_failing_prepare_keeps_the_pod_pending_with_an_event_then_recovers(
    seed_rig: FakeNodeRig, kube: KubeClient, test_namespace: str, example_class: str
) -> None:
    root = seed_rig.layout.kubelet_root
    subprocess.run(
        [
            str(FAKEDEV),
            "fault",
            "--kubelet-root",
            str(root),
            "--driver",
            "gpu.example.com",
            "prepare",
            "--fail",
            "2",
            "--error",
            "injected by the test",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    kube.create(RESOURCE_CLAIMS, claim_body(name="c", device_class=example_class), namespace=test_namespace)
    kube.create(PODS, pod_body(name="p", node=seed_rig.name, claims={"gpu": "c"}), namespace=test_namespace)
    events = wait_list(
        kube,
        EVENTS,
        namespace=test_namespace,
        predicate=lambda items: any(e["reason"] == "FailedPrepareDynamicResources" for e in items),
        what="FailedPrepareDynamicResources",
    )
    assert any("injected by the test" in e["message"] for e in events)
    assert kube.get(PODS, "p", namespace=test_namespace)["status"]["phase"] == "Pending"
    _phase(kube, test_namespace, "p", "Running")


def test_missing_driver_is_named_in_the_event(
    node_rig_factory: RigFactory, kube: KubeClient, test_namespace: str, example_class: str
) -> None:
    rig = node_rig_factory(profile="seed-example")
    driver = rig.add_plugin(Schema.EXAMPLE)
    driver.stop()
    wait_for(lambda: "gpu.example.com" not in rig.node.plugins.drivers(), timeout=20, what="deregistration")
    kube.create(RESOURCE_CLAIMS, claim_body(name="c", device_class=example_class), namespace=test_namespace)
    kube.create(PODS, pod_body(name="p", node=rig.name, claims={"gpu": "c"}), namespace=test_namespace)
    events = wait_list(
        kube,
        EVENTS,
        namespace=test_namespace,
        predicate=lambda items: any(e["reason"] == "FailedPrepareDynamicResources" for e in items),
        what="FailedPrepareDynamicResources",
    )
    assert any("DRA driver gpu.example.com is not registered" in e["message"] for e in events)


def test_slices_are_wiped_when_the_driver_stays_away(node_rig_factory: RigFactory, kube: KubeClient) -> None:
    rig = node_rig_factory(profile="seed-example", wipe_grace=1.0)
    driver = rig.add_plugin(Schema.EXAMPLE)
    driver.kill()
    wait_list(
        kube,
        RESOURCE_SLICES,
        field_selector=f"spec.nodeName={rig.name}",
        predicate=lambda s: not s,
        timeout=30,
        what="slices wiped",
    )
    assert [d for _, d in rig.node.wiped] == ["gpu.example.com"]
    driver.start()
    wait_list(kube, RESOURCE_SLICES, field_selector=f"spec.nodeName={rig.name}", predicate=bool, what="republished")


def test_node_start_wipes_stale_slices(node_rig_factory: RigFactory, kube: KubeClient, unique_name: str) -> None:
    kube.create(
        RESOURCE_SLICES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{unique_name}-stale"},
            "spec": {
                "driver": "stale.example.com",
                "nodeName": unique_name,
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "d"}],
            },
        },
    )
    node_rig_factory()
    assert kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={unique_name}") == []


def test_registration_ignores_dotfiles_and_plain_files_and_refuses_bad_versions(
    node_rig_factory: RigFactory,
) -> None:
    rig = node_rig_factory()
    registry = rig.layout.registry
    (registry / "not-a-socket.sock").write_text("x")
    received: list[reg_pb.RegistrationStatus] = []

    class Bad(reg_grpc.RegistrationServicer):
        async def GetInfo(self, request: Any, context: Any) -> reg_pb.PluginInfo:
            return reg_pb.PluginInfo(
                type="DRAPlugin", name="bad.example.com", endpoint="/nonexistent", supported_versions=["v9.DRAPlugin"]
            )

        async def NotifyRegistrationStatus(self, request: Any, context: Any) -> reg_pb.RegistrationStatusResponse:
            received.append(request)
            return reg_pb.RegistrationStatusResponse()

    async def serve(path: Path) -> grpc.aio.Server:
        server = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(Bad(), server)
        server.add_insecure_port(f"unix:{path}")
        await server.start()
        return server

    hidden = rig.background.loop.call(serve(registry / ".hidden-reg.sock"))
    bad = rig.background.loop.call(serve(registry / "bad-reg.sock"))
    try:
        wait_for(lambda: bool(received), timeout=10, what="NotifyRegistrationStatus")
        assert received[0].plugin_registered is False
        assert "v9.DRAPlugin" in received[0].error
        kinds = [(e.kind, Path(e.socket).name) for e in rig.node.plugins.events]
        assert ("refused", "bad-reg.sock") in kinds
        assert all(name not in (".hidden-reg.sock", "not-a-socket.sock") for _, name in kinds)
    finally:
        rig.background.loop.call(hidden.stop(0))
        rig.background.loop.call(bad.stop(0))


def test_recreated_socket_registers_again(node_rig_factory: RigFactory) -> None:
    rig = node_rig_factory(profile="seed-example")
    driver = rig.add_plugin(Schema.EXAMPLE)
    driver.restart()
    wait_for(
        lambda: [e.kind for e in rig.node.plugins.events if e.driver == "gpu.example.com"].count("registered") >= 2,
        timeout=20,
        what="second registration",
    )
    kinds = [
        e.kind
        for e in rig.node.plugins.events
        if e.driver == "gpu.example.com" and e.kind != "health-opened" and e.kind != "health-closed"
    ]
    assert kinds[:3] == ["registered", "deregistered", "registered"]


def test_health_reaches_allocated_resources_status(
    seed_rig: FakeNodeRig, kube: KubeClient, test_namespace: str, example_class: str
) -> None:
    kube.create(RESOURCE_CLAIMS, claim_body(name="c", device_class=example_class), namespace=test_namespace)
    kube.create(PODS, pod_body(name="p", node=seed_rig.name, claims={"gpu": "c"}), namespace=test_namespace)
    _phase(kube, test_namespace, "p", "Running")
    device = kube.get(RESOURCE_CLAIMS, "c", namespace=test_namespace)["status"]["allocation"]["devices"]["results"][0]

    def health() -> list[Any]:
        pod = kube.get(PODS, "p", namespace=test_namespace)
        return pod["status"]["containerStatuses"][0].get("allocatedResourcesStatus") or []

    wait_for(lambda: bool(health()), timeout=20, what="allocatedResourcesStatus")
    (entry,) = health()
    assert entry["name"] == "claim:gpu"
    assert entry["resources"][0]["health"] == "Healthy"
    assert entry["resources"][0]["resourceID"].startswith("k8s.gpu.example.com/device=")
    subprocess.run(
        [
            str(FAKEDEV),
            "fault",
            "--kubelet-root",
            str(seed_rig.layout.kubelet_root),
            "--driver",
            "gpu.example.com",
            "health",
            device["device"],
            "--state",
            "Unhealthy",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    wait_for(lambda: health()[0]["resources"][0]["health"] == "Unhealthy", timeout=20, what="Unhealthy")
    seed_rig.plugins["gpu.example.com"].kill()
    wait_for(lambda: health()[0]["resources"][0]["health"] == "Unknown", timeout=20, what="Unknown after driver loss")


def test_emulator_restart_keeps_containers_and_does_not_prepare_again(
    seed_rig: FakeNodeRig, kube: KubeClient, test_namespace: str, example_class: str
) -> None:
    kube.create(RESOURCE_CLAIMS, claim_body(name="c", device_class=example_class), namespace=test_namespace)
    kube.create(
        PODS,
        pod_body(name="p", node=seed_rig.name, claims={"gpu": "c"}, command="echo up; sleep 3600"),
        namespace=test_namespace,
    )
    pod = _phase(kube, test_namespace, "p", "Running")
    started = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    container_id = pod["status"]["containerStatuses"][0]["containerID"]
    seed_rig.background.restart()  # a kubelet restart: state from the checkpoint, containers untouched
    seed_rig.wait_registered("gpu.example.com")
    wait_for(
        lambda: seed_rig.node.pod_worker(namespace=test_namespace, name="p") is not None, timeout=20, what="pod adopted"
    )
    worker = seed_rig.node.pod_worker(namespace=test_namespace, name="p")
    assert worker is not None
    wait_for(lambda: worker.phase == "Running", timeout=20, what="adopted pod running")
    assert not seed_rig.node.dra.calls
    pod = kube.get(PODS, "p", namespace=test_namespace)
    assert pod["status"]["containerStatuses"][0]["containerID"] == container_id
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert started
    kube.delete(PODS, "p", namespace=test_namespace, grace_seconds=1)
    wait_gone(kube, PODS, "p", namespace=test_namespace, timeout=30)
    assert [m for m, _, _ in seed_rig.node.dra.calls] == ["NodeUnprepareResources"]


def test_one_claim_shared_by_two_pods_is_prepared_once(
    seed_rig: FakeNodeRig, kube: KubeClient, test_namespace: str, example_class: str
) -> None:
    kube.create(RESOURCE_CLAIMS, claim_body(name="shared", device_class=example_class), namespace=test_namespace)
    for name in ("a", "b"):
        kube.create(PODS, pod_body(name=name, node=seed_rig.name, claims={"gpu": "shared"}), namespace=test_namespace)
    for name in ("a", "b"):
        _phase(kube, test_namespace, name, "Running")
    assert [m for m, _, _ in seed_rig.node.dra.calls] == ["NodePrepareResources"]
    kube.delete(PODS, "a", namespace=test_namespace, grace_seconds=1)
    wait_gone(kube, PODS, "a", namespace=test_namespace, timeout=30)
    assert [m for m, _, _ in seed_rig.node.dra.calls] == ["NodePrepareResources"]
    kube.delete(PODS, "b", namespace=test_namespace, grace_seconds=1)
    wait_gone(kube, PODS, "b", namespace=test_namespace, timeout=30)
    assert [m for m, _, _ in seed_rig.node.dra.calls] == ["NodePrepareResources", "NodeUnprepareResources"]


def test_kubelet_checkpoint_has_the_kubelet_shape(
    seed_rig: FakeNodeRig, kube: KubeClient, test_namespace: str, example_class: str
) -> None:
    import zlib

    kube.create(RESOURCE_CLAIMS, claim_body(name="c", device_class=example_class), namespace=test_namespace)
    kube.create(PODS, pod_body(name="p", node=seed_rig.name, claims={"gpu": "c"}), namespace=test_namespace)
    _phase(kube, test_namespace, "p", "Running")
    doc = json.loads(seed_rig.layout.dra_checkpoint.read_text())
    assert set(doc) == {"Data", "Checksum"} and zlib.crc32(doc["Data"].encode()) == doc["Checksum"]
    entries = json.loads(doc["Data"])["entries"]
    assert [e["name"] for e in entries] == ["c"]
    assert entries[0]["podUIDs"] == [kube.get(PODS, "p", namespace=test_namespace)["metadata"]["uid"]]
