"""``fakedev bench`` (``make bench``): measured figures, never timed tests. Results in ``<out>/results.json``.

Measured here: slice rendering of 64 ``dgx-h100`` nodes, a warm control-plane start, the fake plugin's start-up to
registration and its RSS, and prepare/unprepare latency through the kubelet-side client against a real API server.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fakedev import __version__
from fakedev.render import bench_render
from harness.cluster.build import ETCD_VERSION, KUBERNETES_VERSION
from harness.cluster.local import local_cluster
from harness.cluster.nodes import register_node
from harness.node.background import BackgroundLoop
from harness.node.dra_client import DraConnection
from harness.node.registration import handshake
from harness.procs import wait_for
from kubeclient.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS
from kubeletapi.types import ClaimRef


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("bench", help="run the benchmarks (make bench)", description=__doc__)
    p.add_argument("--out", type=Path, default=Path("build/bench"))
    p.add_argument("--claims", type=int, default=200, help="claims for the prepare latency figures (default 200)")
    p.set_defaults(handler=_run)


def _say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _run(args: argparse.Namespace) -> int:
    results: dict[str, Any] = {
        "fakedev": __version__,
        "kubernetes": KUBERNETES_VERSION,
        "etcd": ETCD_VERSION,
        "python": platform.python_version(),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _say("rendering 64 dgx-h100 nodes (best of 5)")
    results["render_64_dgx_h100_s"] = round(min(bench_render(64) for _ in range(5)), 3)

    _say("warm control-plane start (best of 3)")
    starts = []
    for _ in range(3):
        t0 = time.monotonic()
        with local_cluster():
            starts.append(time.monotonic() - t0)
    results["control_plane_ready_s"] = round(min(starts), 2)

    with local_cluster() as cluster:
        kube = cluster.client
        register_node(kube, name="bench-node")
        root = Path(tempfile.mkdtemp(prefix="fd-"))
        argv = [
            sys.executable,
            "-m",
            "fakedev",
            "plugin",
            "--profile",
            "seed-example",
            "--node-name",
            "bench-node",
            "--kubelet-root",
            str(root / "k"),
            "--cdi-dir",
            str(root / "cdi"),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--log-level",
            "WARNING",
        ]
        _say("plugin start-up to registration")
        t0 = time.monotonic()
        plugin = subprocess.Popen(argv)
        reg_sock = root / "k" / "plugins_registry" / "gpu.example.com-reg.sock"
        wait_for(reg_sock.exists, timeout=30, what="registration socket", interval=0.005)
        loop = BackgroundLoop()
        loop.start()
        try:
            reg = loop.call(handshake(reg_sock, registered=[]))
            results["plugin_ready_s"] = round(time.monotonic() - t0, 3)
            kube.create(
                DEVICE_CLASSES,
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": "bench"},
                    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
                },
            )
            kube.create(
                RESOURCE_CLAIMS,
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": "bench"},
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "bench"}}]}},
                },
                namespace="default",
            )
            kube.create(
                PODS,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "bench"},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": "bench-node"},
                        "resourceClaims": [{"name": "gpu", "resourceClaimName": "bench"}],
                        "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
                    },
                },
                namespace="default",
            )
            wait_for(
                lambda: bool(
                    kube.get(RESOURCE_CLAIMS, "bench", namespace="default").get("status", {}).get("reservedFor")
                ),
                timeout=60,
                what="allocation",
            )
            claim = kube.get(RESOURCE_CLAIMS, "bench", namespace="default")
            ref = ClaimRef(uid=claim["metadata"]["uid"], namespace="default", name="bench")
            _say(f"prepare/unprepare latency over {args.claims} rounds of one GPU claim")

            async def make() -> DraConnection:
                return DraConnection(endpoint=reg.endpoint)

            conn = loop.call(make())
            prep, unprep = [], []
            for _ in range(args.claims):
                t = time.perf_counter()
                loop.call(conn.prepare([ref], version=reg.dra_version))
                prep.append((time.perf_counter() - t) * 1e3)
                t = time.perf_counter()
                loop.call(conn.unprepare([ref], version=reg.dra_version))
                unprep.append((time.perf_counter() - t) * 1e3)
            results |= {
                "gpu_prepare_p50_ms": round(statistics.median(prep), 2),
                "gpu_prepare_p99_ms": round(_percentile(prep, 0.99), 2),
                "gpu_unprepare_p50_ms": round(statistics.median(unprep), 2),
                "plugin_rss_mb": round(_rss_mb(plugin.pid), 1),
            }
            loop.call(conn.close())
        finally:
            loop.stop()
            plugin.terminate()
            plugin.wait(timeout=20)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    width = max(len(k) for k in results)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in results.items()))
    print(f"written to {args.out / 'results.json'}")
    return 0
