"""The plugin's DeviceFault watch: faults asked for through the API, applied as the control socket applies them.

A thread lists and watches the DeviceFaults of this node and driver (the API client blocks) and hands what it sees to
the event loop; :class:`FaultWatcher` keeps the objects, decides each one's outcome with the pure functions of
:mod:`fakedev.plugin.device_faults`, and applies the faults in force through the device board (health and taints,
as set-health) and the prepare fault slot (as set-fault). It clears a fault when its object goes or its ``until``
passes, and writes each object's status. An API outage only delays things: the thread lists again when the watch
breaks, so deletions missed meanwhile are seen too, and a plugin that starts applies the faults that already exist.

Faults from the API own what they touch: while one is in force on a device, the device shows what the DeviceFaults
on it say, and once the last one goes the device is Healthy and untainted again; the prepare slot is theirs while
any prepare fault is in force, and is reset when the last one goes.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from fakedev.errors import DeviceFaultError, KubeApiError
from fakedev.faults import Faults
from fakedev.kube import DeviceFaultApi
from fakedev.nics.ports import ifname_of
from fakedev.plugin.device_faults import (
    CLEAN,
    DeviceEffect,
    DeviceFault,
    DeviceState,
    Outcome,
    Phase,
    PrepareEffect,
    PublishedDevice,
    TaintSpec,
    combine_device_states,
    merge_prepare_fault,
    parse_device_fault,
    plan_outcome,
    render_status,
)
from fakedev.plugin.devices import DeviceBoard
from fakedev.render.types import DeviceTaint
from kubeclient import JsonObj
from kubeclient.timestamps import render_time, utc_now

log = logging.getLogger("fakedev.plugin.faults")

WATCH_SECONDS: Final = 300
"""How long one watch request lasts before the server ends it and the thread watches again from where it was."""
RETRY_FIRST: Final = 0.5
RETRY_MAX: Final = 30.0
NOT_FOUND: Final = 404


@dataclass(frozen=True, kw_only=True)
class Listed:
    """A full list: every object of ours now (what is missing from it was deleted)."""

    objects: list[JsonObj]


@dataclass(frozen=True, kw_only=True)
class Changed:
    kind: str
    """ADDED, MODIFIED or DELETED."""
    object: JsonObj


@dataclass(frozen=True, kw_only=True)
class Published:
    """The publisher wrote the slices again: statuses waiting for a taint to show may be written now."""


Seen = Listed | Changed | Published


def render_device_taint(taint: TaintSpec) -> DeviceTaint:
    doc: DeviceTaint = {"key": taint.key, "effect": taint.effect.value, "timeAdded": render_time()}
    if taint.value:
        doc["value"] = taint.value
    return doc


@dataclass(kw_only=True)
class FaultSource:
    """The thread that lists and watches; every object it sees goes to ``deliver`` (called in its thread)."""

    api: DeviceFaultApi
    node_name: str
    driver: str
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self, deliver: asyncio.Queue[Seen], loop: asyncio.AbstractEventLoop) -> None:
        delay = RETRY_FIRST
        complained = False
        while not self._stop.is_set():
            try:
                objects, version = self.api.list(node_name=self.node_name, driver=self.driver)
                loop.call_soon_threadsafe(deliver.put_nowait, Listed(objects=objects))
                if complained:
                    log.info("device faults: listing works again", extra={"fields": {"faults": len(objects)}})
                delay, complained = RETRY_FIRST, False
                self._watch(version, deliver, loop)
            except KubeApiError as exc:
                if not complained:
                    hint = " (is the DeviceFault CRD installed?)" if exc.status == NOT_FOUND else ""
                    log.warning(
                        f"device faults: cannot list or watch{hint}; retrying",
                        extra={"fields": {"error": str(exc), "retry_max_s": RETRY_MAX}},
                    )
                    complained = True
                self._stop.wait(delay)
                delay = min(delay * 2, RETRY_MAX)
            except RuntimeError:  # the event loop closed under us: the plugin is stopping
                return

    def _watch(self, version: str, deliver: asyncio.Queue[Seen], loop: asyncio.AbstractEventLoop) -> None:
        """Watch from ``version`` until the server says the version is gone (then the caller lists again)."""
        while not self._stop.is_set():
            for event in self.api.watch(
                node_name=self.node_name, driver=self.driver, resource_version=version, timeout_seconds=WATCH_SECONDS
            ):
                kind = event.get("type")
                obj = event.get("object")
                if kind == "ERROR" or not isinstance(obj, dict):
                    return  # typically 410 Gone: the version is too old to watch from
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    loop.call_soon_threadsafe(deliver.put_nowait, Changed(kind=str(kind), object=obj))
                if self._stop.is_set():
                    return

    def stop(self) -> None:
        self._stop.set()


@dataclass(kw_only=True)
class FaultWatcher:
    """The DeviceFaults in force on this plugin, kept applied on the board and the prepare slot."""

    api: DeviceFaultApi
    node_name: str
    driver: str
    board: DeviceBoard
    faults: Faults
    devices: Mapping[str, PublishedDevice]
    _objects: dict[str, DeviceFault] = field(default_factory=dict)
    _outcomes: dict[str, Outcome] = field(default_factory=dict)
    _device_states: dict[str, DeviceState] = field(default_factory=dict)
    _written: dict[str, Mapping[str, object]] = field(default_factory=dict)
    """The status last written per UID, so one write is not repeated before the watch echoes it."""
    _retry_at: datetime.datetime | None = None
    _shown_at: int = 0
    """The board change the slices must show before a status is written: Applied means the API shows the fault."""
    _source: FaultSource | None = None

    @classmethod
    def build(cls, *, api: DeviceFaultApi, board: DeviceBoard, faults: Faults) -> FaultWatcher:
        devices = {
            ref.device: PublishedDevice(name=ref.device, is_nic=ifname_of(published.model) is not None)
            for ref, published in board.rendered.devices.items()
        }
        return cls(api=api, node_name=board.node_name, driver=board.driver, board=board, faults=faults, devices=devices)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Seen] = asyncio.Queue()
        self._source = FaultSource(api=self.api, node_name=self.node_name, driver=self.driver)

        def wake() -> None:
            queue.put_nowait(Published())

        self.board.on_published.append(wake)
        # A thread of its own, not the loop's executor: a watch blocks for minutes, and the executor is joined when
        # the plugin stops; this one is a daemon the process does not wait for.
        threading.Thread(target=self._source.run, args=(queue, loop), name="device-faults", daemon=True).start()
        try:
            while True:
                try:
                    # asyncio.timeout, not wait_for: on 3.11 wait_for can drop an item (or a cancellation) that
                    # arrives as the wait ends.
                    async with asyncio.timeout(self._wait_seconds()):
                        item = await queue.get()
                    self._take(item)
                    while not queue.empty():
                        self._take(queue.get_nowait())
                except TimeoutError:
                    pass  # an until passed, or status writes are due again
                await self.reconcile(now=utc_now())
        finally:
            self.board.on_published.remove(wake)
            self._source.stop()

    def _wait_seconds(self) -> float | None:
        now = utc_now()
        times = [o.until for o in self._outcomes.values() if o.phase is Phase.APPLIED and o.until is not None]
        if self._retry_at is not None:
            times.append(self._retry_at)
        if not times:
            return None
        return max((min(times) - now).total_seconds(), 0.0) + 0.05

    def _take(self, seen: Seen) -> None:
        match seen:
            case Published():
                pass  # only wakes the loop, so the statuses held back are written
            case Listed():
                self._objects = {}
                for obj in seen.objects:
                    self._keep(obj)
            case Changed(kind="DELETED"):
                uid = (seen.object.get("metadata") or {}).get("uid")
                self._objects.pop(str(uid), None)
            case Changed():
                self._keep(seen.object)

    def _keep(self, obj: JsonObj) -> None:
        try:
            fault = parse_device_fault(obj)
        except DeviceFaultError as exc:  # no name or UID: nothing to report it on
            log.warning("device faults: an object that cannot be named", extra={"fields": {"error": str(exc)}})
            return
        self._objects[fault.uid] = fault

    async def reconcile(self, *, now: datetime.datetime) -> None:
        """Decide every object's outcome, apply the difference, write the statuses that changed."""
        outcomes: dict[str, Outcome] = {}
        for uid, fault in self._objects.items():
            outcome = plan_outcome(
                fault,
                previous=self._outcomes.get(uid),
                node_name=self.node_name,
                driver=self.driver,
                devices=self.devices,
                now=now,
            )
            if outcome is not None:
                outcomes[uid] = outcome
        for uid, outcome in outcomes.items():
            if self._outcomes.get(uid) != outcome:
                self._log(outcome)
        for uid, gone in self._outcomes.items():
            if uid not in outcomes and gone.phase is Phase.APPLIED:
                log.info("device fault deleted: cleared", extra={"fields": {"fault": gone.name}})
        self._apply_devices(outcomes)
        self._apply_prepare(outcomes)
        self._outcomes = outcomes
        self._written = {uid: status for uid, status in self._written.items() if uid in outcomes}
        await self._write_statuses(now=now)

    def _log(self, outcome: Outcome) -> None:
        fields: dict[str, object] = {"fault": outcome.name, "generation": outcome.generation}
        if outcome.error:
            fields["error"] = outcome.error
        log.info(f"device fault {outcome.phase.value.lower()}", extra={"fields": fields})

    def _apply_devices(self, outcomes: Mapping[str, Outcome]) -> None:
        effects = [
            (o.name, o.effect)
            for o in outcomes.values()
            if o.phase is Phase.APPLIED and isinstance(o.effect, DeviceEffect)
        ]
        states = combine_device_states(effects)
        for device in sorted(set(states) | set(self._device_states)):
            want = states.get(device, CLEAN)
            if self._device_states.get(device, CLEAN) == want:
                continue
            self.board.set_health(
                device=device,
                health=want.health,
                message=want.message,
                taint=None if want.taint is None else render_device_taint(want.taint),
            )
            self._shown_at = self.board.changes
        self._device_states = {device: state for device, state in states.items() if state != CLEAN}

    def _apply_prepare(self, outcomes: Mapping[str, Outcome]) -> None:
        def in_force(table: Mapping[str, Outcome]) -> dict[str, tuple[int, PrepareEffect]]:
            return {
                uid: (o.generation, o.effect)
                for uid, o in table.items()
                if o.phase is Phase.APPLIED and isinstance(o.effect, PrepareEffect)
            }

        before, now = in_force(self._outcomes), in_force(outcomes)
        if before == now:
            return
        added = [effect for uid, (generation, effect) in now.items() if before.get(uid, (None,))[0] != generation]
        self.faults.prepare = merge_prepare_fault(
            self.faults.prepare, active=[effect for _, effect in now.values()], added=added
        )

    async def _write_statuses(self, *, now: datetime.datetime) -> None:
        self._retry_at = None
        if not self.board.shows(self._shown_at):
            return  # the publisher has not written the new health and taints yet; its Published wakes us
        for uid, outcome in self._outcomes.items():
            fault = self._objects[uid]
            status = render_status(outcome)
            if fault.seen_status == status or self._written.get(uid) == status:
                continue
            try:
                await asyncio.to_thread(self.api.write_status, name=fault.name, uid=uid, status=status)
                self._written[uid] = status
            except KubeApiError as exc:
                if exc.status == NOT_FOUND:
                    continue  # deleted meanwhile: the watch will say so
                log.warning(
                    "device fault status not written; retrying",
                    extra={"fields": {"fault": fault.name, "error": str(exc)}},
                )
                self._retry_at = now + datetime.timedelta(seconds=2)

    def stop(self) -> None:
        if self._source is not None:
            self._source.stop()
