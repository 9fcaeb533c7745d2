"""The kubelet's plugin manager for DRA: discovery, registration, connections, health streams.

Discovery works like the kubelet's: inotify on the registration directory plus a reconciler every second. Names
starting with ``.`` and non-sockets are ignored, a socket re-created at the same path is deregistered and registered
again, and a failed handshake is retried on the next reconcile round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import grpc

from harness.errors import DraCallError, HandshakeError
from harness.node.dra_client import DraConnection
from harness.node.inotify import DirectoryWatch
from harness.node.registration import Registration, handshake
from kubeletapi.types import DeviceHealth, Health

log = logging.getLogger("harness.node.plugins")

RECONCILE_SECONDS: Final = 1.0
LISTING_SETTLE_NS: Final = 2_000_000_000
"""A directory's modification time is coarse (a clock tick; whole seconds on some file systems): one modified this
recently may change again without a new time, so a listing of it is trusted to stay current only once its time is
this much in the past."""
HEALTH_RETRY_MAX: Final = 5.0

HealthCallback = Callable[[str, list[DeviceHealth]], None]
"""(driver, devices whose health is reported) — Unknown is reported when a stream ends."""


@dataclass(frozen=True, kw_only=True)
class PluginEvent:
    at: float
    kind: str
    """registered | refused | failed | deregistered | health-opened | health-closed"""
    driver: str
    socket: str
    detail: str = ""


@dataclass(kw_only=True)
class PluginInstance:
    registration: Registration
    connection: DraConnection
    socket_id: tuple[int, int]
    health_task: asyncio.Task[None] | None = None
    known_devices: set[tuple[str, str]] = field(default_factory=set)

    @property
    def driver(self) -> str:
        return self.registration.driver

    def connected(self) -> bool:
        state = self.connection.channel.get_state(try_to_connect=True)
        return state not in (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN)


def socket_id(path: Path) -> tuple[int, int] | None:
    """(inode, device) of the socket at ``path``; None when there is none."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_dev) if stat.S_ISSOCK(st.st_mode) else None


@dataclass(kw_only=True)
class PluginManager:
    registry_dir: Path
    on_health: HealthCallback
    retry_interval: float = RECONCILE_SECONDS
    watch_directory: bool = True
    """False: find sockets by polling every ``retry_interval`` only; a process emulating hundreds of nodes would
    otherwise need an inotify instance per node (the default limit is 128 per user)."""
    instances: dict[Path, PluginInstance] = field(default_factory=dict)
    events: list[PluginEvent] = field(default_factory=list)
    _failed_at: dict[tuple[Path, tuple[int, int]], float] = field(default_factory=dict)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _recreated: set[Path] = field(default_factory=set)
    _listed: int | None = None
    """The registry directory's modification time (ns) when a listing that is still current was made; None: list."""

    # -- queries -------------------------------------------------------------------------------------------------

    def instance_for(self, driver: str) -> PluginInstance | None:
        """The most recently registered instance of ``driver`` that is still connected (newest wins)."""
        candidates = [i for i in self.instances.values() if i.driver == driver and i.connected()]
        return max(candidates, key=lambda i: i.registration.registered_at, default=None)

    def drivers(self) -> set[str]:
        return {i.driver for i in self.instances.values()}

    def connected_drivers(self) -> set[str]:
        return {i.driver for i in self.instances.values() if i.connected()}

    async def wait_registered(self, driver: str, *, timeout: float) -> PluginInstance:
        async def ready() -> PluginInstance:
            async with self._changed:
                while (inst := self.instance_for(driver)) is None:
                    await self._changed.wait()
                return inst

        return await asyncio.wait_for(ready(), timeout)

    # -- the reconcile loop --------------------------------------------------------------------------------------

    async def run(self) -> None:
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        watch = (
            DirectoryWatch(directory=self.registry_dir, on_event=self._on_fs_event) if self.watch_directory else None
        )
        loop = asyncio.get_running_loop()
        if watch is not None:
            loop.add_reader(watch.open(), watch.read)
        try:
            while True:
                await self.reconcile()
                if watch is None:  # nothing sets the wake-up event: a plain sleep costs the event loop half as much
                    await asyncio.sleep(self.retry_interval)
                    continue
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that lands as the event
                # is set, and this loop then outlives the emulator's stop (seen in CI: stop waited 120 s).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.retry_interval):
                        await self._wake.wait()
                self._wake.clear()
        finally:
            if watch is not None:
                loop.remove_reader(watch.fd)
                watch.close()

    def _on_fs_event(self, name: str, created: bool) -> None:  # noqa: FBT001 - the watch's callback shape
        path = self.registry_dir / name
        if created and path in self.instances:
            self._recreated.add(path)
        self._listed = None  # what inotify reports is listed, whatever the directory's time says
        self._wake.set()

    async def reconcile(self) -> None:
        try:
            listed = self.registry_dir.stat().st_mtime_ns
        except FileNotFoundError:
            listed = None
        if listed is not None and listed == self._listed and not self._recreated and not self._failed_at:
            return  # nothing created or removed there since a listing that saw it all (a fleet's nodes poll a lot)
        self._listed = listed if listed is not None and time.time_ns() - listed > LISTING_SETTLE_NS else None
        present: dict[Path, tuple[int, int]] = {}
        for entry in sorted(self.registry_dir.iterdir()):
            if entry.name.startswith("."):
                continue
            sid = socket_id(entry)
            if sid is not None:
                present[entry] = sid
        self._failed_at = {k: t for k, t in self._failed_at.items() if present.get(k[0]) == k[1]}
        recreated, self._recreated = self._recreated, set()
        for path in list(self.instances):
            if path not in present:
                await self._deregister(path, reason="socket removed")
            elif path in recreated or present[path] != self.instances[path].socket_id:
                await self._deregister(path, reason="socket re-created")
        for path, sid in present.items():
            if path in self.instances:
                continue
            failed = self._failed_at.get((path, sid))
            if failed is not None and time.monotonic() - failed < self.retry_interval:
                continue
            await self._register(path, sid)

    async def _register(self, path: Path, sid: tuple[int, int]) -> None:
        registered = [(i.driver, i.registration.endpoint) for i in self.instances.values()]
        try:
            reg = await handshake(path, registered=registered)
        except HandshakeError as exc:
            self._failed_at[(path, sid)] = time.monotonic()
            self._event("refused" if exc.notified else "failed", driver="", socket=path, detail=str(exc))
            log.warning("plugin registration failed", extra={"fields": {"socket": str(path), "error": str(exc)}})
            return
        self._failed_at.pop((path, sid), None)
        inst = PluginInstance(registration=reg, connection=DraConnection(endpoint=reg.endpoint), socket_id=sid)
        self.instances[path] = inst
        if reg.health_version is not None:
            inst.health_task = asyncio.create_task(self._watch_health(inst), name=f"health-{reg.driver}")
        self._event(
            "registered",
            driver=reg.driver,
            socket=path,
            detail=f"{reg.dra_version} endpoint={reg.endpoint} health={reg.health_version}",
        )
        async with self._changed:
            self._changed.notify_all()

    async def _deregister(self, path: Path, *, reason: str) -> None:
        inst = self.instances.pop(path)
        if inst.health_task is not None:
            inst.health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await inst.health_task
        self._mark_unknown(inst)
        await inst.connection.close()
        self._event("deregistered", driver=inst.driver, socket=path, detail=reason)
        async with self._changed:
            self._changed.notify_all()

    def _mark_unknown(self, inst: PluginInstance) -> None:
        if inst.known_devices:
            now = int(time.time())
            self.on_health(
                inst.driver,
                [
                    DeviceHealth(
                        pool=p,
                        device=d,
                        health=Health.UNKNOWN,
                        last_updated=now,
                        timeout_seconds=0,
                        message="health stream ended",
                    )
                    for p, d in sorted(inst.known_devices)
                ],
            )

    async def _watch_health(self, inst: PluginInstance) -> None:
        version = inst.registration.health_version
        assert version is not None
        delay = 0.2
        while True:
            self._event(
                "health-opened", driver=inst.driver, socket=inst.registration.registration_socket, detail=version
            )
            try:
                async for devices in inst.connection.watch_health(version=version):
                    delay = 0.2
                    inst.known_devices.update((d.pool, d.device) for d in devices)
                    self.on_health(inst.driver, devices)
                detail = "stream ended"
            except DraCallError as exc:
                if exc.code == grpc.StatusCode.UNIMPLEMENTED:
                    self._event(
                        "health-closed",
                        driver=inst.driver,
                        socket=inst.registration.registration_socket,
                        detail="Unimplemented: not retried",
                    )
                    self._mark_unknown(inst)
                    return
                detail = str(exc)
            self._event(
                "health-closed", driver=inst.driver, socket=inst.registration.registration_socket, detail=detail
            )
            self._mark_unknown(inst)
            await asyncio.sleep(delay)  # reconnect backoff, as the kubelet does
            delay = min(delay * 2, HEALTH_RETRY_MAX)

    def _event(self, kind: str, *, driver: str, socket: Path, detail: str) -> None:
        self.events.append(PluginEvent(at=time.time(), kind=kind, driver=driver, socket=str(socket), detail=detail))
        log.info(f"plugin {kind}", extra={"fields": {"driver": driver, "socket": str(socket), "detail": detail}})

    async def close(self) -> None:
        for path in list(self.instances):
            await self._deregister(path, reason="node emulator stopping")
