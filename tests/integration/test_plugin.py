"""The fake kubelet plugin, driven the way the kubelet drives it, against the real control plane (issue 4)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

import cdi
from fakedev.driver.checkpoint import Checkpoint, JournalState
from fakedev.driver.crash import CRASH_ENV, CrashPoint
from fakedev.plugin.calls import read_calls
from harness.errors import DraCallError
from harness.node.dra_client import DraConnection
from harness.node.registration import handshake
from harness.procs import wait_for
from harness.runtime.oci import render_container_spec
from kubeclient import KubeClient
from kubeclient.resources import PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, RESOURCE_SLICES
from kubeletapi import DRA_V1_VERSION, DRA_V1BETA1_VERSION, HEALTH_V1_VERSION
from kubeletapi import dra_v1_pb2 as v1
from kubeletapi import dra_v1_pb2_grpc as v1_grpc
from kubeletapi.types import ClaimRef
from tests.helpers import allocated_claim, claim_body, claim_ref, next_report, status_devices, wait_claim_status
from tests.integration.conftest import PluginProcess

pytestmark = pytest.mark.cluster

METADATA_ROOT = "/var/run/kubernetes.io/dra-device-attributes"


async def _prepare(plugin: PluginProcess, refs: list[ClaimRef], *, version: str = DRA_V1_VERSION) -> Any:
    conn = DraConnection(endpoint=plugin.dra_socket)
    try:
        return await conn.prepare(refs, version=version)
    finally:
        await conn.close()


async def _unprepare(plugin: PluginProcess, refs: list[ClaimRef], *, version: str = DRA_V1_VERSION) -> Any:
    conn = DraConnection(endpoint=plugin.dra_socket)
    try:
        return await conn.unprepare(refs, version=version)
    finally:
        await conn.close()


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.fixture
def example_plugin(plugin_factory: Callable[..., PluginProcess], emulated_node: str) -> PluginProcess:
    return plugin_factory(node=emulated_node)


def test_registers_the_way_the_kubelet_expects(example_plugin: PluginProcess) -> None:
    reg = asyncio.run(handshake(example_plugin.registration_socket, registered=[]))
    assert reg.driver == "gpu.example.com"
    assert reg.endpoint == example_plugin.dra_socket
    assert reg.dra_version == DRA_V1_VERSION
    assert reg.health_version == HEALTH_V1_VERSION
    assert reg.advertised == ("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
    wait_for(lambda: "registered with the kubelet" in example_plugin.log(), timeout=5, what="registration logged")


def test_sockets_are_private_and_stale_ones_are_replaced(
    plugin_factory: Callable[..., PluginProcess], emulated_node: str
) -> None:
    plugin = plugin_factory(node=emulated_node, start=False)
    # A socket left behind by a crashed predecessor.
    plugin.plugin_dir.mkdir(parents=True)
    import socket

    leftover = socket.socket(socket.AF_UNIX)
    leftover.bind(str(plugin.dra_socket))
    leftover.close()
    plugin.start()
    for sock in (plugin.dra_socket, plugin.registration_socket):
        assert stat.S_ISSOCK(sock.stat().st_mode)
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o750
    assert asyncio.run(handshake(plugin.registration_socket, registered=[])).driver == "gpu.example.com"


def test_slices_are_owned_by_the_node(example_plugin: PluginProcess, kube: KubeClient) -> None:
    def published() -> bool:
        return bool(kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={example_plugin.node}"))

    wait_for(published, timeout=20, what="slices")
    (s,) = kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={example_plugin.node}")
    owner = s["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("Node", example_plugin.node)
    assert s["spec"]["driver"] == "gpu.example.com"
    assert s["spec"]["pool"] == {"name": example_plugin.node, "generation": 1, "resourceSliceCount": 1}
    assert len(s["spec"]["devices"]) == 8


def test_prepare_is_idempotent_and_unprepare_twice_succeeds(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="c", device_class=example_class),
        pod="p",
    )
    ref = claim_ref(claim)
    first = asyncio.run(_prepare(example_plugin, [ref]))
    second = asyncio.run(_prepare(example_plugin, [ref]))
    assert first == second
    (device,) = first[ref.uid].devices
    assert device.cdi_device_ids == (
        f"k8s.gpu.example.com/device={ref.uid}-{device.device}",
        f"gpu.example.com/metadata={ref.uid}_gpu",
    )
    assert asyncio.run(_unprepare(example_plugin, [ref])) == {ref.uid: ""}
    assert asyncio.run(_unprepare(example_plugin, [ref])) == {ref.uid: ""}
    assert _files(example_plugin.cdi_dir) == []
    assert _files(example_plugin.plugin_dir / "dra-device-metadata") == []


def test_v1beta1_calls_work(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="c", device_class=example_class),
        pod="p",
    )
    ref = claim_ref(claim)
    result = asyncio.run(_prepare(example_plugin, [ref], version=DRA_V1BETA1_VERSION))[ref.uid]
    assert result.error == ""
    assert result.devices[0].share_id is None
    assert len(result.devices[0].cdi_device_ids) == 2
    assert asyncio.run(_unprepare(example_plugin, [ref], version=DRA_V1BETA1_VERSION)) == {ref.uid: ""}


def test_claim_status_is_ready_and_owned_by_the_driver(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="c", device_class=example_class),
        pod="p",
    )
    ref = claim_ref(claim)
    asyncio.run(_prepare(example_plugin, [ref]))
    stored = wait_claim_status(kube, "c", namespace=test_namespace)
    (result,) = stored["status"]["allocation"]["devices"]["results"]
    (entry,) = stored["status"]["devices"]
    assert (entry["driver"], entry["pool"], entry["device"]) == (result["driver"], result["pool"], result["device"])
    assert entry["conditions"][0]["type"] == "Ready" and entry["conditions"][0]["status"] == "True"
    managers = {m["manager"] for m in stored["metadata"]["managedFields"] if m.get("subresource") == "status"}
    assert "fakedev/gpu.example.com" in managers
    asyncio.run(_unprepare(example_plugin, [ref]))
    assert "devices" not in wait_claim_status(kube, "c", namespace=test_namespace, present=False)["status"]


def test_cdi_specs_are_valid_and_inject_env_and_metadata_mount(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="direct", device_class=example_class),
        pod="p",
    )
    ref = claim_ref(claim)
    (device,) = asyncio.run(_prepare(example_plugin, [ref]))[ref.uid].devices
    registry = cdi.load_registry(spec_dirs=[example_plugin.cdi_dir])
    assert not registry.errors and not registry.conflicts
    for loaded in cdi.scan_spec_dirs(spec_dirs=[example_plugin.cdi_dir]).specs:
        cdi.validate_spec(loaded.spec, source=str(loaded.path))
    base = render_container_spec(args=["true"], env={}, rootfs=Path("/r"), hostname="h", netns_path=None)
    oci = cdi.inject_devices(oci_spec=base, registry=registry, device_ids=list(device.cdi_device_ids))
    index = int(device.device.removeprefix("gpu-"))
    assert f"GPU_DEVICE_{index}={device.device}" in oci["process"]["env"]
    (mount,) = [m for m in oci["mounts"] if m["destination"].startswith(METADATA_ROOT)]
    assert mount["destination"] == f"{METADATA_ROOT}/resourceclaims/direct/gpu/gpu.example.com-metadata.json"
    assert mount["options"] == ["ro", "bind"]
    host = Path(mount["source"])
    claim_dir = f"{test_namespace}_direct_{ref.uid}"
    assert host == example_plugin.plugin_dir / "dra-device-metadata" / claim_dir / "gpu" / "metadata.json"
    docs = [json.loads(line) for line in host.read_text().splitlines()]
    assert [d["apiVersion"] for d in docs] == ["metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1"]
    assert docs[0]["metadata"] == {"name": "direct", "namespace": test_namespace, "uid": ref.uid, "generation": 1}
    assert "podClaimName" not in docs[0]
    (dev,) = docs[0]["requests"][0]["devices"]
    assert dev["name"] == device.device and dev["attributes"]["index"] == {"int": index}
    assert docs[0]["requests"] == docs[1]["requests"]


def test_template_claims_use_the_pod_claim_name_path(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    kube.create(
        RESOURCE_CLAIM_TEMPLATES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t"},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": example_class}}]}}
            },
        },
        namespace=test_namespace,
    )
    kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": example_plugin.node},
                "resourceClaims": [{"name": "accel", "resourceClaimTemplateName": "t"}],
                "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "accel"}]}}],
            },
        },
        namespace=test_namespace,
    )

    def reserved() -> bool:
        claims = kube.list(RESOURCE_CLAIMS, namespace=test_namespace)
        return bool(claims) and bool(claims[0].get("status", {}).get("reservedFor"))

    wait_for(reserved, timeout=30, what="template claim allocated")
    (claim,) = kube.list(RESOURCE_CLAIMS, namespace=test_namespace)
    ref = claim_ref(claim)
    asyncio.run(_prepare(example_plugin, [ref]))
    spec = json.loads((example_plugin.cdi_dir / f"gpu.example.com_metadata_{ref.uid}_gpu.json").read_text())
    (mount,) = spec["devices"][0]["containerEdits"]["mounts"]
    assert mount["containerPath"] == f"{METADATA_ROOT}/resourceclaimtemplates/accel/gpu/gpu.example.com-metadata.json"
    doc = json.loads(Path(mount["hostPath"]).read_text().splitlines()[0])
    assert doc["podClaimName"] == "accel"


def test_rewrite_after_volatile_state_loss_bumps_generation(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="c", device_class=example_class),
        pod="p",
    )
    ref = claim_ref(claim)
    asyncio.run(_prepare(example_plugin, [ref]))
    for f in example_plugin.cdi_dir.iterdir():  # a node reboot empties /var/run/cdi
        f.unlink()
    asyncio.run(_prepare(example_plugin, [ref]))
    host = next((example_plugin.plugin_dir / "dra-device-metadata").rglob("metadata.json"))
    assert json.loads(host.read_text().splitlines()[0])["metadata"]["generation"] == 2
    assert len(list(example_plugin.cdi_dir.iterdir())) == 2


def test_kill_between_prepare_and_unprepare_leaves_nothing_after_restart(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="c", device_class=example_class),
        pod="p",
    )
    ref = claim_ref(claim)
    before = asyncio.run(_prepare(example_plugin, [ref]))
    example_plugin.kill(signal.SIGKILL)
    example_plugin.start()
    assert asyncio.run(_prepare(example_plugin, [ref])) == before  # rebuilt from the checkpoint
    assert asyncio.run(_unprepare(example_plugin, [ref])) == {ref.uid: ""}
    assert _files(example_plugin.cdi_dir) == []
    assert _files(example_plugin.plugin_dir / "dra-device-metadata") == []
    assert Checkpoint(path=example_plugin.checkpoint).load() == {}
    # the clear of the claim's status.devices is owed until the outbox has sent it
    wait_for(
        lambda: Checkpoint(path=example_plugin.checkpoint).read() == JournalState(), timeout=10, what="nothing owed"
    )


def test_a_claim_gets_its_status_when_the_plugin_dies_right_after_recording_it(
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    example_class: str,
    kube: KubeClient,
    test_namespace: str,
) -> None:
    """status.devices is written after the answer; a plugin killed before writing it owes it in its journal, and
    the next process writes it. (Whether the answer itself got out before the kill is a race the kubelet covers
    by asking again, which the checkpoint answers.)"""
    plugin = plugin_factory(node=emulated_node, env={CRASH_ENV: CrashPoint.PREPARE_BEFORE_STATUS.value})
    claim = allocated_claim(
        kube, namespace=test_namespace, node=plugin.node, claim=claim_body(name="c", device_class=example_class),
        pod="p",
    )  # fmt: skip
    ref = claim_ref(claim)
    with contextlib.suppress(DraCallError):
        asyncio.run(_prepare(plugin, [ref]))
    wait_for(lambda: not plugin.alive(), timeout=20, what="the plugin to die before writing the status")
    assert "crash point reached" in plugin.log()
    owed = Checkpoint(path=plugin.checkpoint).read().owed
    assert list(owed) == [ref.uid] and owed[ref.uid]["devices"]
    assert status_devices(kube.get(RESOURCE_CLAIMS, "c", namespace=test_namespace)) == []
    plugin.env = {}
    plugin.start()
    stored = wait_claim_status(kube, "c", namespace=test_namespace)
    (result,) = stored["status"]["allocation"]["devices"]["results"]
    assert [(e["pool"], e["device"]) for e in status_devices(stored)] == [(result["pool"], result["device"])]
    wait_for(lambda: not Checkpoint(path=plugin.checkpoint).read().owed, timeout=10, what="the write settled")
    again = asyncio.run(_prepare(plugin, [ref]))[ref.uid]  # the kubelet's retry: answered from the checkpoint
    assert again.error == "" and again.devices[0].device == result["device"]
    assert asyncio.run(_unprepare(plugin, [ref])) == {ref.uid: ""}
    assert status_devices(wait_claim_status(kube, "c", namespace=test_namespace, present=False)) == []


def test_corrupt_checkpoint_stops_the_plugin_and_is_kept(
    plugin_factory: Callable[..., PluginProcess], emulated_node: str
) -> None:
    plugin = plugin_factory(node=emulated_node, start=False)
    plugin.checkpoint.parent.mkdir(parents=True)
    garbage = b'{"version": "fakedev.dra/checkpoint-v1", "checksum": "0", "claims": {}}'
    plugin.checkpoint.write_bytes(garbage)
    with plugin.log_path.open("wb") as log:
        code = __import__("subprocess").run(plugin.argv, stdout=log, stderr=log, timeout=30).returncode
    assert code == 1
    assert "checksum mismatch" in plugin.log() and "kept for inspection" in plugin.log()
    assert plugin.checkpoint.read_bytes() == garbage
    assert not plugin.registration_socket.exists()


def test_malformed_calls_get_clear_errors_and_the_plugin_keeps_serving(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    async def raw(claims: list[v1.Claim]) -> v1.NodePrepareResourcesResponse:
        async with grpc.aio.insecure_channel(f"unix:{example_plugin.dra_socket}") as ch:
            return await v1_grpc.DRAPluginStub(ch).NodePrepareResources(
                v1.NodePrepareResourcesRequest(claims=claims), timeout=10
            )

    with pytest.raises(grpc.RpcError) as empty:
        asyncio.run(raw([v1.Claim(namespace="default", uid="", name="x")]))
    assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as huge:
        asyncio.run(raw([v1.Claim(namespace="default", uid=f"u{i}", name="x") for i in range(10_000)]))
    assert huge.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "10000 claims" in (huge.value.details() or "")

    bad_names = asyncio.run(raw([v1.Claim(namespace="../../etc", uid="u1", name="../x")]))
    assert "not a valid namespace name" in bad_names.claims["u1"].error
    missing = asyncio.run(raw([v1.Claim(namespace=test_namespace, uid="u2", name="nope")]))
    assert "404" in missing.claims["u2"].error

    # An allocation naming a device this node never published.
    kube.create(RESOURCE_CLAIMS, claim_body(name="ghost", device_class=example_class), namespace=test_namespace)
    ghost = kube.get(RESOURCE_CLAIMS, "ghost", namespace=test_namespace)
    ghost["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "gpu.example.com", "pool": example_plugin.node, "device": "gpu-99"}
                ]
            }
        }
    }
    kube.replace(RESOURCE_CLAIMS, ghost, namespace=test_namespace, subresource="status")
    unknown = asyncio.run(_prepare(example_plugin, [claim_ref(ghost)]))[ghost["metadata"]["uid"]]
    assert "device gpu-99 of pool" in unknown.error and "is not published" in unknown.error

    config = [
        {
            "opaque": {
                "driver": "gpu.example.com",
                "parameters": {
                    "apiVersion": "gpu.resource.example.com/v1alpha1",
                    "kind": "GpuConfig",
                    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Forever"}},
                },
            }
        }
    ]
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="badcfg", device_class=example_class, config=config),
        pod="p",
    )
    bad = asyncio.run(_prepare(example_plugin, [claim_ref(claim)]))[claim["metadata"]["uid"]]
    assert "config[0].opaque.parameters.sharing.timeSlicingConfig.interval" in bad.error

    # Nothing escaped the configured roots, nothing was left by the failures, and the plugin still serves.
    assert _files(example_plugin.cdi_dir) == []
    assert example_plugin.alive()
    good = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="good", device_class=example_class),
        pod="q",
    )
    assert asyncio.run(_prepare(example_plugin, [claim_ref(good)]))[good["metadata"]["uid"]].error == ""


def test_opaque_sharing_config_reaches_the_container_env(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    config = [
        {
            "opaque": {
                "driver": "gpu.example.com",
                "parameters": {
                    "apiVersion": "gpu.resource.example.com/v1alpha1",
                    "kind": "GpuConfig",
                    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
                },
            }
        }
    ]
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="ts", device_class=example_class, config=config),
        pod="p",
    )
    ref = claim_ref(claim)
    result = asyncio.run(_prepare(example_plugin, [ref]))[ref.uid]
    assert result.error == ""
    (device,) = result.devices
    registry = cdi.load_registry(spec_dirs=[example_plugin.cdi_dir])
    index = device.device.removeprefix("gpu-")
    env = registry.resolve(device.cdi_device_ids[0]).device.container_edits.env
    assert f"GPU_DEVICE_{index}_SHARING_STRATEGY=TimeSlicing" in env
    assert f"GPU_DEVICE_{index}_TIMESLICE_INTERVAL=Long" in env


def test_one_connection_carries_dra_and_health(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="c", device_class=example_class),
        pod="p",
    )

    async def scenario() -> tuple[int, int]:
        conn = DraConnection(endpoint=example_plugin.dra_socket)
        stream = conn.watch_health(version=HEALTH_V1_VERSION)
        first = await next_report(stream, what="first health report")
        await conn.prepare([claim_ref(claim)], version=DRA_V1_VERSION)
        accepted = _accepted_connections(example_plugin.dra_socket)
        await stream.aclose()
        await conn.close()
        return len(first), accepted

    devices, accepted = asyncio.run(scenario())
    assert devices == 8
    assert accepted == 1


def _accepted_connections(path: Path) -> int:
    """Server-side sockets accepted on ``path`` (state 03 = connected in /proc/net/unix)."""
    count = 0
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 8 and os.path.normpath(cols[7]) == str(path) and cols[5] == "03":
            count += 1
    return count


def test_rolling_update_instances_have_their_own_sockets_and_serialize(
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    example_class: str,
    kube: KubeClient,
    test_namespace: str,
    short_tmp: Path,
) -> None:
    root = short_tmp / "shared"
    old = plugin_factory(node=emulated_node, rolling_update_uid="aaaa", root=root)
    new = plugin_factory(node=emulated_node, rolling_update_uid="bbbb", root=root)
    assert old.registration_socket.name == "gpu.example.com-aaaa-reg.sock"
    assert new.dra_socket.name == "dra-bbbb.sock"
    assert old.registration_socket.exists() and new.registration_socket.exists()
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=emulated_node,
        claim=claim_body(name="c", device_class=example_class),
        pod="p",
    )
    import fcntl

    with (new.plugin_dir / "serialize.lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another instance is mid-prepare

        async def blocked() -> None:
            conn = DraConnection(endpoint=new.dra_socket)
            try:
                await conn.prepare([claim_ref(claim)], version=DRA_V1_VERSION, timeout=1.0)
            finally:
                await conn.close()

        with pytest.raises(DraCallError) as exc:
            asyncio.run(blocked())
        assert exc.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    result = asyncio.run(_prepare(new, [claim_ref(claim)]))
    assert result[claim["metadata"]["uid"]].error == ""


def test_refused_registration_is_logged_and_the_plugin_keeps_serving(example_plugin: PluginProcess) -> None:
    from kubeletapi import pluginregistration_v1_pb2 as reg_pb
    from kubeletapi import pluginregistration_v1_pb2_grpc as reg_grpc

    async def refuse() -> None:
        async with grpc.aio.insecure_channel(f"unix:{example_plugin.registration_socket}") as ch:
            await reg_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
                reg_pb.RegistrationStatus(plugin_registered=False, error="test says no"), timeout=5
            )

    asyncio.run(refuse())
    wait_for(lambda: "test says no" in example_plugin.log(), timeout=5, what="refusal logged")
    assert example_plugin.alive()
    assert asyncio.run(handshake(example_plugin.registration_socket, registered=[])).driver == "gpu.example.com"
    assert os.access(example_plugin.dra_socket, os.F_OK)


def test_unprepare_works_after_the_claim_is_gone_from_the_api(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="c", device_class=example_class),
        pod="p",
    )
    ref = claim_ref(claim)
    asyncio.run(_prepare(example_plugin, [ref]))
    kube.delete(PODS, "p", namespace=test_namespace, grace_seconds=0)
    kube.delete(RESOURCE_CLAIMS, "c", namespace=test_namespace)
    wait_for(
        lambda: kube.get_or_none(RESOURCE_CLAIMS, "c", namespace=test_namespace) is None,
        timeout=30,
        what="claim deleted",
    )
    assert asyncio.run(_unprepare(example_plugin, [ref])) == {ref.uid: ""}
    assert _files(example_plugin.cdi_dir) == []
    assert _files(example_plugin.plugin_dir / "dra-device-metadata") == []


def test_record_calls_writes_one_line_per_grpc_call_in_order(
    plugin_factory: Callable[..., PluginProcess], emulated_node: str, short_tmp: Path
) -> None:
    """``--record-calls``: the interceptor sees every call, its batch size and its status, streams included."""
    records = short_tmp / "calls.jsonl"
    plugin = plugin_factory(node=emulated_node, extra=("--record-calls", str(records)))
    refs = [
        ClaimRef(uid=f"00000000-0000-0000-0000-00000000000{i}", namespace="default", name=f"gone-{i}") for i in (1, 2)
    ]

    async def session() -> None:
        await handshake(plugin.registration_socket, registered=[])
        conn = DraConnection(endpoint=plugin.dra_socket)
        try:
            stream = conn.watch_health(version=HEALTH_V1_VERSION)
            await next_report(stream, what="first health report")
            await stream.aclose()
            answer = await conn.prepare(refs, version=DRA_V1_VERSION)  # claims that do not exist: per-claim errors
            assert all(r.error for r in answer.values())
            await conn.unprepare(refs[:1], version=DRA_V1_VERSION)
        finally:
            await conn.close()

    asyncio.run(session())
    wait_for(lambda: len(read_calls(records)) >= 6, timeout=10, what="six records")
    seen = [(r["method"], r["event"], r.get("claims"), r.get("code")) for r in read_calls(records)]
    ended = ("NodeWatchResources", "ended", None, "CANCELLED")  # whenever the server noticed the client's close
    assert ended in seen
    seen.remove(ended)
    assert seen == [
        ("GetInfo", "call", None, "OK"),
        ("NotifyRegistrationStatus", "call", None, "OK"),
        ("NodeWatchResources", "opened", None, None),
        ("NodePrepareResources", "call", 2, "OK"),
        ("NodeUnprepareResources", "call", 1, "OK"),
    ]
    assert {r["service"] for r in read_calls(records)} == {
        "pluginregistration.Registration",
        "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
        "v1.DRAResourceHealth",
    }


def _mounted_host_files(cdi_dir: Path, uid: str) -> list[Path]:
    """The host files the claim's CDI specs bind-mount (its metadata files)."""
    found = []
    for spec in cdi_dir.glob(f"*{uid}*.json"):
        for device in json.loads(spec.read_text())["devices"]:
            found += [Path(m["hostPath"]) for m in device["containerEdits"].get("mounts", [])]
    return found


def test_a_late_unprepare_of_a_deleted_claim_leaves_its_successor_of_the_same_name_alone(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    first = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="c", device_class=example_class),
        pod="p",
    )
    old = claim_ref(first)
    asyncio.run(_prepare(example_plugin, [old]))
    assert asyncio.run(_unprepare(example_plugin, [old])) == {old.uid: ""}
    kube.delete(PODS, "p", namespace=test_namespace, grace_seconds=0)
    kube.delete(RESOURCE_CLAIMS, "c", namespace=test_namespace)
    wait_for(
        lambda: kube.get_or_none(RESOURCE_CLAIMS, "c", namespace=test_namespace) is None,
        timeout=30,
        what="claim deleted",
    )
    second = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="c", device_class=example_class),
        pod="q",
    )
    new = claim_ref(second)
    answer = asyncio.run(_prepare(example_plugin, [new]))
    mounted = _mounted_host_files(example_plugin.cdi_dir, new.uid)
    assert mounted
    # The kubelet repeats an unprepare it is not sure of (after its own restart): the old UID has no record now.
    assert asyncio.run(_unprepare(example_plugin, [old])) == {old.uid: ""}
    assert [p for p in mounted if not p.exists()] == []
    assert asyncio.run(_prepare(example_plugin, [new])) == answer


def test_a_recorded_claim_whose_metadata_file_is_gone_is_prepared_again(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="c", device_class=example_class),
        pod="p",
    )
    ref = claim_ref(claim)
    asyncio.run(_prepare(example_plugin, [ref]))
    (host,) = _mounted_host_files(example_plugin.cdi_dir, ref.uid)
    host.unlink()
    assert asyncio.run(_prepare(example_plugin, [ref]))[ref.uid].error == ""
    assert json.loads(host.read_text().splitlines()[0])["metadata"]["generation"] == 2


def test_a_uid_is_not_prepared_under_another_name(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=example_plugin.node,
        claim=claim_body(name="c", device_class=example_class),
        pod="p",
    )
    ref = claim_ref(claim)
    asyncio.run(_prepare(example_plugin, [ref]))
    other = ClaimRef(uid=ref.uid, namespace="default", name="someone-else")
    error = asyncio.run(_prepare(example_plugin, [other]))[ref.uid].error
    assert error == (
        f"claim {ref.uid} is prepared on this node as {test_namespace}/c; "
        "refusing to prepare it as default/someone-else"
    )


@pytest.mark.parametrize(
    ("point", "leftover"),
    [
        ("prepare-claim-spec-temp", r"^\.k8s\.gpu\.example\.com-device_{uid}\.json\.\w+\.tmp$"),
        ("prepare-metadata-temp", r"^\.metadata\.json\.\w+\.tmp$"),
        ("prepare-metadata-spec-temp", r"^\.gpu\.example\.com_metadata_{uid}_gpu\.json\.\w+\.tmp$"),
    ],
    ids=["claim-spec", "metadata-file", "metadata-spec"],
)
def test_temp_files_of_a_write_cut_short_by_a_kill_are_collected_when_the_plugin_starts(
    point: str,
    leftover: str,
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    example_class: str,
    kube: KubeClient,
    test_namespace: str,
) -> None:
    plugin = plugin_factory(node=emulated_node, env={"FAKEDEV_CRASH_AT": point})
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=plugin.node,
        claim=claim_body(name="c", device_class=example_class),
        pod="p",
    )
    ref = claim_ref(claim)
    with pytest.raises(DraCallError):
        asyncio.run(_prepare(plugin, [ref]))
    assert plugin.popen is not None and plugin.popen.wait(timeout=20) == -signal.SIGKILL
    (left,) = list(plugin.root.rglob(".*.tmp"))
    assert re.match(leftover.format(uid=ref.uid), left.name)
    plugin.env = {}
    plugin.start()
    assert list(plugin.root.rglob(".*.tmp")) == []
    assert asyncio.run(_prepare(plugin, [ref]))[ref.uid].error == ""


def test_a_checkpoint_rewrite_cut_short_by_a_kill_is_collected_when_the_plugin_starts(
    plugin_factory: Callable[..., PluginProcess], emulated_node: str
) -> None:
    """The journal is rewritten whole (temp file, rename) when it is first made and when it is compacted; a kill
    between the two leaves the temp file, which the next start collects."""
    plugin = plugin_factory(node=emulated_node, env={"FAKEDEV_CRASH_AT": "checkpoint-temp"}, start=False)
    with pytest.raises(AssertionError, match="plugin exited"):
        plugin.start()  # its first checkpoint, written at start-up, is where it dies
    assert plugin.popen is not None and plugin.popen.wait(timeout=20) == -signal.SIGKILL
    (left,) = list(plugin.root.rglob(".*.tmp"))
    assert re.match(r"^\.checkpoint\.json\.\w+\.tmp$", left.name)
    plugin.env = {}
    plugin.start()
    assert list(plugin.root.rglob(".*.tmp")) == []
    assert Checkpoint(path=plugin.checkpoint).read() == JournalState()


def test_a_held_claim_is_answered_while_another_call_holds_the_lock(
    example_plugin: PluginProcess, example_class: str, kube: KubeClient, test_namespace: str
) -> None:
    """A prepare that needs the API can hang for a minute (etcd down); claims the plugin already holds — asked again
    by a restarted kubelet — are answered from the checkpoint meanwhile. One that is not held still waits its turn."""
    import fcntl

    held, other = (
        claim_ref(
            allocated_claim(
                kube,
                namespace=test_namespace,
                node=example_plugin.node,
                claim=claim_body(name=name, device_class=example_class),
                pod=f"p-{name}",
            )
        )
        for name in ("held", "other")
    )
    first = asyncio.run(_prepare(example_plugin, [held]))
    assert first[held.uid].error == ""

    async def prepare(ref: ClaimRef) -> Any:
        conn = DraConnection(endpoint=example_plugin.dra_socket)
        try:
            return await conn.prepare([ref], version=DRA_V1_VERSION, timeout=2.0)
        finally:
            await conn.close()

    with (example_plugin.plugin_dir / "serialize.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a call in progress (here: another instance's) holds the driver's lock
        assert asyncio.run(prepare(held)) == first
        with pytest.raises(DraCallError) as exc:
            asyncio.run(prepare(other))
        assert exc.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert asyncio.run(_prepare(example_plugin, [other]))[other.uid].error == ""
