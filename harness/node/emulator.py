"""An emulated node: the Node object, plugin registration, DRA prepare/unprepare, pods under runc, slice wiping.

It plays exactly the kubelet's part for DRA and drives any driver only through its sockets, so the same loop checks
fakedev's plugin and anybody else's. Several emulators can share one event loop (``fakedev node --nodes N``).

Its files live in one directory per node (:mod:`harness.node.layout`), reused across emulator restarts — a
"kubelet restart": containers keep running and are adopted — and locked while an emulator owns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from harness.cluster.nodes import NodeHeartbeats, register_node
from harness.node.dra_manager import DraManager, DraObserver
from harness.node.layout import NodeLayout
from harness.node.plugins import PluginManager
from harness.node.podclaims import compute_pod_claims, compute_resource_status_name
from harness.node.podmode import STATUS_RUNTIME, PodMode
from harness.node.pods import PodClaims, PodWorker
from harness.procs import RunDir, open_run_dir
from harness.runtime.images import LOCAL_IMAGES, ensure_image
from harness.runtime.rootfs import ensure_rootfs
from harness.runtime.runc import Runc, runc_version
from kubeclient import ApiError, KubeClient
from kubeclient.resources import PODS, RESOURCE_SLICES
from kubeletapi.types import DeviceHealth

log = logging.getLogger("harness.node")

SLICE_WIPE_GRACE: Final = 30.0
STOP_SECONDS: Final = 30.0
DECLARED_FEATURES: Final = ("DRANodeAllocatableResources", "DRAOptionalNodeOperations")
"""Node features declared in Node.status.declaredFeatures, as a 1.37 kubelet does. The emulator skips optional node
operations; it enforces no cgroups at all, so for node-allocatable resources the scheduler's accounting is what it
lets drills exercise (kube-apiserver refuses such slices from nodes that do not declare the feature)."""
WATCH_SECONDS: Final = 30


@dataclass(frozen=True, kw_only=True)
class NodeSettings:
    name: str
    base: Path | None = None
    cdi_dirs: tuple[Path, ...] | None = None
    """Where CDI IDs are resolved; default: the node's own ``cdi/``."""
    node_netns: str | None = None
    """The namespace holding the node's NICs (netDevices move from here); None: the emulator's own."""
    slice_wipe_grace: float = SLICE_WIPE_GRACE
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    """Taints ({key, value, effect}) the Node is created with."""
    capacity: Mapping[str, str] | None = None
    rootfs_cache: Path | None = None
    unmanaged_label: str | None = None
    """Pods carrying this label (value "true") are left alone: the conformance suite prepares their claims itself."""
    pod_mode: PodMode = PodMode.CONTAINERS
    registry_poll_seconds: float | None = None
    """Find plugin sockets by polling the registry directory this often instead of watching it with inotify (a process
    emulating hundreds of nodes would need an inotify instance per node; the default limit is 128 per user)."""


@dataclass(kw_only=True)
class NodeEmulator:
    settings: NodeSettings
    client: KubeClient
    heartbeats: NodeHeartbeats | None = None
    observer: DraObserver | None = None
    run: RunDir = field(init=False)
    plugins: PluginManager = field(init=False)
    dra: DraManager = field(init=False)
    runtime: Runc = field(init=False)
    rootfs_template: Path = field(init=False)
    _images: dict[str, Path] = field(default_factory=dict)
    workers: dict[str, PodWorker] = field(default_factory=dict)
    health: dict[tuple[str, str, str], DeviceHealth] = field(default_factory=dict)
    wiped: list[tuple[float, str]] = field(default_factory=list)
    """(time, driver) of every slice wipe after a driver went away."""
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    """Running tasks only: a finished pod's task leaves the set (kept, one per pod ever seen, they were a leak)."""
    _loop: asyncio.AbstractEventLoop | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)
    _own_heartbeats: bool = False

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def layout(self) -> NodeLayout:
        return NodeLayout.for_node(self.settings.name, base=self.settings.base)

    @property
    def claims(self) -> PodClaims:
        return self.dra

    @property
    def cdi_dirs(self) -> tuple[Path, ...]:
        return self.settings.cdi_dirs or (self.layout.cdi,)

    @property
    def node_netns(self) -> str | None:
        return self.settings.node_netns

    @property
    def pod_mode(self) -> PodMode:
        return self.settings.pod_mode

    def rootfs_for(self, image: str) -> Path:
        """The rootfs template for a container image (a local image's program added to busybox)."""
        if image not in LOCAL_IMAGES:
            return self.rootfs_template
        # Once per image and emulator: checking the cache hashes busybox and the program's sources.
        if image not in self._images:
            self._images[image] = ensure_image(image, cache_root=self.settings.rootfs_cache or self.layout.cache)
        return self._images[image]

    # -- life cycle ----------------------------------------------------------------------------------------------

    async def start(self) -> None:
        s = self.settings
        layout = self.layout
        self.run = open_run_dir(purpose="node", base=layout.base, run_id=layout.run_id, reuse=True)
        layout.make_dirs()
        if s.pod_mode is PodMode.CONTAINERS:
            self.runtime = Runc.at(layout.runc)
            self.rootfs_template = await asyncio.to_thread(ensure_rootfs, cache_root=s.rootfs_cache or layout.cache)
        if s.registry_poll_seconds is None:
            self.plugins = PluginManager(registry_dir=layout.registry, on_health=self._on_health)
        else:
            self.plugins = PluginManager(
                registry_dir=layout.registry,
                on_health=self._on_health,
                watch_directory=False,
                retry_interval=s.registry_poll_seconds,
            )
        self.dra = DraManager(
            node_name=s.name,
            client=self.client,
            plugins=self.plugins,
            checkpoint_path=layout.dra_checkpoint,
            observer=self.observer,
        )
        self.dra.load()
        if not layout.boot_id.exists():
            # A new boot (the marker lives with volatile state): CDI specs and sandboxes are gone, so every claim
            # must be prepared again before its pods restart, as after a node reboot.
            self.dra.forget_prepared()
            layout.boot_id.write_text(os.urandom(8).hex() + "\n")
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(
            register_node,
            self.client,
            name=s.name,
            labels=s.labels,
            capacity=s.capacity,
            declared_features=DECLARED_FEATURES,
            taints=s.taints,
            container_runtime=(
                f"runc://{runc_version(self.runtime.binary)}" if s.pod_mode is PodMode.CONTAINERS else STATUS_RUNTIME
            ),
        )
        if self.heartbeats is None:
            self.heartbeats = NodeHeartbeats(client=self.client)
            self.heartbeats.start()
            self._own_heartbeats = True
        self.heartbeats.add(s.name)
        # The kubelet removes every slice of its node when it starts; drivers publish theirs again.
        await asyncio.to_thread(self._wipe_slices, None)
        self._track(asyncio.create_task(self.plugins.run(), name=f"{s.name}-plugins"))
        self._track(asyncio.create_task(self._wiper(), name=f"{s.name}-wiper"))
        threading.Thread(target=self._watch_pods, name=f"{s.name}-pods", daemon=True).start()
        log.info("node emulator started", extra={"fields": {"node": s.name, "root": str(layout.root)}})

    async def stop(self, *, stop_pods: bool = False) -> None:
        """Stop emulating. Containers keep running unless ``stop_pods`` (as with a kubelet stop)."""
        self._stopping.set()
        for task in list(self._tasks):
            task.cancel()
        for worker in list(self.workers.values()):
            if stop_pods:
                # Bounded: one wedged container must not keep the node from stopping.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(worker.stop_containers(grace=5), STOP_SECONDS)
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self.plugins.close()
        if self.heartbeats is not None:
            self.heartbeats.discard(self.name)
            if self._own_heartbeats:
                self.heartbeats.stop()
        self.run.close()

    # -- pods ----------------------------------------------------------------------------------------------------

    def _watch_pods(self) -> None:
        """List+watch this node's pods in a thread and hand every change to the event loop."""
        selector = f"spec.nodeName={self.name}"
        version: str | None = None
        failing_since: float | None = None
        while not self._stopping.is_set():
            try:
                if version is None:
                    listing = self.client.request("GET", PODS.path(), query={"fieldSelector": selector})
                    version = listing["metadata"]["resourceVersion"]
                    if failing_since is not None:
                        log.warning(
                            "pod watch back",
                            extra={
                                "fields": {"node": self.name, "after_s": round(time.monotonic() - failing_since, 1)}
                            },
                        )
                        failing_since = None
                    self._post(self._sync_pods, {p["metadata"]["uid"]: p for p in listing.get("items") or []})
                for event in self.client.watch(
                    PODS, field_selector=selector, resource_version=version, timeout_seconds=WATCH_SECONDS
                ):
                    if self._stopping.is_set():
                        return
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        version = None  # expired: list again
                        break
                    version = obj.get("metadata", {}).get("resourceVersion", version)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._post(self._on_pod, obj)
                    elif event.get("type") == "DELETED":
                        self._post(self._on_pod_deleted, obj["metadata"]["uid"])
            except ApiError as exc:
                if self._stopping.is_set():
                    return
                if failing_since is None:  # once per outage, not once a second for as long as it lasts
                    failing_since = time.monotonic()
                    log.warning(
                        "pod watch failed; relisting every second until it works",
                        extra={"fields": {"node": self.name, "error": str(exc)}},
                    )
                version = None
                self._stopping.wait(1.0)

    def _post(self, fn: Any, arg: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(fn, arg)

    def _sync_pods(self, pods: dict[str, dict[str, Any]]) -> None:
        for uid in list(self.workers):
            if uid not in pods:
                self._on_pod_deleted(uid)
        for pod in pods.values():
            self._on_pod(pod)

    def _on_pod(self, pod: dict[str, Any]) -> None:
        if self._stopping.is_set():
            return
        label = self.settings.unmanaged_label
        if label and (pod["metadata"].get("labels") or {}).get(label) == "true":
            return
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if worker is None:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") and not self.dra.claims_of_pod(uid):
                return  # finished before this emulator started and nothing left to release
            worker = PodWorker(node=self, uid=uid, pod=pod)
            self.workers[uid] = worker
            self._track(asyncio.create_task(worker.run(), name=f"pod-{uid}"))
        else:
            worker.update(pod)

    def _on_pod_deleted(self, uid: str) -> None:
        worker = self.workers.get(uid)
        if worker is not None:
            worker.update(None)

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def forget(self, uid: str) -> None:
        self.workers.pop(uid, None)

    def pod_worker(self, *, namespace: str, name: str) -> PodWorker | None:
        for w in self.workers.values():
            if (w.pod["metadata"]["namespace"], w.pod["metadata"]["name"]) == (namespace, name):
                return w
        return None

    # -- health --------------------------------------------------------------------------------------------------

    def _on_health(self, driver: str, devices: list[DeviceHealth]) -> None:
        touched = False
        for d in devices:
            self.health[(driver, d.pool, d.device)] = d
            touched = touched or bool(self.dra.device_users(driver=driver, pool=d.pool, device=d.device))
        if touched:
            for w in self.workers.values():
                w.changed.set()

    def health_status(self, *, pod: Mapping[str, Any], container: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``allocatedResourcesStatus`` of a container: one entry per claim (and request) it uses."""
        claims = {c.pod_claim_name: c for c in compute_pod_claims(pod)}
        infos = {c.name: c for c in self.dra.claims_of_pod(pod["metadata"]["uid"])}
        entries = []
        for ref in (container.get("resources") or {}).get("claims") or []:
            pc = claims.get(ref.get("name"))
            info = infos.get(pc.claim_name) if pc and pc.claim_name else None
            if info is None:
                continue
            resources = []
            for driver, devices in sorted(info.devices.items()):
                for d in devices:
                    if ref.get("request") and d.request_names and ref["request"] not in d.request_names:
                        continue
                    report = self.health.get((driver, d.pool, d.device))
                    if report is None:
                        continue
                    rid = d.cdi_device_ids[0] if d.cdi_device_ids else f"{driver}/{d.pool}/{d.device}"
                    resource = {"resourceID": rid, "health": report.health.name.title()}
                    if report.message:  # ResourceHealthStatusMessage (beta, on in 1.37): the kubelet passes it on
                        resource["message"] = report.message
                    resources.append(resource)
            if resources:
                entries.append(
                    {
                        "name": compute_resource_status_name(pod_claim_name=ref["name"], request=ref.get("request")),
                        "resources": resources,
                    }
                )
        return entries

    # -- slices --------------------------------------------------------------------------------------------------

    def _wipe_slices(self, driver: str | None) -> int:
        selector = f"spec.nodeName={self.name}" + (f",spec.driver={driver}" if driver else "")
        slices = self.client.list(RESOURCE_SLICES, field_selector=selector)
        for s in slices:
            self.client.delete(RESOURCE_SLICES, s["metadata"]["name"])
        return len(slices)

    async def _wiper(self) -> None:
        """Delete a driver's slices once no instance of it has been connected for the grace period."""
        gone_since: dict[str, float] = {}
        seen: set[str] = set()
        while True:
            seen |= self.plugins.drivers()
            connected = self.plugins.connected_drivers()
            now = time.monotonic()
            for driver in sorted(seen):
                if driver in connected:
                    gone_since.pop(driver, None)
                    continue
                since = gone_since.setdefault(driver, now)
                if now - since >= self.settings.slice_wipe_grace:
                    with contextlib.suppress(ApiError):
                        count = await asyncio.to_thread(self._wipe_slices, driver)
                        self.wiped.append((time.time(), driver))
                        log.info(
                            "wiped slices of a vanished driver",
                            extra={"fields": {"node": self.name, "driver": driver, "slices": count}},
                        )
                    seen.discard(driver)
                    gone_since.pop(driver, None)
            await asyncio.sleep(0.5)  # the wiper's period
