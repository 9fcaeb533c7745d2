"""Differential for NICs: the same DraNet-style claims on the node emulator and on the real kubelet + containerd +
runc 1.5, where the interface travels CDI ``netDevices`` → containerd's CDI → OCI ``linux.netDevices`` → runc.

Each scenario runs on both nodes at once (one thread each), each node with the ``nic-only`` profile's NICs (veth
pairs on a fabric of its own) and a fake ``dra.net`` plugin, and compares what the user and the node see:

- inside the pod's own namespace, the interface name, MAC, MTU and addresses the driver wrote into
  ``status.devices[].networkData``;
- after the pod is deleted, the interface back in the node's namespace under its original name and MAC, with the
  pod's addresses gone, and nothing left behind (links, namespaces, records);
- a hot-unplug (the NIC's fabric port deleted while a pod holds it): the pod evicted through the NoExecute taint on
  both nodes, and nothing left behind.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fakedev.cli.realrig import RealNodeRig
from fakedev.cli.rig import FakeNodeRig, RigSite, RigSpec
from fakedev.nics.hardware import plug, unplug
from fakedev.nics.node import NodeNics
from fakedev.render import Schema
from harness.cluster.build import NODE_GROUPS, cached_binaries, default_cache_root
from harness.cluster.local import LocalCluster
from harness.cluster.nodes import delete_node
from harness.cluster.pki import CertPair
from harness.errors import NotReadyError
from harness.kube.waits import wait_object
from harness.node.background import BackgroundLoop
from harness.procs import wait_for
from harness.realnode.node import RealNodeSettings
from harness.reaper import reap_all
from kubeclient import KubeClient
from kubeclient.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from linuxns import netlink
from tests.helpers import wait_claim_status

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.xdist_group(name="realnode")]
REAL_NODE_ADDRESS = "127.0.0.7"
NIC_CLASS = "diff-nic"
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class NicSide:
    tag: str
    node: str
    nics: NodeNics
    container_output: Callable[[str, str], str]
    leftovers: Callable[[], list[str]]
    """What the node's runtime still holds for pods that are gone (records, sandboxes)."""

    def links(self) -> dict[str, dict[str, Any]]:
        """The node namespace's interfaces: name → MAC, MTU and addresses."""
        out: dict[str, dict[str, Any]] = {}
        with netlink(self.nics.hardware.node_netns) as ip:
            for link in ip.get_links():
                name = str(link.get_attr("IFLA_IFNAME"))
                addrs = sorted(
                    f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}"
                    for a in ip.get_addr(index=link["index"])
                    if not str(a.get_attr("IFA_ADDRESS")).startswith("fe80:")
                )
                out[name] = {"mac": link.get_attr("IFLA_ADDRESS"), "mtu": link.get_attr("IFLA_MTU"), "ips": addrs}
        return out


def both(sides: dict[str, NicSide], scenario: Callable[[NicSide], T]) -> dict[str, T]:
    with ThreadPoolExecutor(max_workers=len(sides)) as pool:
        futures = {tag: pool.submit(scenario, side) for tag, side in sides.items()}
        return {tag: f.result() for tag, f in futures.items()}


def _api_log(kube: KubeClient, namespace: str, pod: str) -> str:
    status, text = kube.get_text(f"/api/v1/namespaces/{namespace}/pods/{pod}/log")
    return text if status == 200 else ""


def _real_leftovers(rig: RealNodeRig) -> list[str]:
    lay = rig.node.layout
    left = [f"record {p.name}" for p in lay.netdevice_records.glob("*.json")]
    errors = lay.netdevice_records / "release-errors.log"
    if errors.exists():
        left.append(f"release errors: {errors.read_text().strip()}")
    netns_dir = lay.containerd_state / "netns"
    left += [f"pod netns {p.name}" for p in netns_dir.iterdir()] if netns_dir.is_dir() else []
    return left


@pytest.fixture(scope="module")
def sides(local_cluster: LocalCluster) -> Iterator[dict[str, NicSide]]:
    kube = local_cluster.client
    pki = local_cluster.layout.pki
    base = Path(tempfile.mkdtemp(prefix="fd-"))
    loop = BackgroundLoop()
    loop.start()
    site = RigSite(client=kube, kubeconfig=local_cluster.kubeconfig, loop=loop, base=base, rootfs_cache=base / "c")
    emulated: FakeNodeRig | None = None
    real: RealNodeRig | None = None
    kube.create(
        DEVICE_CLASSES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": NIC_CLASS},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": 'device.driver == "dra.net" && '
                            'device.attributes["dra.net"].encapsulation == "ether" && '
                            '!("isSriovVf" in device.attributes["dra.net"]) && '
                            'device.attributes["dra.net"].virtual == false'
                        }
                    }
                ]
            },
        },
    )
    try:
        emulated = FakeNodeRig.start(
            RigSpec(name="diff-nic-emulated", profile="nic-only", schemas=(Schema.DRANET,)), site=site
        )
        real = RealNodeRig.start(
            profile="nic-only",
            settings=RealNodeSettings(
                binaries=cached_binaries(groups=NODE_GROUPS),
                server=local_cluster.server,
                ca=CertPair(cert=pki / "ca.crt", key=pki / "ca.key"),
                cache_root=default_cache_root(),
                address=REAL_NODE_ADDRESS,
                lock_timeout=900,
            ),
            client=kube,
            kubeconfig=local_cluster.kubeconfig,
            schemas=(Schema.DRANET,),
        )
        em, rr = emulated, real
        em_nics, rr_nics = em.nics, rr.hardware.nics
        assert em_nics is not None and rr_nics is not None
        yield {
            "emulated": NicSide(
                tag="emulated",
                node=em.name,
                nics=em_nics,
                container_output=lambda ns, pod: (
                    w.container_logs() if (w := em.node.pod_worker(namespace=ns, name=pod)) else ""
                ),
                leftovers=lambda: [],
            ),
            "real": NicSide(
                tag="real",
                node=rr.name,
                nics=rr_nics,
                container_output=lambda ns, pod: _api_log(kube, ns, pod),
                leftovers=lambda: _real_leftovers(rr),
            ),
        }
    finally:
        kube.delete(DEVICE_CLASSES, NIC_CLASS)
        if real is not None:
            real.stop()
        if emulated is not None:
            emulated.stop(decommission=True)
            delete_node(kube, name="diff-nic-emulated")
        loop.stop()
        reap_all(base=base)
        shutil.rmtree(base, ignore_errors=True)


def _claim(name: str, *, tolerate: bool = False) -> dict[str, Any]:
    request: dict[str, Any] = {"name": "nic", "exactly": {"deviceClassName": NIC_CLASS}}
    if tolerate:
        request["exactly"]["tolerations"] = [
            {"key": "fakedev.io/unhealthy", "operator": "Exists", "effect": "NoExecute"}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}},
    }


def _pod(name: str, *, node: str, claim: str, command: str) -> dict[str, Any]:
    """An ordinary pod: its own network (the node's CNI gives it eth0), the image by the name users write."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "resourceClaims": [{"name": "net", "resourceClaimName": claim}],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",  # untagged: pulled (policy Always) from the node's own registry
                    "command": ["sh", "-c", command],
                    "resources": {"claims": [{"name": "net"}]},
                }
            ],
        },
    }


def _host_ifname(kube: KubeClient, side: NicSide, *, namespace: str, claim: str) -> str:
    allocated = kube.get(RESOURCE_CLAIMS, claim, namespace=namespace)["status"]["allocation"]["devices"]["results"][0]
    for s in kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={side.node},spec.driver=dra.net"):
        for d in s["spec"]["devices"]:
            if d["name"] == allocated["device"]:
                return str(d["attributes"]["dra.net/ifName"]["string"])
    raise AssertionError(f"{side.node}: device {allocated['device']} is in no slice")


def _running(kube: KubeClient, *, namespace: str, pod: str) -> None:
    wait_object(
        kube,
        PODS,
        pod,
        namespace=namespace,
        timeout=120,
        what="Running",
        predicate=lambda p: p.get("status", {}).get("phase") == "Running",
    )


def _gone(kube: KubeClient, namespace: str, name: str) -> None:
    wait_for(lambda: kube.get_or_none(PODS, name, namespace=namespace) is None, timeout=90, what=f"pod {name} gone")


def test_a_pod_sees_its_nic_and_the_node_gets_it_back_alike(
    sides: dict[str, NicSide], kube: KubeClient, test_namespace: str
) -> None:
    def scenario(side: NicSide) -> dict[str, Any]:
        claim, pod = f"nic-{side.tag}", f"nic-{side.tag}"
        before = side.links()
        kube.create(RESOURCE_CLAIMS, _claim(claim), namespace=test_namespace)
        kube.create(
            PODS,
            _pod(pod, node=side.node, claim=claim, command="ip -o link; ip -o addr; echo done; sleep 3600"),
            namespace=test_namespace,
        )
        _running(kube, namespace=test_namespace, pod=pod)
        wait_for(lambda: "done" in side.container_output(test_namespace, pod), timeout=30, what=f"{pod}'s output")
        out = side.container_output(test_namespace, pod)
        (entry,) = wait_claim_status(kube, claim, namespace=test_namespace)["status"]["devices"]
        data = entry["networkData"]
        host = _host_ifname(kube, side, namespace=test_namespace, claim=claim)
        link = next(line for line in out.splitlines() if re.match(rf"\d+: {data['interfaceName']}[@:]", line))
        in_pod = {
            "name": data["interfaceName"],
            "mac": re.search(r"link/ether (\S+)", link).group(1),  # type: ignore[union-attr]
            "mtu": int(re.search(r" mtu (\d+)", link).group(1)),  # type: ignore[union-attr]
            "ips": sorted(
                a for a in re.findall(rf"\d+: {data['interfaceName']}\s+inet6? (\S+)", out) if not a.startswith("fe80:")
            ),
        }
        seen_eth0 = bool(re.search(r"\d+: eth0\s+inet ", out))
        moved_out = host not in side.links()
        kube.delete(PODS, pod, namespace=test_namespace)
        _gone(kube, test_namespace, pod)
        try:
            wait_for(
                lambda: host in side.links() and not side.links()[host]["ips"],
                timeout=60,
                what=f"{side.node}: {host} back in the node's namespace, unconfigured",
            )
        except NotReadyError as exc:  # the timeout, with what the node holds
            raise AssertionError(f"{exc}; node links {side.links()}; leftovers {side.leftovers()}") from None
        after = side.links()
        kube.delete(RESOURCE_CLAIMS, claim, namespace=test_namespace)
        return {
            "in pod matches networkData": in_pod
            == {
                "name": data["interfaceName"],
                "mac": data["hardwareAddress"],
                "mtu": before[host]["mtu"],
                "ips": sorted(data["ips"]),
            },
            "in pod": {**in_pod, "mac": "<mac>", "ips": len(in_pod["ips"])},
            # The emulator's sandboxes have no pod network (a known difference): the real node's pods get eth0.
            "pod has its own eth0": seen_eth0 or side.tag == "emulated",
            "left the node while in use": moved_out,
            "back with its MAC": after[host]["mac"] == before[host]["mac"],
            "node links unchanged": sorted(after) == sorted(before),
            "leftovers": side.leftovers(),
        }

    results = both(sides, scenario)
    assert results["real"] == results["emulated"], results
    assert results["real"]["in pod matches networkData"] and results["real"]["back with its MAC"], results
    assert results["real"]["leftovers"] == [] and results["real"]["node links unchanged"], results


def test_a_hot_unplugged_nic_evicts_its_pod_alike(
    sides: dict[str, NicSide], kube: KubeClient, test_namespace: str
) -> None:
    def scenario(side: NicSide) -> dict[str, Any]:
        claim, pod = f"unplug-{side.tag}", f"unplug-{side.tag}"
        kube.create(RESOURCE_CLAIMS, _claim(claim), namespace=test_namespace)
        kube.create(PODS, _pod(pod, node=side.node, claim=claim, command="sleep 3600"), namespace=test_namespace)
        _running(kube, namespace=test_namespace, pod=pod)
        host = _host_ifname(kube, side, namespace=test_namespace, claim=claim)
        port = side.nics.port(host)
        assert unplug(side.nics.hardware, port)
        evicted = wait_object(
            kube,
            PODS,
            pod,
            namespace=test_namespace,
            timeout=60,
            what="evicted",
            predicate=lambda p: bool(p["metadata"].get("deletionTimestamp")),
        )
        _gone(kube, test_namespace, pod)
        plug(side.nics.hardware, port)
        wait_for(lambda: host in side.links(), timeout=10, what=f"{host} plugged back")
        kube.delete(RESOURCE_CLAIMS, claim, namespace=test_namespace)
        return {
            "evicted": bool(evicted["metadata"].get("deletionTimestamp")),
            "leftovers": side.leftovers(),
        }

    results = both(sides, scenario)
    assert results["real"] == results["emulated"] == {"evicted": True, "leftovers": []}, results
