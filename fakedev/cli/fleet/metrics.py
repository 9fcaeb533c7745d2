"""The Prometheus metrics of one fleet replica, served on `/metrics` from a daemon thread.

Every `FleetMetrics` owns its registry (never prometheus_client's global one), so several fleets and tests share a
process without colliding. Counters and histograms are fed by the emulators' hooks (`DraObserver`,
`NodeHeartbeats.on_renew`, `observe_publish`); the gauges describing the fleet's state are read at scrape time from
a `FleetSnapshot` callback instead of being pushed, so they are never staler than the scrape. The series are listed
in docs/fleets.md ("Metrics"), which a test keeps in step with what is served.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from fakedev import __version__
from harness.node.dra_manager import PREPARE_METHOD, UNPREPARE_METHOD

DRA_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Seconds of one NodePrepare/NodeUnprepareResources call: the repo measured p50 6–16 ms and p99 20–35 ms for the
fake GPU and NIC, ~200 ms through the example driver's default client; injected delays beyond 10 s land in +Inf."""
PUBLISH_BUCKETS: Final = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Seconds from a plugin's start to its ResourceSlices synced: under a second alone, minutes when 100 nodes start."""

POD_PHASES: Final = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
"""Always served (0 when empty) so a dashboard's series do not appear and vanish with the pods."""

OK: Final = "ok"
ERROR: Final = "error"


@dataclass(frozen=True, kw_only=True)
class FleetSnapshot:
    """The replica's state at one scrape, as the fleet runner sees it."""

    nodes_registered: int
    """This replica's emulated nodes whose Node object the emulator created or adopted."""
    nodes_ready: int
    """Of those, the nodes every plugin of which registered with the emulated kubelet and has its slices synced."""
    synced_by_driver: Mapping[str, int]
    """driver → this replica's plugins of that driver whose ResourceSlices are synced."""
    pods_by_phase: Mapping[str, int]
    """pod phase → pods bound to this replica's nodes."""


EMPTY_SNAPSHOT: Final = FleetSnapshot(
    nodes_registered=0, nodes_ready=0, synced_by_driver=MappingProxyType({}), pods_by_phase=MappingProxyType({})
)


class _SnapshotCollector:
    """The state gauges, computed from the runner's snapshot when Prometheus scrapes (on the server's thread)."""

    def __init__(self, snapshot: Callable[[], FleetSnapshot]) -> None:
        self._snapshot = snapshot

    def describe(self) -> Iterable[Metric]:
        # Declares the names without calling the snapshot at registration time (the runner may not be up yet).
        return list(self._families(EMPTY_SNAPSHOT))

    def collect(self) -> Iterable[Metric]:
        return list(self._families(self._snapshot()))

    @staticmethod
    def _families(snap: FleetSnapshot) -> Iterator[Metric]:
        nodes = GaugeMetricFamily("fakedev_fleet_nodes", "Emulated nodes of this replica, by state.", labels=["state"])
        for state, count in (("registered", snap.nodes_registered), ("ready", snap.nodes_ready)):
            nodes.add_metric([state], count)
        yield nodes
        synced = GaugeMetricFamily(
            "fakedev_fleet_plugins_synced",
            "Plugins of this replica whose ResourceSlices are synced.",
            labels=["driver"],
        )
        for driver, count in sorted(snap.synced_by_driver.items()):
            synced.add_metric([driver], count)
        yield synced
        pods = GaugeMetricFamily(
            "fakedev_fleet_pods", "Pods bound to this replica's nodes, by phase.", labels=["phase"]
        )
        for phase in sorted({*POD_PHASES, *snap.pods_by_phase}):
            pods.add_metric([phase], snap.pods_by_phase.get(phase, 0))
        yield pods


@dataclass(frozen=True, kw_only=True)
class _DraSeries:
    requests: Counter
    duration: Histogram


class FleetMetrics:
    """The metrics of one replica; a `DraObserver` for its emulators and an `on_renew` for its heartbeats.

    `snapshot` is called on the HTTP server's thread at every scrape: it must be safe to call from there (returning
    the latest frozen `FleetSnapshot` the event loop stored in an attribute is, since a reference read is atomic).
    """

    def __init__(
        self,
        *,
        fleet: str,
        replica: int,
        pods_mode: str,
        snapshot: Callable[[], FleetSnapshot],
        version: str = __version__,
    ) -> None:
        self.registry = CollectorRegistry()
        # The process's own footprint (RSS, CPU, open fds) and Python version: what sizing a replica needs.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.registry.register(_SnapshotCollector(snapshot))
        info = Gauge(
            "fakedev_fleet_info",
            "Always 1; labels say which fleet replica this is.",
            ["fleet", "replica", "pods_mode", "version"],
            registry=self.registry,
        )
        info.labels(fleet=fleet, replica=str(replica), pods_mode=pods_mode, version=version).set(1)
        self._dra: Mapping[str, _DraSeries] = {
            PREPARE_METHOD: self._dra_series("prepare", PREPARE_METHOD),
            UNPREPARE_METHOD: self._dra_series("unprepare", UNPREPARE_METHOD),
        }
        self._renewals = Counter(
            "fakedev_fleet_lease_renewals",
            "Node Lease renewals by the emulated kubelets of this replica.",
            ["result"],
            registry=self.registry,
        )
        self._publish = Histogram(
            "fakedev_fleet_publish_duration_seconds",
            "Seconds from a plugin's start to its ResourceSlices synced.",
            ["driver"],
            buckets=PUBLISH_BUCKETS,
            registry=self.registry,
        )
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def _dra_series(self, verb: str, method: str) -> _DraSeries:
        # prometheus_client appends _total to a counter's name itself.
        return _DraSeries(
            requests=Counter(
                f"fakedev_dra_{verb}_requests",
                f"{method} calls the emulated kubelets made, by driver and result.",
                ["driver", "result"],
                registry=self.registry,
            ),
            duration=Histogram(
                f"fakedev_dra_{verb}_duration_seconds",
                f"Seconds of one {method} call, errors included.",
                ["driver"],
                buckets=DRA_BUCKETS,
                registry=self.registry,
            ),
        )

    def observe_dra_call(self, *, method: str, driver: str, seconds: float, ok: bool) -> None:
        series = self._dra[method]
        series.requests.labels(driver=driver, result=OK if ok else ERROR).inc()
        series.duration.labels(driver=driver).observe(seconds)

    def observe_lease(self, ok: bool) -> None:  # noqa: FBT001 — NodeHeartbeats.on_renew calls it positionally
        self._renewals.labels(result=OK if ok else ERROR).inc()

    def observe_publish(self, *, driver: str, seconds: float) -> None:
        self._publish.labels(driver=driver).observe(seconds)

    def serve(self, *, address: str, port: int) -> int:
        """Serve `/metrics` on address:port (0: any free port) from a daemon thread; returns the bound port."""
        if self._server is not None:
            raise RuntimeError("FleetMetrics.serve called twice")
        self._server, self._thread = start_http_server(port, addr=address, registry=self.registry)
        return int(self._server.server_address[1])

    def close(self) -> None:
        """Stop the server (if serving) and wait for its thread."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = None
        self._thread = None
