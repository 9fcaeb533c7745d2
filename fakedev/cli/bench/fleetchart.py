"""The ``fleet`` bench section: a fleet installed with the chart on fakedev's real node, as a cluster would run it.

R replicas × K dgx-h100 nodes (nvidia schema, status mode) from ``helm install``: how long until every Node is Ready
with its slices, what each replica costs (RSS and CPU from its own ``/metrics``: the process collector), what the API
server spent, and how long ``helm uninstall`` takes to drain the fleet. The one-process figures (``nodes_N_*``) are
the same nodes without Kubernetes around them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from prometheus_client.parser import text_string_to_metric_families

from fakedev import __version__
from fakedev.cli.fleet.replica import DELETE_RETRY_MESSAGE
from fakedev.cli.procfs import cpu_seconds
from harness.cluster.build import default_cache_root, helm_binary
from harness.cluster.local import LocalCluster
from harness.image.assemble import build_image
from harness.procs import wait_for
from harness.realnode.node import RealNode, settings_for_cluster
from kubeclient import KubeClient
from kubeclient.resources import NODES, PODS

REAL_NODE_ADDRESS: Final = "127.0.0.20"
RELEASE: Final = "benchfleet"
NAMESPACE: Final = "fakedev-bench-fleet"
FLEET: Final = f"{RELEASE}-fakedev"
FLEET_PODS: Final = "app.kubernetes.io/component=fleet"
CHART_DIR: Final = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "fakedev"
PROJECT_ROOT: Final = Path(__file__).resolve().parents[3]
FOLLOW_SECONDS: Final = 900.0
STEADY_SECONDS: Final = 60.0
"""The steady-state window after every node is Ready: six Lease renewals per node."""


def _helm(*args: str) -> None:
    with tempfile.TemporaryDirectory(prefix="fakedev-helm-") as home:
        done = subprocess.run(
            [str(helm_binary()), *args],
            capture_output=True,
            text=True,
            timeout=900,
            env={"HOME": home, "PATH": os.environ.get("PATH", "")},
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"helm {args[0]} failed: {done.stderr.strip()}")


def _free_ports(count: int) -> int:
    """A port P with P … P+count-1 free on 127.0.0.1 (replica N serves metrics on P + N)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base: int = probe.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            for port in range(base + 1, base + count):
                with socket.socket() as other:
                    other.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1")


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        s.name + "".join(f"|{k}={v}" for k, v in sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _etcd_bytes(port: int) -> float:
    """etcd's logical database size (bytes in use, compaction aside): what the fleet's objects add to it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "etcd_mvcc_db_total_size_in_use_in_bytes":
                return float(sample.value)
    raise RuntimeError("etcd's /metrics has no etcd_mvcc_db_total_size_in_use_in_bytes")


def _ready_nodes(kube: KubeClient) -> int:
    nodes = kube.list(NODES, label_selector=f"fakedev.io/fleet={FLEET}")
    return sum(
        1
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
    )


def _published(port: int, *, replicas: int) -> int:
    """Nodes whose every plugin registered and whose slices are synced, as each replica counts them: listing the
    slices themselves (~250 KB per dgx-h100 node) every half second would be the load being measured."""
    total = 0
    for ordinal in range(replicas):
        with suppress(OSError):  # not serving yet
            total += int(_scrape(port + ordinal).get("fakedev_fleet_nodes|state=ready", 0))
    return total


def _drain_logs(kube: KubeClient) -> str:
    """What the uninstall hook's pods said (a failed hook Job stays for this)."""
    said = []
    for pod in kube.list(PODS, namespace=NAMESPACE):
        name = pod["metadata"]["name"]
        said.append(f"--- {name}:\n{kube.get_text(f'/api/v1/namespaces/{NAMESPACE}/pods/{name}/log')[1][-3000:]}")
    return "\n".join(said)


@dataclass(kw_only=True)
class ReplicaLogs:
    """Each replica's log followed to its end (the container's exit), so what a replica said while it
    decommissioned is kept after its pod is gone."""

    kube: KubeClient
    said: dict[str, str] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)

    def follow(self, pods: list[str]) -> None:
        for name in pods:
            thread = threading.Thread(target=self._follow, args=(name,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _follow(self, name: str) -> None:
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/log?container=fleet&follow=true"
        with suppress(Exception):
            self.said[name] = self.kube.get_text(path, timeout=FOLLOW_SECONDS)[1]

    def wait(self) -> None:
        for thread in self.threads:
            thread.join(timeout=FOLLOW_SECONDS)


def measure_chart_fleet(
    results: dict[str, Any], *, cluster: LocalCluster, replicas: int, per_replica: int, say: Callable[[str], None]
) -> None:
    kube = cluster.client
    total = replicas * per_replica
    key = f"fleet_chart_{replicas}x{per_replica}"
    image = build_image(
        project_root=PROJECT_ROOT,
        version=__version__,
        out_dir=Path(tempfile.mkdtemp(prefix="fakedev-bench-image-")),
        cache_root=default_cache_root(),
        progress=lambda message: say(f"image: {message}"),
    )
    node = RealNode(
        settings=settings_for_cluster(
            client=kube, ca_dir=cluster.layout.pki, address=REAL_NODE_ADDRESS, lock_timeout=600
        )
    )
    node.start(client=kube)
    port = _free_ports(replicas)
    base_args = ["--kubeconfig", str(cluster.kubeconfig), "--namespace", NAMESPACE]
    try:
        node.import_image(image.archive)
        say(f"fleet from the chart: {replicas} replicas × {per_replica} dgx-h100 nodes on real node {node.name}")
        apiserver = cluster.processes["kube-apiserver"].pid
        etcd_port = cluster.ports.etcd_client
        etcd_before = _etcd_bytes(etcd_port)
        before = cpu_seconds(apiserver)
        started = time.monotonic()
        _helm(
            "install", RELEASE, str(CHART_DIR), "--create-namespace", *base_args,
            "--set", "image.pullPolicy=Never",
            "--set", "apiServer.host=127.0.0.1",
            "--set", f"apiServer.port={cluster.ports.apiserver}",
            "--set", "plugins.enabled=false",
            "--set", "fleet.enabled=true",
            "--set", f"fleet.replicas={replicas}",
            "--set", f"fleet.nodesPerReplica={per_replica}",
            "--set", "fleet.profile=dgx-h100",
            "--set", "fleet.pods=status",
            "--set", "fleet.metrics.address=127.0.0.1",
            "--set", f"fleet.metrics.port={port}",
            "--set", f"fleet.nodeSelector.kubernetes\\.io/hostname={node.name}",
        )  # fmt: skip
        last = [-1]

        def progress() -> bool:
            done = min(_ready_nodes(kube), _published(port, replicas=replicas))
            if done // 50 != last[0] // 50:
                say(f"fleet from the chart: {done}/{total} nodes Ready with slices")
            last[0] = done
            return done == total

        wait_for(progress, timeout=1800, what=f"{total} fleet nodes Ready with slices", interval=1.0)
        publish_s = time.monotonic() - started
        apiserver_cpu = cpu_seconds(apiserver) - before
        scraped = [_scrape(port + r) for r in range(replicas)]
        rss_mib = [s["process_resident_memory_bytes"] / 2**20 for s in scraped]
        cpu_s = [s["process_cpu_seconds_total"] for s in scraped]
        results[f"{key}_publish_s"] = round(publish_s, 1)
        results[f"{key}_replica_rss_mib"] = round(max(rss_mib), 1)
        results[f"{key}_rss_mib"] = round(sum(rss_mib), 1)
        results[f"{key}_cpu_s"] = round(sum(cpu_s), 2)
        results[f"{key}_apiserver_cpu_s"] = round(apiserver_cpu, 2)
        results[f"{key}_rss_mib_per_node"] = round(sum(rss_mib) / total, 2)
        results[f"{key}_cpu_s_per_node"] = round(sum(cpu_s) / total, 3)
        results[f"{key}_apiserver_cpu_s_per_node"] = round(apiserver_cpu / total, 3)
        say(
            f"fleet from the chart: {total} nodes Ready with slices {publish_s:.1f}s after helm install; replica RSS "
            f"{max(rss_mib):.0f} MiB ({sum(rss_mib) / total:.1f} MiB per node), kube-apiserver "
            f"{apiserver_cpu / total:.3f} CPU-s per node"
        )
        # Steady state: nothing changes but Lease renewals (every 10 s per node) and the watches' bookmarks.
        steady_api, steady_replicas = (
            cpu_seconds(apiserver),
            sum(_scrape(port + r)["process_cpu_seconds_total"] for r in range(replicas)),
        )
        steady_started = time.monotonic()
        time.sleep(STEADY_SECONDS)  # a measurement window, not a wait for a condition
        minutes = (time.monotonic() - steady_started) / 60
        steady_api = cpu_seconds(apiserver) - steady_api
        steady_replicas = sum(_scrape(port + r)["process_cpu_seconds_total"] for r in range(replicas)) - steady_replicas
        results[f"{key}_steady_apiserver_cpu_s_per_node_min"] = round(steady_api / total / minutes, 4)
        results[f"{key}_steady_cpu_s_per_node_min"] = round(steady_replicas / total / minutes, 4)
        etcd_kib = (_etcd_bytes(etcd_port) - etcd_before) / 1024 / total
        results[f"{key}_etcd_kib_per_node"] = round(etcd_kib, 1)
        say(
            f"fleet from the chart: steady state per node and minute: kube-apiserver "
            f"{steady_api / total / minutes:.4f} CPU-s, replicas {steady_replicas / total / minutes:.4f} CPU-s; "
            f"etcd {etcd_kib:.1f} KiB per node"
        )
        logs = ReplicaLogs(kube=kube)
        logs.follow([p["metadata"]["name"] for p in kube.list(PODS, namespace=NAMESPACE, label_selector=FLEET_PODS)])
        started = time.monotonic()
        try:
            _helm("uninstall", RELEASE, *base_args, "--timeout", "15m")
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{_drain_logs(kube)}") from exc
        logs.wait()
        # Every replica must have deleted its own Nodes; the hook's sweep after a killed one is a defect to report.
        short = {n: t for n, t in logs.said.items() if f"decommissioned {per_replica} Node(s)" not in t}
        results[f"{key}_replicas_decommissioned"] = len(logs.said) - len(short)
        results[f"{key}_node_delete_retries"] = sum(t.count(DELETE_RETRY_MESSAGE) for t in logs.said.values())
        for name, text in sorted(short.items()):
            say(f"fleet from the chart: replica {name} did not decommission all its Nodes; its last lines:")
            say("\n".join(text.splitlines()[-15:]))
        wait_for(
            lambda: not kube.list(NODES, label_selector=f"fakedev.io/fleet={FLEET}"),
            timeout=600,
            what="the fleet's Nodes gone after uninstall",
        )
        results[f"{key}_uninstall_s"] = round(time.monotonic() - started, 1)
        say(f"fleet from the chart: uninstalled (drained) in {results[f'{key}_uninstall_s']}s")
    finally:
        with suppress(Exception):
            _helm("uninstall", RELEASE, *base_args, "--no-hooks")
        with suppress(Exception):
            for leftover in kube.list(PODS, namespace=NAMESPACE):
                kube.delete(PODS, leftover["metadata"]["name"], namespace=NAMESPACE, grace_seconds=0)
        node.stop()


def record_marginal(results: dict[str, Any], *, replicas: int, sizes: list[int]) -> None:
    """What one more emulated node costs, from the smallest and the largest fleet (a replica's fixed cost — Python,
    gRPC, the image's imports — cancels out)."""
    if len(sizes) < 2:
        return
    small, big = min(sizes), max(sizes)
    added = replicas * (big - small)
    if added <= 0:
        return
    for figure, unit in (("rss_mib", "rss_mib"), ("cpu_s", "cpu_s"), ("apiserver_cpu_s", "apiserver_cpu_s")):
        low = results.get(f"fleet_chart_{replicas}x{small}_{figure}")
        high = results.get(f"fleet_chart_{replicas}x{big}_{figure}")
        if isinstance(low, (int, float)) and isinstance(high, (int, float)):
            results[f"fleet_chart_marginal_{unit}_per_node"] = round((high - low) / added, 3)
