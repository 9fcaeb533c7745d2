"""The kubelet plugin process: device model → slices, claim state, health, gRPC servers, in one event loop.

Start-up order: checkpoint (a corrupt one stops us before anything is served), then the DRA socket, then the
registration socket; slices are published in the background and retried while the API server is unreachable, so a
plugin restarted during an API outage still serves the kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from fakedev.driver.binding import compute_binding_updates
from fakedev.driver.core import SerializedDriver
from fakedev.driver.state import ClaimState, StatePaths
from fakedev.errors import FakedevError, KubeApiError, ProfileError
from fakedev.faults import Faults
from fakedev.kube import DriverApi
from fakedev.model.inventory import NodeInventory, resolve_inventory
from fakedev.nics.discover import Discovery, UdevNetMonitor, discover
from fakedev.nics.ports import compute_ports, ifname_of
from fakedev.nics.watch import LinkWatcher
from fakedev.plugin.control import ControlServer, ControlTarget
from fakedev.plugin.control import render_taint as _taint_now
from fakedev.plugin.health import HealthBoard
from fakedev.plugin.paths import PluginPaths
from fakedev.plugin.server import PluginServer
from fakedev.profiles import load_profile
from fakedev.publisher import SlicePublisher
from fakedev.render import DeviceRef, PublishedDevice, RenderedNode, Schema, default_schemas, render_node
from fakedev.render.pool import restamp_slices
from fakedev.render.types import DeviceTaint
from fakedev.sysfs import write_sysfs
from kubeclient import Credentials, JsonObj, KubeClient
from kubeletapi.types import Health

log = logging.getLogger("fakedev.plugin.app")

DEFAULT_KUBELET_ROOT: Final = Path("/var/lib/kubelet")
DEFAULT_CDI_DIR: Final = Path("/var/run/cdi")
PUBLISH_RETRY_MAX: Final = 10.0
BINDING_POLL_SECONDS: Final = 0.5


@dataclass(frozen=True, kw_only=True)
class PluginSettings:
    profile: str
    node_name: str
    schema: Schema | None = None
    driver_name: str | None = None
    kubelet_root: Path = DEFAULT_KUBELET_ROOT
    cdi_dir: Path = DEFAULT_CDI_DIR
    state_dir: Path | None = None
    """Checkpoint and fake /dev; default: the plugin's data dir ``<kubelet root>/plugins/<driver>``."""
    rolling_update_uid: str | None = None
    credentials: Credentials | None = None
    """None: run without an API server (no slices, no claim reads) — only useful for socket-level tests."""
    health_timeout_seconds: int = 30
    publish: bool = True
    nic_netns: str | None = None
    """The node's network namespace holding its NICs (dranet schema); None: the plugin's own."""
    fabric_netns: str | None = None
    """Where the NICs' fabric ports live; when set, their link state drives device health and taints."""
    record_calls: Path | None = None
    """Append a JSON line per gRPC call served here (:mod:`fakedev.plugin.calls`); None: record nothing."""


def choose_schema(inventory: NodeInventory, *, requested: Schema | None, profile: str) -> Schema:
    present = default_schemas(inventory)
    if requested is not None:
        if requested not in present:
            raise ProfileError(
                f"{profile}: schema: the profile has no devices for the {requested.value} schema "
                f"(it has: {', '.join(s.value for s in present) or 'none'})"
            )
        return requested
    if len(present) != 1:
        raise ProfileError(
            f"{profile}: schema: the profile has devices for {', '.join(s.value for s in present)}; "
            "choose one with --schema (one plugin serves one driver)"
        )
    return present[0]


@dataclass(kw_only=True)
class PluginApp:
    settings: PluginSettings
    schema: Schema = Schema.EXAMPLE
    inventory: NodeInventory | None = None
    rendered: RenderedNode | None = None
    health: HealthBoard = field(default_factory=HealthBoard)
    taints: dict[DeviceRef, list[DeviceTaint]] = field(default_factory=dict)
    server: PluginServer | None = None
    control: ControlServer | None = None
    publisher: SlicePublisher | None = None
    state: ClaimState | None = None
    faults: Faults = field(default_factory=Faults)
    link_watcher: LinkWatcher | None = None
    udev: UdevNetMonitor | None = None
    _republish: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    ready_at: float | None = None
    client: KubeClient | None = None
    """An API client to share (a fleet of nodes in one process); None: the plugin makes its own from the settings."""

    @property
    def driver(self) -> str:
        return self.settings.driver_name or self.schema.driver

    @property
    def paths(self) -> PluginPaths:
        return PluginPaths(
            kubelet_root=self.settings.kubelet_root,
            driver=self.driver,
            rolling_update_uid=self.settings.rolling_update_uid,
        )

    def _render(self, generation: int, owner: JsonObj | None) -> list[JsonObj]:
        assert self.inventory is not None and self.rendered is not None
        taints = {DeviceRef(driver=self.schema.driver, pool=r.pool, device=r.device): t for r, t in self.taints.items()}
        if taints:
            rendered = render_node(
                self.inventory,
                schemas=[self.schema],
                generation=generation,
                owner=owner,  # type: ignore[arg-type]
                taints=taints,
            ).slices
        else:
            # Nothing changed since start-up: reuse those slices (planning a dgx-h100 again costs ~5 ms per node).
            rendered = tuple(restamp_slices(self.rendered.slices, generation=generation, owner=owner))  # type: ignore[arg-type]
        slices: list[JsonObj] = []
        for s in rendered:
            body: JsonObj = dict(s)
            if self.driver != self.schema.driver:
                body = {**body, "spec": {**body["spec"], "driver": self.driver}}
            slices.append(body)
        return slices

    def lookup(self, pool: str, device: str) -> PublishedDevice | None:
        assert self.rendered is not None
        return self.rendered.devices.get(DeviceRef(driver=self.schema.driver, pool=pool, device=device))

    def device_refs(self) -> list[DeviceRef]:
        assert self.rendered is not None
        return [DeviceRef(driver=self.driver, pool=r.pool, device=r.device) for r in sorted(self.rendered.devices)]

    async def start(self) -> None:
        started = time.monotonic()
        s = self.settings
        self.inventory = resolve_inventory(load_profile(s.profile), node_name=s.node_name)
        self.schema = choose_schema(self.inventory, requested=s.schema, profile=s.profile)
        self.rendered = render_node(self.inventory, schemas=[self.schema])
        self.health = HealthBoard(timeout_seconds=s.health_timeout_seconds)
        self.health.set_devices((r.pool, r.device) for r in self.device_refs())
        client = self.client or (
            KubeClient(s.credentials, field_manager=f"fakedev/{self.driver}") if s.credentials else None
        )
        api = DriverApi(client=client, driver=self.driver, node_name=s.node_name) if client else None
        data_dir = s.state_dir or self.paths.plugin_dir
        sysfs_root = await asyncio.to_thread(self._ensure_gpu_sysfs, data_dir / "sys")
        state = ClaimState(
            driver=self.driver,
            node_name=s.node_name,
            paths=StatePaths(
                cdi_dir=s.cdi_dir,
                plugin_data_dir=self.paths.plugin_dir,
                dev_root=data_dir / "dev",
                checkpoint=data_dir / "checkpoint.json",
                sysfs_root=sysfs_root,
            ),
            api=api,
            lookup=self.lookup,
            nic_netns=s.nic_netns,
        )
        state.load()
        self.state = state
        core = SerializedDriver(state=state, lock_path=self.paths.serialize_lock, faults=self.faults)
        self.server = PluginServer(paths=self.paths, core=core, health=self.health, record_calls=s.record_calls)
        await self.server.start()
        self.control = ControlServer(
            path=self.paths.control_socket,
            target=ControlTarget(status=self.status, set_health=self.set_health, faults=self.faults),
        )
        await self.control.start()
        self.ready_at = time.monotonic() - started
        # The device model and slices live as long as the plugin: keep them out of the cyclic collector's scans,
        # which otherwise grow with every node a process hosts (a fleet) and stall calls now and then.
        gc.freeze()
        log.info(
            "plugin ready",
            extra={
                "fields": {
                    "driver": self.driver,
                    "node": s.node_name,
                    "devices": len(self.rendered.devices),
                    "seconds": round(self.ready_at, 3),
                }
            },
        )
        if self.schema == Schema.DRANET and s.nic_netns is not None:
            await self._discover_nics(s.nic_netns, data_dir / "sys")
        if s.fabric_netns is not None and self.schema == Schema.DRANET:
            self._watch_links(s.fabric_netns)
        fabric = {f"gpu-{g.index}": g.fabric_attach for g in self.inventory.example_gpus if g.fabric_attach is not None}
        if api is not None and fabric and self.schema == Schema.EXAMPLE:
            self._tasks.append(asyncio.create_task(self._binding_loop(api, fabric), name="binding"))
        if api is not None and s.publish:
            self.publisher = SlicePublisher(api=api, render=self._render)
            self._republish.set()
            self._tasks.append(asyncio.create_task(self._publish_loop(), name="publish"))

    async def _binding_loop(self, api: DriverApi, outcomes: dict[str, str]) -> None:
        """Report fabric attachment of allocated devices, as a driver's controller would (polling is cheap here)."""
        while True:
            try:
                claims = await asyncio.to_thread(api.list_claims)
                for u in compute_binding_updates(
                    claims, driver=self.driver, pool=self.settings.node_name, outcomes=outcomes
                ):
                    await asyncio.to_thread(
                        api.apply_claim_status, namespace=u.namespace, name=u.name, uid=u.uid, devices=list(u.devices)
                    )
                    log.info(
                        "binding condition reported",
                        extra={
                            "fields": {"claim": f"{u.namespace}/{u.name}", "devices": [d["device"] for d in u.devices]}
                        },
                    )
            except KubeApiError as exc:
                log.info("binding conditions not reported yet", extra={"fields": {"reason": str(exc)}})
            await asyncio.sleep(BINDING_POLL_SECONDS)

    async def _publish_loop(self) -> None:
        assert self.publisher is not None
        delay = 0.2
        while True:
            await self._republish.wait()
            self._republish.clear()
            try:
                await asyncio.to_thread(self.publisher.sync)
                delay = 0.2
            except KubeApiError as exc:
                log.warning(
                    "publishing slices failed; retrying", extra={"fields": {"error": str(exc), "retry_s": delay}}
                )
                await asyncio.sleep(delay)  # backoff between attempts against an unreachable API server
                delay = min(delay * 2, PUBLISH_RETRY_MAX)
                self._republish.set()

    def request_republish(self) -> None:
        self._republish.set()

    def set_health(self, *, device: str, health: Health, message: str = "", taint: DeviceTaint | None = None) -> None:
        """Change a device's health (and optionally its slice taint); the kubelet and the API hear of it."""
        ref = next((r for r in self.device_refs() if r.device == device), None)
        if ref is None:
            raise FakedevError(f"device {device!r} is not published by {self.driver} on {self.settings.node_name}")
        self.health.set_health(pool=ref.pool, device=device, health=health, message=message)
        key = DeviceRef(driver=self.driver, pool=ref.pool, device=device)
        if taint is not None:
            self.taints[key] = [taint]
        elif health == Health.HEALTHY:
            self.taints.pop(key, None)
        self.request_republish()

    def status(self) -> dict[str, object]:
        """What ``fakedev fault status`` shows: devices with health and taints, registration, claims, faults."""
        devices = []
        for ref in self.device_refs():
            h = self.health.get(pool=ref.pool, device=ref.device)
            devices.append(
                {
                    "pool": ref.pool,
                    "device": ref.device,
                    "health": h.health.name.title() if h else "Unknown",
                    "message": h.message if h else "",
                    "taints": list(self.taints.get(ref, [])),
                }
            )
        reg = self.server.registration if self.server else None
        return {
            "driver": self.driver,
            "node": self.settings.node_name,
            "devices": devices,
            "registration": {"registered": reg.registered, "error": reg.error, "notifications": reg.notifications}
            if reg
            else {},
            "claims": sorted(self.state.claims) if self.state else [],
            "faults": {"prepare": self.faults.prepare.to_json(), "unprepare": self.faults.unprepare.to_json()},
            "sliceGeneration": self.publisher.generation if self.publisher else 0,
            "healthSubscribers": self.health.subscribers,
            "udevEvents": self.udev.events if self.udev else 0,
        }

    def _ensure_gpu_sysfs(self, root: Path) -> Path | None:
        """The fake /sys a VM host's GPUs need (vfio bindings, IOMMU groups, mdev types); None when there are none."""
        inventory = self.inventory
        assert inventory is not None
        if self.schema != Schema.NVIDIA or not (inventory.passthrough_gpus or inventory.vgpu_devices):
            return None
        if not (root / "bus").exists():
            write_sysfs(inventory, root=root)
        return root

    async def _discover_nics(self, netns: str, sysfs_root: Path) -> None:
        """Find the NICs in the node namespace (sysfs + netlink) and follow udev; missing ones are unhealthy."""
        assert self.inventory is not None and self.rendered is not None
        inventory = self.inventory
        ports = compute_ports(inventory)

        def look() -> Discovery:
            if not (sysfs_root / "bus").exists():
                write_sysfs(inventory, root=sysfs_root)  # the emulated /sys this node's hardware would have
            return discover(ports=ports, netns=netns, sysfs_root=sysfs_root)

        found = await asyncio.to_thread(look)
        devices = {ifname_of(p.model): ref.device for ref, p in self.rendered.devices.items()}
        for ifname, problem in found.problems.items():
            if (device := devices.get(ifname)) is not None:
                self.set_health(device=device, health=Health.UNHEALTHY, message=f"{ifname}: {problem}")
        log.info(
            "NICs discovered",
            extra={"fields": {"present": len(found.present), "missing": len(found.problems), "pci": len(found.pci)}},
        )

        def udev(action: str, ifname: str) -> None:
            log.info("udev", extra={"fields": {"action": action, "interface": ifname}})

        self.udev = UdevNetMonitor(netns=netns, on_event=udev)
        self.udev.start()

    def _watch_links(self, fabric_netns: str) -> None:
        """Hot-unplug and carrier loss of a NIC: Unhealthy on the health stream and a NoExecute taint, until back."""
        assert self.inventory is not None
        devices = {
            ifname_of(p.model): ref.device for ref, p in (self.rendered.devices if self.rendered else {}).items()
        }
        loop = asyncio.get_running_loop()

        def changed(ifname: str, healthy: bool, why: str) -> None:  # noqa: FBT001 - the watcher's callback shape
            device = devices.get(ifname)
            if device is None:
                return
            taint = None if healthy else _taint_now("NoExecute", f"nic-{why}")
            loop.call_soon_threadsafe(
                lambda: self.set_health(
                    device=device,
                    health=Health.HEALTHY if healthy else Health.UNHEALTHY,
                    message=f"{ifname}: {why}",
                    taint=taint,
                )
            )

        self.link_watcher = LinkWatcher(
            fabric_netns=fabric_netns,
            ports={p.port: p.ifname for p in compute_ports(self.inventory)},
            on_change=changed,
        )
        self.link_watcher.start()

    async def stop(self) -> None:
        if self.link_watcher is not None:
            self.link_watcher.stop()
        if self.udev is not None:
            self.udev.stop()
        if self.control is not None:
            await self.control.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.server is not None:
            await self.server.stop()


async def run_plugin(settings: PluginSettings, *, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set (the CLI sets it on SIGTERM/SIGINT)."""
    app = PluginApp(settings=settings)
    await app.start()
    try:
        await stop.wait()
    finally:
        await app.stop()
