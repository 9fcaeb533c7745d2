"""The kubelet plugin process: device model → slices, claim state, health, gRPC servers, in one event loop.

:meth:`PluginApp.build` makes every part (profile, schema, slices, checkpoint, servers, publisher, NIC watchers) and
decides which optional parts this plugin has; :meth:`PluginApp.start` and :meth:`PluginApp.stop` only start and stop
them. Start-up order: checkpoint (a corrupt one stops us before anything is served), then the DRA socket, then the
registration socket; slices are published in the background and retried while the API server is unreachable, so a
plugin restarted during an API outage still serves the kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from fakedev.driver.binding import compute_binding_updates
from fakedev.driver.boot import read_boot_id
from fakedev.driver.cdi_layout import cdi_layout_for
from fakedev.driver.claim_cache import ClaimCache, ClaimWatch
from fakedev.driver.core import ConcurrentDriver
from fakedev.driver.crash import CrashAt, CrashSwitch
from fakedev.driver.fsutil import PRIVATE_DIR_MODE, is_volatile_dir, make_dirs
from fakedev.driver.plan import compute_base_spec
from fakedev.driver.state import ClaimState, StatePaths
from fakedev.errors import KubeApiError, ProfileError
from fakedev.faults import Faults
from fakedev.kube import DeviceFaultApi, DriverApi
from fakedev.model.inventory import NodeInventory, resolve_inventory
from fakedev.nics.addresses import Addresses, AddressWatcher, read_addresses
from fakedev.nics.discover import Discovery, UdevNetMonitor, discover
from fakedev.nics.plan import HostNic
from fakedev.nics.ports import compute_ports, ifname_of
from fakedev.nics.watch import LinkWatcher
from fakedev.plugin.control import ControlServer, ControlTarget, render_taint
from fakedev.plugin.devices import DeviceBoard
from fakedev.plugin.fault_watch import FaultWatcher
from fakedev.plugin.paths import PluginPaths
from fakedev.plugin.protocol import StatusBody, render_call_fault
from fakedev.plugin.server import PluginServer
from fakedev.profiles import load_profile
from fakedev.publisher import SlicePublisher
from fakedev.render import RenderedNode, Schema, SchemaPin, default_schemas
from fakedev.sysfs import write_sysfs
from kubeclient import Credentials, KubeClient
from kubeclient.values import TaintEffect
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
    pin: SchemaPin | None = None
    """``--schema`` as given: its release, if any, overrides the profile's ``releases``."""
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
    crash_at: CrashAt | None = None
    """Kill the plugin at this crash point (``FAKEDEV_CRASH_AT``, for ``fakedev torture``); None: never."""
    watch_device_faults: bool = True
    """Apply the DeviceFault objects of this node and driver (needs the API server and the CRD)."""
    threaded_dra: bool = True
    """Serve the DRA socket on gRPC's threaded server (:mod:`fakedev.plugin.server`); False for many nodes in one
    process."""
    cache_claims: bool = True
    """List and watch ResourceClaims: a prepare plans while its GET is answered (:mod:`~fakedev.driver.claim_cache`)."""


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
class BindingReporter:
    """Writes the binding-condition verdicts a driver owes for allocated fabric devices, as its controller would."""

    api: DriverApi
    driver: str
    pool: str
    outcomes: Mapping[str, str]
    """Device name → the verdict (FabricAttached / FabricAttachFailed) the profile gives it."""

    async def run(self) -> None:
        while True:  # polling is cheap here and needs no watch
            try:
                claims = await asyncio.to_thread(self.api.list_claims)
                for u in compute_binding_updates(claims, driver=self.driver, pool=self.pool, outcomes=self.outcomes):
                    await asyncio.to_thread(
                        self.api.apply_claim_status,
                        namespace=u.namespace,
                        name=u.name,
                        uid=u.uid,
                        devices=list(u.devices),
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


@dataclass(kw_only=True)
class PluginApp:
    """One plugin, fully built by :meth:`build`; the optional parts are None when this plugin has no use for them."""

    settings: PluginSettings
    paths: PluginPaths
    data_dir: Path
    """Checkpoint, fake /dev and /sys."""
    devices: DeviceBoard
    state: ClaimState
    core: ConcurrentDriver
    faults: Faults
    server: PluginServer
    control: ControlServer
    publisher: SlicePublisher | None
    """None: no API server to publish to, or publishing switched off."""
    binding: BindingReporter | None
    """None: no fabric-attached devices (or no API server), so no binding conditions are owed."""
    udev: UdevNetMonitor | None
    """None: no node namespace with NICs to discover (only the dranet schema has one)."""
    link_watcher: LinkWatcher | None
    """None: no fabric namespace whose link state drives the NICs' health."""
    address_watcher: AddressWatcher | None
    """None: no node namespace with NICs whose addresses the slices publish (only the dranet schema has one)."""
    fault_watch: FaultWatcher | None
    """None: no API server, or DeviceFaults switched off (``--no-device-faults``)."""
    claim_watch: ClaimWatch | None
    """None: no API server, or the claim cache switched off (``--no-claim-cache``, a fleet)."""
    build_started: float
    """``time.monotonic()`` when :meth:`build` began: start-up time is measured from there."""
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @classmethod
    async def build(
        cls,
        settings: PluginSettings,
        *,
        client: KubeClient | None = None,
        inventory: NodeInventory | None = None,
        rendered: RenderedNode | None = None,
    ) -> PluginApp:
        """Make every part, load the checkpoint (a corrupt one raises before any socket exists), serve nothing yet.

        ``client``: an API client to share (a fleet of nodes in one process); None: one made from the settings.
        ``inventory``, ``rendered``: the node's inventory, resolved from the settings' profile, and its render in the
        settings' schema, made already (a fleet resolves and renders each node once).
        """
        started = time.monotonic()
        s = settings
        profile = load_profile(s.profile)
        if s.pin is not None:
            profile = replace(profile, releases=profile.releases.pinned(s.pin))
        if inventory is None:
            inventory = resolve_inventory(profile, node_name=s.node_name)
        schema = choose_schema(inventory, requested=s.schema, profile=s.profile)
        driver = s.driver_name or schema.driver
        devices = DeviceBoard.build(
            inventory=inventory,
            schema=schema,
            driver=driver,
            node_name=s.node_name,
            health_timeout_seconds=s.health_timeout_seconds,
            rendered=rendered,
        )
        paths = PluginPaths(kubelet_root=s.kubelet_root, driver=driver, rolling_update_uid=s.rolling_update_uid)
        if client is None and s.credentials is not None:
            client = KubeClient(s.credentials, field_manager=f"fakedev/{driver}")
        api = DriverApi(client=client, driver=driver, node_name=s.node_name) if client else None
        data_dir = s.state_dir or paths.plugin_dir
        # The plugin's own directory first, private whatever the umask, before anything is made inside it.
        make_dirs(paths.plugin_dir, mode=PRIVATE_DIR_MODE)
        make_dirs(data_dir, mode=PRIVATE_DIR_MODE)
        sysfs_root = await asyncio.to_thread(_ensure_gpu_sysfs, inventory, schema=schema, root=data_dir / "sys")
        layout = cdi_layout_for(schema=schema, nvidia=inventory.profile.releases.nvidia, driver=driver)
        claim_watch = (
            ClaimWatch(api=api, cache=ClaimCache(driver=driver, node_name=s.node_name))
            if api is not None and s.cache_claims
            else None
        )
        state = ClaimState(
            driver=driver,
            node_name=s.node_name,
            paths=StatePaths(
                cdi_dir=s.cdi_dir,
                plugin_data_dir=paths.plugin_dir,
                dev_root=data_dir / "dev",
                checkpoint=data_dir / "checkpoint.json",
                sysfs_root=sysfs_root,
                durable=not is_volatile_dir(s.cdi_dir),
                boot_id=read_boot_id(),
            ),
            layout=layout,
            base_spec=compute_base_spec(
                layout=layout,
                devices=[(ref.device, p) for ref, p in sorted(devices.rendered.devices.items())],
                dev_root=data_dir / "dev",
            ),
            api=api,
            lookup=devices.lookup,
            nic_netns=s.nic_netns,
            node_nics=_node_nics(devices) if schema == Schema.DRANET else {},
            crash=CrashSwitch(armed=s.crash_at),
            # No release of the NVIDIA driver writes ResourceClaim status (docs/research/nvidia-releases.md).
            writes_device_status=schema != Schema.NVIDIA,
            cache=claim_watch.cache if claim_watch is not None else None,
        )
        faults = Faults()
        core = ConcurrentDriver(state=state, lock_path=paths.serialize_lock, faults=faults)
        if s.crash_at is not None:
            log.warning("crash point armed", extra={"fields": {"point": s.crash_at.render()}})
        await asyncio.to_thread(core.load)
        server = PluginServer(
            paths=paths, core=core, health=devices.health, record_calls=s.record_calls, threaded=s.threaded_dra
        )
        publisher = SlicePublisher(api=api, render=devices.render_slices) if api is not None and s.publish else None
        devices.publishing = publisher is not None
        fabric = {f"gpu-{g.index}": g.fabric_attach for g in inventory.example_gpus if g.fabric_attach is not None}
        binding = (
            BindingReporter(api=api, driver=driver, pool=s.node_name, outcomes=fabric)
            if api is not None and fabric and schema == Schema.EXAMPLE
            else None
        )
        udev = (
            UdevNetMonitor(netns=s.nic_netns, on_event=_log_udev)
            if schema == Schema.DRANET and s.nic_netns is not None
            else None
        )
        link_watcher = (
            _link_watcher(devices, fabric_netns=s.fabric_netns, loop=asyncio.get_running_loop())
            if schema == Schema.DRANET and s.fabric_netns is not None
            else None
        )
        address_watcher = (
            _address_watcher(devices, netns=s.nic_netns, loop=asyncio.get_running_loop())
            if schema == Schema.DRANET and s.nic_netns is not None
            else None
        )

        fault_watch = (
            FaultWatcher.build(api=DeviceFaultApi(client=api.client), board=devices, faults=faults)
            if api is not None and s.watch_device_faults
            else None
        )

        def status() -> StatusBody:
            return render_status(
                devices=devices, server=server, state=state, faults=faults, publisher=publisher, udev=udev
            )

        control = ControlServer(
            path=paths.control_socket,
            target=ControlTarget(status=status, set_health=devices.set_health, faults=faults),
        )
        return cls(
            settings=s,
            paths=paths,
            data_dir=data_dir,
            devices=devices,
            state=state,
            core=core,
            faults=faults,
            server=server,
            control=control,
            publisher=publisher,
            binding=binding,
            udev=udev,
            link_watcher=link_watcher,
            address_watcher=address_watcher,
            fault_watch=fault_watch,
            claim_watch=claim_watch,
            build_started=started,
        )

    @property
    def driver(self) -> str:
        return self.devices.driver

    @property
    def schema(self) -> Schema:
        return self.devices.schema

    def status(self) -> StatusBody:
        """What ``fakedev fault status`` shows: devices with health and taints, registration, claims, faults."""
        return render_status(
            devices=self.devices,
            server=self.server,
            state=self.state,
            faults=self.faults,
            publisher=self.publisher,
            udev=self.udev,
        )

    async def start(self) -> None:
        """Serve DRA, health and registration, then the control socket; then the background work."""
        await self.server.start()
        await self.control.start()
        seconds = time.monotonic() - self.build_started
        # The device model and slices live as long as the plugin: keep them out of the cyclic collector's scans,
        # which otherwise grow with every node a process hosts (a fleet) and stall calls now and then.
        gc.freeze()
        log.info(
            "plugin ready",
            extra={
                "fields": {
                    "driver": self.driver,
                    "node": self.settings.node_name,
                    "schema": self.devices.inventory.profile.releases.name_of(self.devices.schema.value),
                    "devices": len(self.devices.rendered.devices),
                    "seconds": round(seconds, 3),
                }
            },
        )
        if self.udev is not None:
            await self._discover_nics(self.udev)
            self.udev.start()
        if self.link_watcher is not None:
            self.link_watcher.start()
        if self.address_watcher is not None:
            self.address_watcher.start()
        if self.binding is not None:
            self._tasks.append(asyncio.create_task(self.binding.run(), name="binding"))
        if self.claim_watch is not None:
            self.claim_watch.start()
        if self.fault_watch is not None:
            self._tasks.append(asyncio.create_task(self.fault_watch.run(), name="device-faults"))
        if self.publisher is not None:
            self.devices.republish.set()
            self._tasks.append(asyncio.create_task(self._publish_loop(self.publisher), name="publish"))

    async def _publish_loop(self, publisher: SlicePublisher) -> None:
        delay = 0.2
        while True:
            await self.devices.republish.wait()
            self.devices.republish.clear()
            change = self.devices.changes  # the slices rendered below include every change made so far
            try:
                await asyncio.to_thread(publisher.sync)
                delay = 0.2
                self.devices.mark_published(change)
            except KubeApiError as exc:
                log.warning(
                    "publishing slices failed; retrying", extra={"fields": {"error": str(exc), "retry_s": delay}}
                )
                await asyncio.sleep(delay)  # backoff between attempts against an unreachable API server
                delay = min(delay * 2, PUBLISH_RETRY_MAX)
                self.devices.republish.set()

    async def _discover_nics(self, udev: UdevNetMonitor) -> None:
        """Find the NICs in the node namespace (sysfs + netlink) and their addresses; missing ones are unhealthy."""
        inventory = self.devices.inventory
        ports = compute_ports(inventory)
        sysfs_root = self.data_dir / "sys"

        def look() -> Discovery:
            if not (sysfs_root / "bus").exists():
                write_sysfs(inventory, root=sysfs_root)  # the emulated /sys this node's hardware would have
            return discover(ports=ports, netns=udev.netns, sysfs_root=sysfs_root)

        found = await asyncio.to_thread(look)
        # Before the first publish, so the first slices already show them; the address watcher keeps them current.
        addresses = await asyncio.to_thread(read_addresses, udev.netns, ifnames=_nic_ifnames(self.devices))
        self.devices.set_addresses(addresses)
        devices = {ifname_of(p.model): ref.device for ref, p in self.devices.rendered.devices.items()}
        for ifname, problem in found.problems.items():
            if (device := devices.get(ifname)) is not None:
                self.devices.set_health(device=device, health=Health.UNHEALTHY, message=f"{ifname}: {problem}")
        log.info(
            "NICs discovered",
            extra={"fields": {"present": len(found.present), "missing": len(found.problems), "pci": len(found.pci)}},
        )

    async def stop(self) -> None:
        if self.link_watcher is not None:
            self.link_watcher.stop()
        if self.address_watcher is not None:
            self.address_watcher.stop()
        if self.udev is not None:
            self.udev.stop()
        await self.control.stop()
        if self.fault_watch is not None:
            self.fault_watch.stop()
        if self.claim_watch is not None:
            self.claim_watch.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.server.stop()
        await asyncio.to_thread(self.core.close)  # status writes still owed stay in the journal for the next start


def render_status(
    *,
    devices: DeviceBoard,
    server: PluginServer,
    state: ClaimState,
    faults: Faults,
    publisher: SlicePublisher | None,
    udev: UdevNetMonitor | None,
) -> StatusBody:
    reg = server.registration
    return {
        "driver": devices.driver,
        "node": devices.node_name,
        "devices": devices.status(),
        "registration": {"registered": reg.registered, "error": reg.error, "notifications": reg.notifications},
        "claims": sorted(state.claims),
        "faults": {"prepare": render_call_fault(faults.prepare), "unprepare": render_call_fault(faults.unprepare)},
        "sliceGeneration": publisher.generation if publisher else 0,
        "healthSubscribers": devices.health.subscribers,
        "udevEvents": udev.events if udev else 0,
        "statusOwed": state.outbox.pending() if state.outbox is not None else 0,
    }


def _ensure_gpu_sysfs(inventory: NodeInventory, *, schema: Schema, root: Path) -> Path | None:
    """The fake /sys a VM host's GPUs need (vfio bindings, IOMMU groups, mdev types); None when there are none."""
    if schema != Schema.NVIDIA or not (inventory.passthrough_gpus or inventory.vgpu_devices):
        return None
    if not (root / "bus").exists():
        write_sysfs(inventory, root=root)
    return root


def _node_nics(devices: DeviceBoard) -> dict[str, HostNic]:
    """The node's Ethernet NICs by published device name, as the hardware has them."""
    ports = {p.ifname: p for p in compute_ports(devices.inventory)}
    return {
        ref.device: HostNic(ifname=port.ifname, mac=port.mac, mtu=port.mtu)
        for ref, published in devices.rendered.devices.items()
        if (port := ports.get(ifname_of(published.model) or "")) is not None
    }


def _nic_ifnames(devices: DeviceBoard) -> frozenset[str]:
    """The node-side interface names of the published NICs."""
    return frozenset(n for p in devices.rendered.devices.values() if (n := ifname_of(p.model)) is not None)


def _address_watcher(devices: DeviceBoard, *, netns: str, loop: asyncio.AbstractEventLoop) -> AddressWatcher:
    """Addresses added to or removed from a NIC in the node namespace: republished as dra.net ipv4/ipv6."""

    def changed(snapshot: Addresses) -> None:
        # The watcher runs in its own thread; the board belongs to the event loop.
        loop.call_soon_threadsafe(devices.set_addresses, snapshot)

    return AddressWatcher(netns=netns, ifnames=_nic_ifnames(devices), on_change=changed)


def _log_udev(action: str, ifname: str) -> None:
    log.info("udev", extra={"fields": {"action": action, "interface": ifname}})


def _link_watcher(devices: DeviceBoard, *, fabric_netns: str, loop: asyncio.AbstractEventLoop) -> LinkWatcher:
    """Hot-unplug and carrier loss of a NIC: Unhealthy on the health stream and a NoExecute taint, until back."""
    by_ifname = {ifname_of(p.model): ref.device for ref, p in devices.rendered.devices.items()}

    def changed(ifname: str, healthy: bool, why: str) -> None:  # noqa: FBT001 - the watcher's callback shape
        device = by_ifname.get(ifname)
        if device is None:
            return
        taint = None if healthy else render_taint(TaintEffect.NO_EXECUTE, f"nic-{why}")
        # The watcher runs in its own thread; the board belongs to the event loop.
        loop.call_soon_threadsafe(
            lambda: devices.set_health(
                device=device,
                health=Health.HEALTHY if healthy else Health.UNHEALTHY,
                message=f"{ifname}: {why}",
                taint=taint,
            )
        )

    return LinkWatcher(
        fabric_netns=fabric_netns,
        ports={p.port: p.ifname for p in compute_ports(devices.inventory)},
        on_change=changed,
    )


async def run_plugin(settings: PluginSettings, *, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set (the CLI sets it on SIGTERM/SIGINT)."""
    app = await PluginApp.build(settings)
    await app.start()
    try:
        await stop.wait()
    finally:
        await app.stop()
