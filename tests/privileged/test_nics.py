"""Fake NICs are real interfaces: pods get them with the name, MAC and IPs the claim reports; hot-unplug taints
them and the real device-taint-eviction controller acts (issue 6)."""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
from pathlib import Path
from typing import Any, Final

import pytest

from fakedev.cli.rig import FakeNodeRig
from fakedev.nics.hardware import plug, unplug
from fakedev.render import Schema
from harness.cluster.build import RUNC, cached_binaries
from harness.kube.waits import wait_gone, wait_object
from harness.procs import wait_for
from harness.runtime.runc import RUNC_ENV
from kubeclient import KubeClient
from kubeclient.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from linuxns import netlink
from tests.helpers import pod_body, wait_claim_status
from tests.privileged.conftest import RigFactory

pytestmark = [pytest.mark.cluster, pytest.mark.privileged]


@pytest.fixture
def nic_rig(node_rig_factory: RigFactory) -> FakeNodeRig:
    return node_rig_factory(profile="nic-only", schemas=(Schema.DRANET,))


def _nic_claim(name: str, device_class: str, *, tolerate: bool = False, config: dict[str, Any] | None = None) -> Any:
    request: dict[str, Any] = {"name": "nic", "exactly": {"deviceClassName": device_class}}
    if tolerate:
        request["exactly"]["tolerations"] = [
            {"key": "fakedev.io/unhealthy", "operator": "Exists", "effect": "NoExecute"}
        ]
    spec: dict[str, Any] = {"devices": {"requests": [request]}}
    if config:
        spec["devices"]["config"] = [{"requests": ["nic"], "opaque": {"driver": "dra.net", "parameters": config}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": spec}


def _running(kube: KubeClient, ns: str, name: str) -> Any:
    return wait_object(
        kube,
        PODS,
        name,
        namespace=ns,
        timeout=60,
        what="Running",
        predicate=lambda p: p.get("status", {}).get("phase") in ("Running", "Failed"),
    )


def _network(kube: KubeClient, ns: str, claim: str) -> Any:
    (entry,) = wait_claim_status(kube, claim, namespace=ns)["status"]["devices"]
    return entry


def _host_ifname(kube: KubeClient, rig: FakeNodeRig, ns: str, claim: str) -> str:
    """The NIC's name in the node's namespace (the slice's ``dra.net/ifName``)."""
    device = kube.get(RESOURCE_CLAIMS, claim, namespace=ns)["status"]["allocation"]["devices"]["results"][0]["device"]
    slices = kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={rig.name}")
    return str(
        next(
            d["attributes"]["dra.net/ifName"]["string"]
            for s in slices
            for d in s["spec"]["devices"]
            if d["name"] == device
        )
    )


RUNC_MOVES: Final = {"runc-1.5-moves-it": True, "runc-1.1-the-emulator-moves-it": False}


@pytest.fixture(params=list(RUNC_MOVES), ids=list(RUNC_MOVES))
def runc_nic_rig(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, node_rig_factory: RigFactory) -> Any:
    """A NIC node whose emulator runs pods with the cached runc 1.5 (netDevices moved by runc) or Debian's 1.1.5
    (moved by the emulator: the fallback)."""
    moves = RUNC_MOVES[request.param]
    binary = str(cached_binaries(groups=(RUNC,)).path("runc")) if moves else shutil.which("runc")
    assert binary is not None
    monkeypatch.setenv(RUNC_ENV, binary)
    rig = node_rig_factory(profile="nic-only", schemas=(Schema.DRANET,))
    assert rig.node.runtime.binary == binary
    assert rig.node.runtime.moves_net_devices is moves
    return rig


def test_either_runc_hands_the_pod_its_nic_and_teardown_hands_it_back(
    runc_nic_rig: FakeNodeRig, nic_class: str, kube: KubeClient, test_namespace: str
) -> None:
    rig = runc_nic_rig
    kube.create(RESOURCE_CLAIMS, _nic_claim("c", nic_class), namespace=test_namespace)
    pod = pod_body(
        name="p", node=rig.name, claims={"net": "c"}, command="ip -o link; ip -o addr; sleep 3600", grace_seconds=1
    )
    kube.create(PODS, pod, namespace=test_namespace)
    assert _running(kube, test_namespace, "p")["status"]["phase"] == "Running"
    worker = rig.node.pod_worker(namespace=test_namespace, name="p")
    assert worker is not None
    wait_for(lambda: " inet " in worker.container_logs(), timeout=20, what="container output")
    data, host = _network(kube, test_namespace, "c")["networkData"], _host_ifname(kube, rig, test_namespace, "c")
    out = worker.container_logs()
    link = next((line for line in out.splitlines() if re.match(rf"\d+: {data['interfaceName']}[@:]", line)), out)
    assert f"link/ether {data['hardwareAddress']}" in link
    addrs = re.findall(rf"\d+: {data['interfaceName']}\s+inet6? (\S+)", out)
    assert sorted(a for a in addrs if not a.startswith("fe80:")) == sorted(data["ips"])
    # runc 1.5 got the spec as CDI made it; for runc 1.1 the emulator took the field out and moved the NIC itself.
    spec = json.loads((worker.files.bundle(container="c", attempt=0).bundle / "config.json").read_text())
    assert ("netDevices" in spec["linux"]) is rig.node.runtime.moves_net_devices
    assert rig.nics is not None
    with netlink(rig.nics.hardware.node_netns) as ipr:
        assert ipr.link_lookup(ifname=host) == []

    kube.delete(PODS, "p", namespace=test_namespace, grace_seconds=1)
    wait_gone(kube, PODS, "p", namespace=test_namespace, timeout=30)

    with netlink(rig.nics.hardware.node_netns) as ipr:
        assert len(ipr.link_lookup(ifname=host)) == 1


def test_a_container_restarted_in_its_sandbox_does_not_get_the_nic_again(
    runc_nic_rig: FakeNodeRig, nic_class: str, kube: KubeClient, test_namespace: str
) -> None:
    """As with runc 1.5 on a real node: the interface is in the pod already, not where runc looks for it."""
    rig = runc_nic_rig
    kube.create(RESOURCE_CLAIMS, _nic_claim("c", nic_class), namespace=test_namespace)
    pod = pod_body(name="p", node=rig.name, claims={"net": "c"}, command="ip -o link", restart="Always")
    kube.create(PODS, pod, namespace=test_namespace)
    failed = wait_object(
        kube,
        PODS,
        "p",
        namespace=test_namespace,
        timeout=60,
        what="the restart refused",
        predicate=lambda p: any(
            (s.get("state", {}).get("waiting") or {}).get("reason") == "CreateContainerError"
            for s in p.get("status", {}).get("containerStatuses") or []
        ),
    )
    host = _host_ifname(kube, rig, test_namespace, "c")
    (status,) = failed["status"]["containerStatuses"]
    assert host in status["state"]["waiting"]["message"] and "not found" in status["state"]["waiting"]["message"]
    worker = rig.node.pod_worker(namespace=test_namespace, name="p")
    assert worker is not None
    first = (worker.files.bundle(container="c", attempt=0).bundle / "log").read_text()
    assert re.search(r"\d+: net1[@:]", first), first


def test_pod_sees_the_interface_its_claim_status_reports(
    nic_rig: FakeNodeRig, nic_class: str, kube: KubeClient, test_namespace: str
) -> None:
    kube.create(RESOURCE_CLAIMS, _nic_claim("c", nic_class), namespace=test_namespace)
    kube.create(
        PODS,
        pod_body(
            name="p",
            node=nic_rig.name,
            claims={"net": "c"},
            command="ip -o link; ip -o addr; sleep 3600",
            grace_seconds=1,
        ),
        namespace=test_namespace,
    )
    assert _running(kube, test_namespace, "p")["status"]["phase"] == "Running"
    worker = nic_rig.node.pod_worker(namespace=test_namespace, name="p")
    assert worker is not None
    wait_for(lambda: " inet " in worker.container_logs(), timeout=20, what="container output")
    entry = _network(kube, test_namespace, "c")
    data = entry["networkData"]
    # DraNet's conditions: the netdev moved, the network configured, the RoCE function's RDMA link moved.
    assert [(c["type"], c["reason"], c["status"]) for c in entry["conditions"]] == [
        ("Ready", "NetworkDeviceReady", "True"),
        ("NetworkReady", "NetworkReady", "True"),
        ("RDMALinkReady", "RDMALinkReady", "True"),
    ]
    assert not any(c.get("message") for c in entry["conditions"])
    out = worker.container_logs()
    link = next((line for line in out.splitlines() if re.match(rf"\d+: {data['interfaceName']}[@:]", line)), out)
    assert f"link/ether {data['hardwareAddress']}" in link
    addrs = re.findall(rf"\d+: {data['interfaceName']}\s+inet6? (\S+)", out)
    # The kernel adds an IPv6 link-local address of its own; the claim reports the assigned ones.
    assert sorted(a for a in addrs if not a.startswith("fe80:")) == sorted(data["ips"])
    assert data["interfaceName"] == "net1"
    assert ipaddress.ip_interface(data["ips"][0]).version == 4
    # The device-metadata file carries the same networkData.
    spec = json.loads(next(p for p in nic_rig.layout.cdi.iterdir() if "_metadata_" in p.name).read_text())
    host_file = spec["devices"][0]["containerEdits"]["mounts"][0]["hostPath"]
    doc = json.loads(Path(host_file).read_text().splitlines()[0])
    assert doc["requests"][0]["devices"][0]["networkData"] == data


def test_configured_name_and_addresses_are_used_and_released(
    nic_rig: FakeNodeRig, nic_class: str, kube: KubeClient, test_namespace: str
) -> None:
    config = {
        "apiVersion": "resource.fakedev.io/v1alpha1",
        "kind": "NicConfig",
        "interfaceName": "data0",
        "mtu": 1500,
        "addresses": ["192.168.77.5/24"],
    }
    kube.create(RESOURCE_CLAIMS, _nic_claim("c", nic_class, config=config), namespace=test_namespace)
    kube.create(
        PODS,
        pod_body(
            name="p",
            node=nic_rig.name,
            claims={"net": "c"},
            command="ip -o addr show data0; ip -o link show data0; sleep 3600",
            grace_seconds=1,
        ),
        namespace=test_namespace,
    )
    _running(kube, test_namespace, "p")
    data = _network(kube, test_namespace, "c")["networkData"]
    assert (data["interfaceName"], data["ips"]) == ("data0", ["192.168.77.5/24"])
    host = (
        data
        and kube.get(RESOURCE_CLAIMS, "c", namespace=test_namespace)["status"]["allocation"]["devices"]["results"][0][
            "device"
        ]
    )
    kube.delete(PODS, "p", namespace=test_namespace, grace_seconds=1)
    wait_gone(kube, PODS, "p", namespace=test_namespace, timeout=30)
    # Back in the node's namespace: hardware MAC, no addresses.
    assert nic_rig.nics is not None
    slices = kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={nic_rig.name}")
    attrs = next(d["attributes"] for s in slices for d in s["spec"]["devices"] if d["name"] == host)
    ifname, hw_mac = attrs["dra.net/ifName"]["string"], attrs["dra.net/mac"]["string"]
    with netlink(nic_rig.nics.hardware.node_netns) as ipr:
        (idx,) = ipr.link_lookup(ifname=ifname)
        assert ipr.get_links(idx)[0].get_attr("IFLA_ADDRESS") == hw_mac
        assert [a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(index=idx, family=2)] == []


def test_addresses_on_a_node_nic_are_published_and_withdrawn(nic_rig: FakeNodeRig, kube: KubeClient) -> None:
    assert nic_rig.nics is not None
    port = nic_rig.nics.ports[0]

    def ip_attributes() -> dict[str, Any]:
        for s in kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={nic_rig.name}"):
            for d in s["spec"]["devices"]:
                if d["attributes"].get("dra.net/ifName", {}).get("string") == port.ifname:
                    return {k: v["string"] for k, v in d["attributes"].items() if k in ("dra.net/ipv4", "dra.net/ipv6")}
        raise AssertionError(f"no published device has ifName {port.ifname}")

    # The interface is up in the node's namespace, so it has an IPv6 link-local address: DraNet does not publish it.
    wait_for(lambda: ip_attributes() == {}, timeout=30, what="the NIC published without addresses")
    with netlink(nic_rig.nics.hardware.node_netns) as ipr:
        (idx,) = ipr.link_lookup(ifname=port.ifname)
        for address, prefix in (("10.77.1.5", 24), ("10.77.0.9", 16), ("fd77::5", 64)):
            ipr.addr("add", index=idx, address=address, prefixlen=prefix)
    expected = {"dra.net/ipv4": "10.77.0.9/16,10.77.1.5/24", "dra.net/ipv6": "fd77::5/64"}
    wait_for(lambda: ip_attributes() == expected, timeout=10, what="the addresses published")
    with netlink(nic_rig.nics.hardware.node_netns) as ipr:
        ipr.addr("del", index=idx, address="10.77.1.5", prefixlen=24)
        ipr.addr("del", index=idx, address="fd77::5", prefixlen=64)
    wait_for(lambda: ip_attributes() == {"dra.net/ipv4": "10.77.0.9/16"}, timeout=10, what="two addresses withdrawn")
    with netlink(nic_rig.nics.hardware.node_netns) as ipr:
        ipr.flush_addr(index=idx)
    wait_for(lambda: ip_attributes() == {}, timeout=10, what="the attributes gone with the last address")


def test_two_pods_ping_each_other_over_the_fabric(
    nic_rig: FakeNodeRig, nic_class: str, kube: KubeClient, test_namespace: str
) -> None:
    kube.create(RESOURCE_CLAIMS, _nic_claim("server", nic_class), namespace=test_namespace)
    kube.create(
        PODS,
        pod_body(name="server", node=nic_rig.name, claims={"net": "server"}, command="sleep 3600", grace_seconds=1),
        namespace=test_namespace,
    )
    _running(kube, test_namespace, "server")
    target = ipaddress.ip_interface(_network(kube, test_namespace, "server")["networkData"]["ips"][0]).ip
    kube.create(RESOURCE_CLAIMS, _nic_claim("client", nic_class), namespace=test_namespace)
    kube.create(
        PODS,
        pod_body(
            name="client",
            node=nic_rig.name,
            claims={"net": "client"},
            command=f"ping -c 3 -W 2 {target}",
            grace_seconds=1,
        ),
        namespace=test_namespace,
    )
    done = wait_object(
        kube,
        PODS,
        "client",
        namespace=test_namespace,
        timeout=60,
        what="finished",
        predicate=lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"),
    )
    worker = nic_rig.node.pod_worker(namespace=test_namespace, name="client")
    log = worker.container_logs() if worker else ""
    assert done["status"]["phase"] == "Succeeded", log
    assert "3 packets transmitted, 3 packets received" in log or "3 received" in log


def test_hot_unplug_evicts_the_pod_unless_it_tolerates_the_taint(
    nic_rig: FakeNodeRig, nic_class: str, kube: KubeClient, test_namespace: str
) -> None:
    assert nic_rig.nics is not None
    for name, tolerate in (("fragile", False), ("tough", True)):
        kube.create(RESOURCE_CLAIMS, _nic_claim(name, nic_class, tolerate=tolerate), namespace=test_namespace)
        kube.create(
            PODS,
            pod_body(name=name, node=nic_rig.name, claims={"net": name}, command="sleep 3600", grace_seconds=1),
            namespace=test_namespace,
        )
        _running(kube, test_namespace, name)
    slices = kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={nic_rig.name}")
    names = {d["name"]: d["attributes"]["dra.net/ifName"]["string"] for s in slices for d in s["spec"]["devices"]}
    devices = {
        n: kube.get(RESOURCE_CLAIMS, n, namespace=test_namespace)["status"]["allocation"]["devices"]["results"][0][
            "device"
        ]
        for n in ("fragile", "tough")
    }
    for device in devices.values():
        assert unplug(nic_rig.nics.hardware, nic_rig.nics.port(names[device]))

    def tainted(device: str) -> bool:
        for s in kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={nic_rig.name}"):
            for d in s["spec"]["devices"]:
                if d["name"] == device and any(t["effect"] == "NoExecute" for t in d.get("taints") or []):
                    return True
        return False

    wait_for(lambda: all(tainted(d) for d in devices.values()), timeout=10, what="NoExecute taints published")
    wait_for(
        lambda: (
            kube.get_or_none(PODS, "fragile", namespace=test_namespace) is None
            or bool(kube.get(PODS, "fragile", namespace=test_namespace)["metadata"].get("deletionTimestamp"))
        ),
        timeout=30,
        what="the untolerating pod evicted",
    )
    tough = kube.get(PODS, "tough", namespace=test_namespace)
    assert not tough["metadata"].get("deletionTimestamp")
    assert tough["status"]["phase"] == "Running"

    # Plugged back in, the NIC is healthy and untainted again.
    for device in devices.values():
        plug(nic_rig.nics.hardware, nic_rig.nics.port(names[device]))
    wait_for(lambda: not any(tainted(d) for d in devices.values()), timeout=10, what="taints lifted")


def test_gpu_and_nic_on_one_pcie_root_reach_the_pod(
    node_rig_factory: RigFactory, kube: KubeClient, test_namespace: str, unique_name: str
) -> None:
    rig = node_rig_factory(profile="dgx-h100", schemas=(Schema.NVIDIA, Schema.DRANET))
    classes = {
        f"{unique_name}-gpu": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
        f"{unique_name}-nic": 'device.driver == "dra.net"',
    }
    for name, cel in classes.items():
        kube.create(
            DEVICE_CLASSES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": cel}}]},
            },
        )
    try:
        kube.create(
            RESOURCE_CLAIMS,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "pair"},
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "gpu", "exactly": {"deviceClassName": f"{unique_name}-gpu"}},
                            {"name": "nic", "exactly": {"deviceClassName": f"{unique_name}-nic"}},
                        ],
                        "constraints": [
                            {"requests": ["gpu", "nic"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}
                        ],
                    }
                },
            },
            namespace=test_namespace,
        )
        kube.create(
            PODS,
            pod_body(
                name="p",
                node=rig.name,
                claims={"net": "pair"},
                command="echo $NVIDIA_VISIBLE_DEVICES; ip -o link; sleep 3600",
                grace_seconds=1,
            ),
            namespace=test_namespace,
        )
        _running(kube, test_namespace, "p")
        results = kube.get(RESOURCE_CLAIMS, "pair", namespace=test_namespace)["status"]["allocation"]["devices"][
            "results"
        ]
        by_request = {r["request"]: r for r in results}
        roots = {}
        for s in kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={rig.name}"):
            for d in s["spec"].get("devices") or []:
                roots[(s["spec"]["driver"], d["name"])] = (
                    d["attributes"].get("resource.kubernetes.io/pcieRoot", {}).get("string")
                )
        gpu, nic = by_request["gpu"], by_request["nic"]
        assert roots[(gpu["driver"], gpu["device"])] == roots[(nic["driver"], nic["device"])] is not None
        worker = rig.node.pod_worker(namespace=test_namespace, name="p")
        assert worker is not None
        wait_for(lambda: "net1" in worker.container_logs(), timeout=20, what="container output")
        out = worker.container_logs().splitlines()
        assert out[0].startswith("GPU-")
        assert any(re.match(r"\d+: net1[@:]", line) for line in out)
    finally:
        for name in classes:
            kube.delete(DEVICE_CLASSES, name)


def test_discovery_marks_a_missing_nic_unhealthy_and_udev_sees_interfaces_leave(
    node_rig_factory: RigFactory, nic_class: str, kube: KubeClient, test_namespace: str
) -> None:
    import subprocess
    import sys

    rig = node_rig_factory(profile="nic-only")
    assert rig.nics is not None
    missing = rig.nics.ports[-1]  # pulled before the driver starts
    assert unplug(rig.nics.hardware, missing)
    rig.add_plugin(Schema.DRANET)

    def status() -> Any:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "fakedev",
                "fault",
                "--kubelet-root",
                str(rig.layout.kubelet_root),
                "--driver",
                "dra.net",
                "status",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return json.loads(out.stdout)

    def sick() -> list[str]:
        return [d["message"] for d in status()["devices"] if d["health"] == "Unhealthy"]

    # Discovery runs once the driver serves; the missing NIC is reported unhealthy by name.
    wait_for(lambda: bool(sick()), timeout=10, what="the missing NIC reported")
    assert len(sick()) == 1 and sick()[0].startswith(f"{missing.ifname}: ")
    kube.create(RESOURCE_CLAIMS, _nic_claim("c", nic_class), namespace=test_namespace)
    kube.create(
        PODS,
        pod_body(name="p", node=rig.name, claims={"net": "c"}, command="sleep 3600", grace_seconds=1),
        namespace=test_namespace,
    )
    _running(kube, test_namespace, "p")
    # Moving the NIC into the pod is a udev event in the node's namespace.
    wait_for(lambda: status()["udevEvents"] > 0, timeout=10, what="udev events seen in the node namespace")


def test_link_down_and_up_from_the_fault_command(nic_rig: FakeNodeRig, kube: KubeClient) -> None:
    import subprocess
    import sys

    assert nic_rig.nics is not None
    port = nic_rig.nics.ports[0]

    def fault(*args: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "fakedev", "fault", *args], capture_output=True, text=True, timeout=30, check=True
        ).stdout

    def health() -> str:
        status = json.loads(fault("--kubelet-root", str(nic_rig.layout.kubelet_root), "--driver", "dra.net", "status"))
        return next(
            str(d["health"])
            for d in status["devices"]
            if d["message"].startswith(f"{port.ifname}:") or d["device"] == port.ifname
        )

    out = fault("nic", "down", port.ifname, "--node", nic_rig.name, "--profile", "nic-only")
    assert out.strip() == f"{port.ifname} link down"
    wait_for(lambda: health() == "Unhealthy", timeout=5, what="link-down noticed")
    fault("nic", "up", port.ifname, "--node", nic_rig.name, "--profile", "nic-only")
    wait_for(lambda: health() == "Healthy", timeout=5, what="link-up noticed")
