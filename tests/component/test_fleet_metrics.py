"""A fleet replica's /metrics, scraped over HTTP on 127.0.0.1 and parsed with the Prometheus client's own parser."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from fakedev import __version__
from fakedev.cli.fleet.metrics import DRA_BUCKETS, EMPTY_SNAPSHOT, PUBLISH_BUCKETS, FleetMetrics, FleetSnapshot
from harness.node.dra_manager import PREPARE_METHOD, UNPREPARE_METHOD

DOC = Path(__file__).resolve().parents[2] / "docs" / "fleets.md"
GPU = "gpu.fakedev.io"
NIC = "nic.fakedev.io"


@dataclass(kw_only=True)
class SnapshotHolder:
    """What the fleet runner does: keeps the latest frozen snapshot, handed to FleetMetrics as a bound method."""

    current: FleetSnapshot = EMPTY_SNAPSHOT

    def get(self) -> FleetSnapshot:
        return self.current


@dataclass(kw_only=True)
class Served:
    metrics: FleetMetrics
    port: int
    snapshot: SnapshotHolder = field(default_factory=SnapshotHolder)


@pytest.fixture
def serve_fleet() -> Iterator[Callable[..., Served]]:
    started: list[FleetMetrics] = []

    def start(*, fleet: str = "f1", replica: int = 0) -> Served:
        holder = SnapshotHolder()
        metrics = FleetMetrics(fleet=fleet, replica=replica, pods_mode="status", snapshot=holder.get)
        started.append(metrics)
        port = metrics.serve(address="127.0.0.1", port=0)
        return Served(metrics=metrics, port=port, snapshot=holder)

    yield start
    for metrics in started:
        metrics.close()


def scrape(port: int) -> list[Sample]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def value(samples: list[Sample], name: str, **labels: str) -> float:
    found = [s.value for s in samples if s.name == name and s.labels == labels]
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
    return found[0]


def names(samples: list[Sample]) -> set[str]:
    return {s.name for s in samples}


@pytest.mark.parametrize(("method", "verb"), [(PREPARE_METHOD, "prepare"), (UNPREPARE_METHOD, "unprepare")])
def test_dra_calls_counted_by_driver_and_result(serve_fleet: Callable[..., Served], method: str, verb: str) -> None:
    served = serve_fleet()
    for seconds, ok in [(0.003, True), (0.004, True), (0.2, False)]:
        served.metrics.observe_dra_call(method=method, driver=GPU, seconds=seconds, ok=ok)
    served.metrics.observe_dra_call(method=method, driver=NIC, seconds=0.012, ok=True)

    samples = scrape(served.port)

    requests = f"fakedev_dra_{verb}_requests_total"
    assert value(samples, requests, driver=GPU, result="ok") == 2
    assert value(samples, requests, driver=GPU, result="error") == 1
    assert value(samples, requests, driver=NIC, result="ok") == 1
    duration = f"fakedev_dra_{verb}_duration_seconds"
    assert value(samples, f"{duration}_count", driver=GPU) == 3
    assert value(samples, f"{duration}_sum", driver=GPU) == pytest.approx(0.207)
    assert value(samples, f"{duration}_bucket", driver=GPU, le="0.005") == 2
    assert value(samples, f"{duration}_bucket", driver=GPU, le="0.25") == 3
    assert value(samples, f"{duration}_count", driver=NIC) == 1


def test_dra_histogram_buckets_are_the_documented_ones(serve_fleet: Callable[..., Served]) -> None:
    served = serve_fleet()
    served.metrics.observe_dra_call(method=PREPARE_METHOD, driver=GPU, seconds=0.001, ok=True)

    bounds = [s.labels["le"] for s in scrape(served.port) if s.name == "fakedev_dra_prepare_duration_seconds_bucket"]

    assert bounds == [*(str(float(b)) for b in DRA_BUCKETS), "+Inf"]
    assert DRA_BUCKETS == (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def test_lease_renewals_counted_by_result(serve_fleet: Callable[..., Served]) -> None:
    served = serve_fleet()
    # As NodeHeartbeats.on_renew calls it.
    on_renew: Callable[[bool], None] = served.metrics.observe_lease
    for ok in [True, True, True, False]:
        on_renew(ok)

    samples = scrape(served.port)

    assert value(samples, "fakedev_fleet_lease_renewals_total", result="ok") == 3
    assert value(samples, "fakedev_fleet_lease_renewals_total", result="error") == 1


def test_publish_duration_by_driver(serve_fleet: Callable[..., Served]) -> None:
    served = serve_fleet()
    for seconds in [0.4, 0.7, 45.0]:
        served.metrics.observe_publish(driver=GPU, seconds=seconds)

    samples = scrape(served.port)

    name = "fakedev_fleet_publish_duration_seconds"
    assert value(samples, f"{name}_count", driver=GPU) == 3
    assert value(samples, f"{name}_sum", driver=GPU) == pytest.approx(46.1)
    assert value(samples, f"{name}_bucket", driver=GPU, le="1.0") == 2
    assert value(samples, f"{name}_bucket", driver=GPU, le="60.0") == 3
    bounds = [s.labels["le"] for s in samples if s.name == f"{name}_bucket"]
    assert bounds == [*(str(float(b)) for b in PUBLISH_BUCKETS), "+Inf"]


def test_state_gauges_read_from_the_snapshot_at_scrape_time(serve_fleet: Callable[..., Served]) -> None:
    served = serve_fleet()
    before = scrape(served.port)
    served.snapshot.current = FleetSnapshot(
        nodes_registered=5,
        nodes_ready=3,
        synced_by_driver=MappingProxyType({GPU: 4, NIC: 2}),
        pods_by_phase=MappingProxyType({"Running": 7, "Pending": 1}),
    )

    after = scrape(served.port)

    assert value(before, "fakedev_fleet_nodes", state="registered") == 0
    assert "fakedev_fleet_plugins_synced" not in names(before)
    assert value(after, "fakedev_fleet_nodes", state="registered") == 5
    assert value(after, "fakedev_fleet_nodes", state="ready") == 3
    assert value(after, "fakedev_fleet_plugins_synced", driver=GPU) == 4
    assert value(after, "fakedev_fleet_plugins_synced", driver=NIC) == 2
    pods = {s.labels["phase"]: s.value for s in after if s.name == "fakedev_fleet_pods"}
    assert pods == {"Pending": 1, "Running": 7, "Succeeded": 0, "Failed": 0, "Unknown": 0}


def test_info_names_the_replica(serve_fleet: Callable[..., Served]) -> None:
    served = serve_fleet(fleet="blue", replica=3)

    samples = scrape(served.port)

    labels = {"fleet": "blue", "replica": "3", "pods_mode": "status", "version": __version__}
    assert value(samples, "fakedev_fleet_info", **labels) == 1


def test_process_footprint_served(serve_fleet: Callable[..., Served]) -> None:
    samples = scrape(serve_fleet().port)

    assert value(samples, "process_resident_memory_bytes") > 0
    assert value(samples, "process_open_fds") > 0
    assert value(samples, "process_cpu_seconds_total") >= 0


def test_two_fleets_in_one_process_do_not_collide(serve_fleet: Callable[..., Served]) -> None:
    first = serve_fleet(fleet="a")
    second = serve_fleet(fleet="b")
    first.metrics.observe_lease(True)
    first.metrics.observe_dra_call(method=PREPARE_METHOD, driver=GPU, seconds=0.01, ok=True)

    seen_first = scrape(first.port)
    seen_second = scrape(second.port)

    assert first.port != second.port
    assert value(seen_first, "fakedev_fleet_lease_renewals_total", result="ok") == 1
    assert "fakedev_fleet_lease_renewals_total" not in names(seen_second)
    assert "fakedev_dra_prepare_requests_total" not in names(seen_second)
    assert value(seen_second, "fakedev_fleet_info", fleet="b", replica="0", pods_mode="status", version=__version__)


def test_close_stops_serving(serve_fleet: Callable[..., Served]) -> None:
    served = serve_fleet()
    scrape(served.port)

    served.metrics.close()

    with pytest.raises(OSError, match="Connection refused"):
        scrape(served.port)


def documented_series() -> set[str]:
    section = DOC.read_text().split("## Metrics", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.MULTILINE))


def test_doc_lists_every_series_served(serve_fleet: Callable[..., Served]) -> None:
    served = serve_fleet()
    # One observation of each labelled counter and histogram, so every family has samples.
    for method in (PREPARE_METHOD, UNPREPARE_METHOD):
        served.metrics.observe_dra_call(method=method, driver=GPU, seconds=0.01, ok=True)
    served.metrics.observe_lease(True)
    served.metrics.observe_publish(driver=GPU, seconds=1.0)
    served.snapshot.current = FleetSnapshot(
        nodes_registered=1, nodes_ready=1, synced_by_driver={GPU: 1}, pods_by_phase={}
    )

    # Histograms by their family name; the client's <name>_created gauges are covered by one sentence in the doc.
    served_names = {re.sub(r"_(bucket|count|sum)$", "", n) for n in names(scrape(served.port))}
    served_names = {n for n in served_names if not n.endswith("_created")}

    assert served_names == documented_series()
