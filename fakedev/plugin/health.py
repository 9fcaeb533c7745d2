"""DRAResourceHealth v1 and v1alpha1: a full report when the kubelet subscribes, then every change.

The board is changed in the plugin's event loop; the streams are served by the DRA server's worker threads (one
each, for as long as the kubelet keeps it), so a subscriber is a thread-safe queue, and a stream's end — the kubelet
went away, the server stops — wakes its thread with a None."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import grpc
from grpc import aio

from kubeletapi import health_v1_pb2 as h1
from kubeletapi import health_v1_pb2_grpc as h1_grpc
from kubeletapi import health_v1alpha1_pb2 as h1a1
from kubeletapi import health_v1alpha1_pb2_grpc as h1a1_grpc
from kubeletapi.types import DeviceHealth, Health

log = logging.getLogger("fakedev.plugin.health")

DEFAULT_TIMEOUT_SECONDS = 30


@dataclass(kw_only=True)
class HealthBoard:
    """Current health of every device plus a broadcast of changes to any number of subscribers."""

    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    _devices: dict[tuple[str, str], DeviceHealth] = field(default_factory=dict)
    _subscribers: set[queue.SimpleQueue[Sequence[DeviceHealth] | None]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _async_subscribers: set[asyncio.Queue[Sequence[DeviceHealth]]] = field(default_factory=set)
    """Streams of an asyncio server (a fleet's), in the event loop that changes the board."""

    def set_devices(self, devices: Iterable[tuple[str, str]]) -> None:
        """Track exactly these (pool, device) pairs; new ones start Healthy, vanished ones are dropped."""
        now = int(time.time())
        wanted = set(devices)
        for key in list(self._devices):
            if key not in wanted:
                del self._devices[key]
        for pool, device in wanted:
            self._devices.setdefault(
                (pool, device),
                DeviceHealth(
                    pool=pool,
                    device=device,
                    health=Health.HEALTHY,
                    last_updated=now,
                    timeout_seconds=self.timeout_seconds,
                ),
            )

    def set_health(self, *, pool: str, device: str, health: Health, message: str = "") -> bool:
        """Record a device's health; returns whether it changed (and subscribers were told)."""
        key = (pool, device)
        current = self._devices.get(key)
        if current is None:
            return False
        if current.health == health and current.message == message:
            return False
        updated = replace(current, health=health, message=message, last_updated=int(time.time()))
        self._devices[key] = updated
        with self._lock:
            for subscriber in self._subscribers:
                subscriber.put([updated])
        for waiting in self._async_subscribers:
            waiting.put_nowait([updated])
        return True

    def get(self, *, pool: str, device: str) -> DeviceHealth | None:
        return self._devices.get((pool, device))

    def snapshot(self) -> Sequence[DeviceHealth]:
        devices = dict(self._devices)  # one copy (atomic): another thread may be changing the board
        return [devices[k] for k in sorted(devices)]

    def subscribe(self) -> queue.SimpleQueue[Sequence[DeviceHealth] | None]:
        """A queue that gets every later change (a list of the devices whose health changed); None: stop."""
        subscriber: queue.SimpleQueue[Sequence[DeviceHealth] | None] = queue.SimpleQueue()
        with self._lock:
            self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: queue.SimpleQueue[Sequence[DeviceHealth] | None]) -> None:
        with self._lock:
            self._subscribers.discard(subscriber)

    async def changes(self) -> AsyncGenerator[Sequence[DeviceHealth], None]:
        """Every later change, for a stream served in the board's event loop."""
        waiting: asyncio.Queue[Sequence[DeviceHealth]] = asyncio.Queue()
        self._async_subscribers.add(waiting)
        try:
            while True:
                yield await waiting.get()
        finally:
            self._async_subscribers.discard(waiting)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers) + len(self._async_subscribers)


def _v1(devices: Sequence[DeviceHealth]) -> h1.NodeWatchResourcesResponse:
    return h1.NodeWatchResourcesResponse(
        devices=[
            h1.DeviceHealth(
                device=h1.DeviceIdentifier(pool_name=d.pool, device_name=d.device),
                health=int(d.health),  # type: ignore[arg-type]
                last_updated_time=d.last_updated,
                health_check_timeout_seconds=d.timeout_seconds,
                message=d.message,
            )
            for d in devices
        ]
    )


def _v1alpha1(devices: Sequence[DeviceHealth]) -> h1a1.NodeWatchResourcesResponse:
    return h1a1.NodeWatchResourcesResponse(
        devices=[
            h1a1.DeviceHealth(
                device=h1a1.DeviceIdentifier(pool_name=d.pool, device_name=d.device),
                health=int(d.health),  # type: ignore[arg-type]
                last_updated_time=d.last_updated,
                health_check_timeout_seconds=d.timeout_seconds,
                message=d.message,
            )
            for d in devices
        ]
    )


def _stream(board: HealthBoard, context: grpc.ServicerContext, version: str) -> Iterator[Sequence[DeviceHealth]]:
    log.info("health stream opened", extra={"fields": {"version": version}})
    changes = board.subscribe()
    try:
        if not context.add_callback(lambda: changes.put(None)):  # wakes us when the kubelet leaves or we stop
            return  # ended already
        yield board.snapshot()
        while (batch := changes.get()) is not None:
            yield batch
    finally:
        board.unsubscribe(changes)
        log.info("health stream closed", extra={"fields": {"version": version}})


class HealthV1Servicer(h1_grpc.DRAResourceHealthServicer):
    def __init__(self, *, board: HealthBoard) -> None:
        self._board = board

    def NodeWatchResources(
        self, request: h1.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[h1.NodeWatchResourcesResponse]:
        for batch in _stream(self._board, context, "v1"):
            yield _v1(batch)


class HealthV1alpha1Servicer(h1a1_grpc.DRAResourceHealthServicer):
    def __init__(self, *, board: HealthBoard) -> None:
        self._board = board

    def NodeWatchResources(
        self, request: h1a1.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[h1a1.NodeWatchResourcesResponse]:
        for batch in _stream(self._board, context, "v1alpha1"):
            yield _v1alpha1(batch)


async def _async_stream(board: HealthBoard, version: str) -> AsyncIterator[Sequence[DeviceHealth]]:
    log.info("health stream opened", extra={"fields": {"version": version}})
    changes = board.changes()
    try:
        yield board.snapshot()
        async for batch in changes:
            yield batch
    finally:
        await changes.aclose()
        log.info("health stream closed", extra={"fields": {"version": version}})


class AsyncHealthV1Servicer(h1_grpc.DRAResourceHealthServicer):
    """For an asyncio server (a fleet's nodes)."""

    def __init__(self, *, board: HealthBoard) -> None:
        self._board = board

    async def NodeWatchResources(
        self, request: h1.NodeWatchResourcesRequest, context: aio.ServicerContext[object, object]
    ) -> AsyncIterator[h1.NodeWatchResourcesResponse]:
        async for batch in _async_stream(self._board, "v1"):
            yield _v1(batch)


class AsyncHealthV1alpha1Servicer(h1a1_grpc.DRAResourceHealthServicer):
    def __init__(self, *, board: HealthBoard) -> None:
        self._board = board

    async def NodeWatchResources(
        self, request: h1a1.NodeWatchResourcesRequest, context: aio.ServicerContext[object, object]
    ) -> AsyncIterator[h1a1.NodeWatchResourcesResponse]:
        async for batch in _async_stream(self._board, "v1alpha1"):
            yield _v1alpha1(batch)
