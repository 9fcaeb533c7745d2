"""Emulated Node objects: registered Ready with capacity, their Lease renewed, so the real scheduler binds to them."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from harness.cluster.build import KUBERNETES_VERSION
from kubeclient.client import JsonObj, KubeClient
from kubeclient.errors import ApiError, ConflictError
from kubeclient.resources import LEASES, NODES, RESOURCE_SLICES
from kubeclient.timestamps import render_micro_time, render_time, utc_now

LEASE_NAMESPACE: Final = "kube-node-lease"
LEASE_SECONDS: Final = 40
RENEW_SECONDS: Final = 10.0
DEFAULT_CAPACITY: Final[Mapping[str, str]] = {"cpu": "64", "memory": "512Gi", "pods": "250", "ephemeral-storage": "1Ti"}


def render_node(*, name: str, labels: Mapping[str, str], taints: Sequence[Mapping[str, str]] = ()) -> JsonObj:
    """A Node labelled as emulated (plus ``labels``), with ``taints`` ({key, value, effect}) in its spec."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "fakedev.io/emulated": "true",
                **labels,
            },
        },
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
    }


def render_node_status(
    *,
    name: str,
    capacity: Mapping[str, str],
    now: datetime.datetime,
    declared_features: Sequence[str] = (),
    container_runtime: str = "runc://unknown",
) -> JsonObj:
    stamp = render_time(now)

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }

    extra: dict[str, Any] = {"declaredFeatures": sorted(declared_features)} if declared_features else {}
    return {
        "status": {
            **extra,
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "conditions": [
                condition("Ready", "True", "KubeletReady", "fakedev node emulator is ready"),
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "emulated"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "emulated"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "emulated"),
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {
                "kubeletVersion": KUBERNETES_VERSION,
                "kubeProxyVersion": "",
                "containerRuntimeVersion": container_runtime,
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": "fakedev emulated node",
                "kernelVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        }
    }


def register_node(
    client: KubeClient,
    *,
    name: str,
    labels: Mapping[str, str] | None = None,
    capacity: Mapping[str, str] | None = None,
    declared_features: Sequence[str] = (),
    taints: Sequence[Mapping[str, str]] = (),
    container_runtime: str = "runc://unknown",
) -> JsonObj:
    """Create (or adopt) the Node, mark it Ready with capacity (and the node features it declares, which the
    scheduler checks before using devices that need them), and take its Lease. ``taints`` apply to a Node created
    here; an adopted Node keeps the taints it has (someone may have cordoned or tainted it meanwhile)."""
    node = client.get_or_none(NODES, name)
    if node is None:
        try:
            node = client.create(NODES, render_node(name=name, labels=labels or {}, taints=taints))
        except ApiError as exc:
            if exc.status != 409:
                raise
    status = render_node_status(
        name=name,
        capacity=capacity or DEFAULT_CAPACITY,
        now=utc_now(),
        declared_features=declared_features,
        container_runtime=container_runtime,
    )
    node = client.patch(NODES, name, status, subresource="status", patch_type="strategic")
    renew_lease(client, name=name)
    own_lease(client, node=node)
    return node


def renew_lease(client: KubeClient, *, name: str) -> JsonObj:
    """Take or renew the node's Lease by server-side apply (whatever state it is in); returns the Lease."""
    now = render_micro_time()
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NAMESPACE},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now},
    }
    return client.apply(LEASES, body, namespace=LEASE_NAMESPACE)


def renew_known_lease(client: KubeClient, *, lease: JsonObj) -> JsonObj:
    """Renew a Lease as last read, by update, as the kubelet does (cheaper for the API server than an apply); a
    Lease changed meanwhile is a ConflictError. Returns the Lease as stored."""
    spec = {**lease.get("spec", {}), "renewTime": render_micro_time(), "leaseDurationSeconds": LEASE_SECONDS}
    spec["holderIdentity"] = lease["metadata"]["name"]
    # Without managedFields the server keeps its own record of them (sent back, they would be taken as given).
    metadata = {k: v for k, v in lease["metadata"].items() if k != "managedFields"}
    return client.replace(LEASES, {**lease, "metadata": metadata, "spec": spec}, namespace=LEASE_NAMESPACE)


LEASE_OWNER_MANAGER: Final = "fakedev-node-lease-owner"


def own_lease(client: KubeClient, *, node: JsonObj) -> None:
    """Make the Node the owner of its Lease, as the kubelet does, so the garbage collector removes a Lease whose Node
    was deleted without it (a fleet replica that died, a Node deleted by hand). A field manager of its own: the
    renewals' apply owns only the spec and would otherwise drop the reference."""
    meta = node["metadata"]
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": meta["name"],
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}],
        },
    }
    client.apply(LEASES, body, namespace=LEASE_NAMESPACE, field_manager=LEASE_OWNER_MANAGER)


def delete_node(client: KubeClient, *, name: str) -> None:
    """Decommission a node: its ResourceSlices first (the garbage collector would remove them after the Node, but
    the scheduler must not allocate from a node that is gone meanwhile), then the Node and its Lease."""
    client.delete_collection(RESOURCE_SLICES, field_selector=f"spec.nodeName={name}")
    client.delete(NODES, name)
    client.delete(LEASES, name, namespace=LEASE_NAMESPACE)


@dataclass(kw_only=True)
class NodeHeartbeats:
    """Keeps the Leases of emulated nodes fresh from one background thread (their Ready condition is written once,
    at registration)."""

    client: KubeClient
    interval: float = RENEW_SECONDS
    nodes: set[str] = field(default_factory=set)
    on_renew: Callable[[bool], None] | None = None
    """Called after every Lease renewal with whether it worked (a fleet's metrics)."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _known: dict[str, JsonObj] = field(default_factory=dict)
    """Each node's Lease as the last renewal stored it (only the heartbeat thread touches it)."""

    def add(self, name: str) -> None:
        with self._lock:
            self.nodes.add(name)

    def discard(self, name: str) -> None:
        with self._lock:
            self.nodes.discard(name)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="node-heartbeats", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                names = sorted(self.nodes)
            for name in names:
                # An API outage must not kill the heartbeat; the next round tries again.
                try:
                    self._renew(name)
                except ApiError:
                    self._known.pop(name, None)  # read it afresh next time: it may have changed or gone
                    self._tell(ok=False)
                else:
                    self._tell(ok=True)

    def _renew(self, name: str) -> None:
        """By update of the Lease as last seen (the kubelet's way); by apply when it is not known or changed."""
        known = self._known.get(name)
        if known is not None:
            try:
                self._known[name] = renew_known_lease(self.client, lease=known)
                return
            except ConflictError:
                pass  # someone else wrote it (its owner reference, a drill): apply below takes it as it is now
        self._known[name] = renew_lease(self.client, name=name)

    def _tell(self, *, ok: bool) -> None:
        if self.on_renew is not None:
            self.on_renew(ok)
