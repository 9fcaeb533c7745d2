"""One fleet replica at run time: K emulated nodes, each with its fake plugins in this process, on one event loop.

Per node: a :class:`NodeEmulator` (the kubelet's DRA part, pod life cycle in the chosen :class:`PodMode`) and one
in-process :class:`PluginApp` per schema — real gRPC servers on the node's own sockets, registered through the
kubelet handshake, publishing slices. What the nodes share is what a process can share without changing what the
API server sees: one client for the emulators, one per driver for the plugins (their field managers differ), one
Lease renewer, one thread pool. Registry directories are polled (an inotify instance per node hits the limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol, TypeVar

from fakedev.cli.fleet.metrics import FleetSnapshot
from fakedev.cli.fleet.plan import FleetReplicaId, StopKind
from fakedev.cli.rig import pods_on_node
from fakedev.plugin.app import PluginApp, PluginSettings
from fakedev.render import Schema, SchemaPin
from harness.cluster.nodes import NodeHeartbeats, delete_node
from harness.node.dra_manager import DraObserver
from harness.node.emulator import SLICE_WIPE_GRACE, NodeEmulator, NodeSettings
from harness.node.podmode import PodMode
from kubeclient import ApiError, ApiUnavailableError, Credentials, KubeClient
from kubeclient.resources import PODS

log = logging.getLogger("fakedev.fleet")

T = TypeVar("T")
START_CONCURRENCY: Final = 8
"""Nodes started at once: each registers a Node, wipes its slices and opens its plugins' servers."""
REGISTER_SECONDS: Final = 60.0
DRAIN_SECONDS: Final = 30.0
DELETE_SECONDS: Final = 60.0
"""How long a decommission keeps retrying a Node's deletion through API throttling (429) and outages: well inside
the chart's grace period, so the replica reports what it could not delete before the kubelet kills it."""
DELETE_BACKOFF: Final = (0.2, 5.0)
DELETE_RETRY_MESSAGE: Final = "deleting a Node: the API server said later"
"""Logged for each throttled deletion that is retried (the fleet bench counts these lines)."""
REGISTRY_POLL_SECONDS: Final = 1.0
PUBLISH_POLL_SECONDS: Final = 0.1
API_CONNECTIONS: Final = 16


@dataclass(frozen=True, kw_only=True)
class FleetSpec:
    """What a replica emulates."""

    id: FleetReplicaId
    nodes: int
    profile: str
    schemas: tuple[Schema, ...]
    pod_mode: PodMode
    base: Path
    """Where the nodes' directories live (an emptyDir in a pod: a replacement starts from nothing, as after a
    power cycle, and prepares every claim again)."""
    pins: Mapping[Schema, SchemaPin] = field(default_factory=dict)
    """Schemas to imitate at a release of the real driver (``nvidia@v25.12.0``) instead of the profile's."""
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    device_faults: bool = True
    wipe_grace: float = SLICE_WIPE_GRACE


class PublishObserver(Protocol):
    """Told how long each plugin took from its start until its slices were in the API."""

    def observe_publish(self, *, driver: str, seconds: float) -> None: ...


@dataclass(kw_only=True)
class FleetNode:
    name: str
    emulator: NodeEmulator
    plugins: dict[str, PluginApp] = field(default_factory=dict)
    """Driver name → its in-process plugin."""

    def synced_drivers(self) -> set[str]:
        return {d for d, app in self.plugins.items() if app.publisher is not None and app.publisher.synced}

    def ready(self) -> bool:
        """Every plugin registered with the node's kubelet side and its slices published."""
        registered = self.emulator.plugins.connected_drivers()
        return all(d in registered for d in self.plugins) and self.synced_drivers() == set(self.plugins)


@dataclass(kw_only=True)
class FleetReplica:
    spec: FleetSpec
    credentials: Credentials
    observer: DraObserver | None = None
    publish_observer: PublishObserver | None = None
    on_lease: Callable[[bool], None] | None = None
    nodes: dict[str, FleetNode] = field(default_factory=dict)
    client: KubeClient = field(init=False)
    heartbeats: NodeHeartbeats = field(init=False)
    _plugin_clients: dict[str, KubeClient] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.client = KubeClient(self.credentials, field_manager="fakedev/fleet", connections=API_CONNECTIONS)
        self.heartbeats = NodeHeartbeats(client=self.client, on_renew=self.on_lease)

    # -- start -----------------------------------------------------------------------------------------------------

    async def start(self, *, progress: Callable[[str], None]) -> None:
        """Register every node and start its plugins; returns when each node's plugins are registered (slices publish
        in the background, the API's pace)."""
        self.heartbeats.start()
        names = self.spec.id.node_names(count=self.spec.nodes)
        await run_bounded(names, limit=START_CONCURRENCY, run=lambda name: self._start_node(name, progress=progress))

    async def _start_node(self, name: str, *, progress: Callable[[str], None]) -> None:
        s = self.spec
        emulator = NodeEmulator(
            settings=NodeSettings(
                name=name,
                base=s.base,
                labels=s.id.node_labels(extra=s.labels),
                taints=s.taints,
                slice_wipe_grace=s.wipe_grace,
                pod_mode=s.pod_mode,
                registry_poll_seconds=REGISTRY_POLL_SECONDS,
            ),
            client=self.client,
            heartbeats=self.heartbeats,
            observer=self.observer,
        )
        await emulator.start()
        node = FleetNode(name=name, emulator=emulator)
        self.nodes[name] = node
        layout = emulator.layout
        for schema in s.schemas:
            started = time.monotonic()
            app = await PluginApp.build(
                PluginSettings(
                    profile=s.profile,
                    node_name=name,
                    schema=schema,
                    pin=s.pins.get(schema),
                    kubelet_root=layout.kubelet_root,
                    cdi_dir=layout.cdi,
                    credentials=self.credentials,
                    watch_device_faults=s.device_faults,
                    # Per node, a watch of every claim and a server's polling thread: more than they would save.
                    cache_claims=False,
                    threaded_dra=False,
                ),
                client=self._plugin_client(schema.driver),
            )
            await app.start()
            node.plugins[schema.driver] = app
            self._track(asyncio.create_task(self._report_publish(app, driver=schema.driver, started=started)))
        for driver in node.plugins:
            await emulator.plugins.wait_registered(driver, timeout=REGISTER_SECONDS)
        progress(f"node {name} up ({', '.join(node.plugins)})")

    def _plugin_client(self, driver: str) -> KubeClient:
        client = self._plugin_clients.get(driver)
        if client is None:
            client = KubeClient(self.credentials, field_manager=f"fakedev/{driver}", connections=API_CONNECTIONS)
            self._plugin_clients[driver] = client
        return client

    async def _report_publish(self, app: PluginApp, *, driver: str, started: float) -> None:
        while app.publisher is not None and not app.publisher.synced:
            await asyncio.sleep(PUBLISH_POLL_SECONDS)
        if app.publisher is not None and self.publish_observer is not None:
            self.publish_observer.observe_publish(driver=driver, seconds=time.monotonic() - started)

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- what it is ------------------------------------------------------------------------------------------------

    def snapshot(self) -> FleetSnapshot:
        """The replica's state for the metrics (computed on the event loop, which owns the dicts it reads)."""
        return FleetSnapshot(
            nodes_registered=len(self.nodes),
            nodes_ready=self.ready_count(),
            synced_by_driver=self.synced_by_driver(),
            pods_by_phase=self.pods_by_phase(),
        )

    def ready_count(self) -> int:
        return sum(1 for n in list(self.nodes.values()) if n.ready())

    def pods_by_phase(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in list(self.nodes.values()):
            for worker in list(node.emulator.workers.values()):
                counts[worker.phase] = counts.get(worker.phase, 0) + 1
        return counts

    def synced_by_driver(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in list(self.nodes.values()):
            for driver in node.synced_drivers():
                counts[driver] = counts.get(driver, 0) + 1
        return counts

    # -- stop ------------------------------------------------------------------------------------------------------

    async def stop(self, kind: StopKind) -> StopReport:
        """``KUBELET_STOP``: plugins and emulators stop, the Nodes stay for the replacement. ``DECOMMISSION``: drain
        every node while its plugins can still unprepare, then delete the Nodes (their slices and Leases too).
        One node's failure neither stops the others nor goes unreported: the report names every Node left."""
        for task in list(self._tasks):
            task.cancel()
        nodes = list(self.nodes.values())
        decommission = kind is StopKind.DECOMMISSION
        if decommission:
            drained = await asyncio.gather(*(self._drain(n) for n in nodes), return_exceptions=True)
            for node, failure in zip(nodes, drained, strict=True):
                if failure is not None:  # the Node is still deleted; its pods are orphans then
                    log.warning("draining a node failed", extra={"fields": {"node": node.name, "error": repr(failure)}})
        outcomes = await asyncio.gather(
            *(self._stop_node(n, decommission=decommission) for n in nodes), return_exceptions=True
        )
        self.heartbeats.stop()
        self.nodes.clear()
        left = []
        for node, outcome in zip(nodes, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.error("stopping a node failed", extra={"fields": {"node": node.name, "error": repr(outcome)}})
            if decommission and outcome is not True:
                left.append(node.name)
        return StopReport(kind=kind, nodes=len(nodes), left=tuple(sorted(left)))

    async def _drain(self, node: FleetNode) -> None:
        pods = await asyncio.to_thread(pods_on_node, self.client, node.name)
        for pod in pods:
            with contextlib.suppress(ApiError):
                await asyncio.to_thread(
                    self.client.delete, PODS, pod["metadata"]["name"], namespace=pod["metadata"]["namespace"],
                    grace_seconds=0,
                )  # fmt: skip
        deadline = time.monotonic() + DRAIN_SECONDS
        while node.emulator.workers and time.monotonic() < deadline:
            await asyncio.sleep(PUBLISH_POLL_SECONDS)
        if node.emulator.workers:
            log.warning(
                "pods still terminating at decommission",
                extra={"fields": {"node": node.name, "pods": len(node.emulator.workers)}},
            )

    async def _stop_node(self, node: FleetNode, *, decommission: bool) -> bool:
        """Stop the node's plugins and emulator; when decommissioning, delete the Node. True: the Node is gone (or
        stays on purpose)."""
        for app in node.plugins.values():
            try:
                await app.stop()
            except Exception as exc:  # a plugin that fails to stop must not keep its Node alive
                log.warning("a plugin failed to stop", extra={"fields": {"node": node.name, "error": repr(exc)}})
        try:
            await node.emulator.stop(stop_pods=decommission)
        except Exception as exc:  # likewise for the emulator
            log.warning("the emulator failed to stop", extra={"fields": {"node": node.name, "error": repr(exc)}})
        if not decommission:
            return True
        return await asyncio.to_thread(delete_node_patiently, self.client, name=node.name)


@dataclass(frozen=True, kw_only=True)
class StopReport:
    kind: StopKind
    nodes: int
    left: tuple[str, ...]
    """Nodes a decommission could not delete (``fakedev fleet clean`` removes them)."""


def delete_node_patiently(
    client: KubeClient,
    *,
    name: str,
    seconds: float = DELETE_SECONDS,
    backoff: tuple[float, float] = DELETE_BACKOFF,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """:func:`delete_node`, retried while the API server says "later" (429, 5xx, unreachable) for up to
    ``seconds``: hundreds of Nodes decommissioned at once meet the API server's in-flight limits. False when the
    Node could not be deleted; why is logged."""
    deadline = time.monotonic() + seconds
    delay, most = backoff
    while True:
        try:
            delete_node(client, name=name)
            return True
        except ApiUnavailableError as exc:
            if time.monotonic() + delay > deadline:
                log.error("cannot delete a Node", extra={"fields": {"node": name, "error": str(exc)}})
                return False
            log.info(DELETE_RETRY_MESSAGE, extra={"fields": {"node": name, "error": str(exc)}})
        except ApiError as exc:
            log.error("cannot delete a Node", extra={"fields": {"node": name, "error": str(exc)}})
            return False
        sleep(delay)
        delay = min(delay * 2, most)


async def run_bounded(items: Sequence[T], *, limit: int, run: Callable[[T], Awaitable[None]]) -> None:
    """``run`` each item, at most ``limit`` at once."""
    gate = asyncio.Semaphore(limit)

    async def one(item: T) -> None:
        async with gate:
            await run(item)

    await asyncio.gather(*(one(i) for i in items))
