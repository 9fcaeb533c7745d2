"""``fakedev cluster serve``: a whole fake cluster in the foreground, for a container.

The local control plane (kube-apiserver listening on every address of the container at a fixed port, so that a
published port reaches it), N emulated nodes of one profile with their fake plugins (the rig, as ``fakedev node run``
composes them), a kubeconfig for the container's host, one readiness line once every Node is Ready with its slices
published, and a clean stop on SIGTERM (``docker stop``) or SIGINT.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fakedev import logs
from fakedev.cli.rig import FakeNodeRig, RigSite, RigSpec, remove_fabric
from harness.cluster.build import cached_binaries
from harness.cluster.config import ClusterSettings
from harness.cluster.local import LocalCluster, start_local_cluster
from harness.cluster.nodes import NodeHeartbeats
from harness.docker.clusterspec import READY_PREFIX
from harness.node.background import BackgroundLoop
from harness.node.layout import node_run_id
from harness.procs import wait_for
from harness.runtime.cgroupmounts import make_cgroups_writable
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import NODES, RESOURCE_SLICES

READY_LINE: Final = READY_PREFIX + " {nodes} node(s) with slices; kubeconfig at {path}"
"""Printed once, on stdout, when the cluster can be used; the testcontainers wait strategies match its prefix."""
NODE_READY_SECONDS: Final = 60.0


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    profile: str
    nodes: int
    port: int
    bind_address: str
    kubeconfig_out: Path
    base: Path | None


def render_ready_line(*, nodes: int, kubeconfig: Path) -> str:
    return READY_LINE.format(nodes=nodes, path=kubeconfig)


def node_names(count: int) -> list[str]:
    return [f"fakedev-node-{i}" for i in range(count)]


def _node_ready(node: JsonObj) -> bool:
    conditions = node.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _all_ready(client: KubeClient, names: list[str]) -> bool:
    nodes = {n["metadata"]["name"]: n for n in client.list(NODES)}
    with_slices = {s["spec"].get("nodeName") for s in client.list(RESOURCE_SLICES)}
    return all(name in nodes and _node_ready(nodes[name]) and name in with_slices for name in names)


def _write_kubeconfig(cluster: LocalCluster, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    # The admin's key is inside: readable by the owner only (docker cp and exec read it as root).
    with partial.open("w") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(cluster.portable_kubeconfig())
    partial.replace(path)


def _stderr(message: str) -> None:
    print(f"[serve] {message}", file=sys.stderr, flush=True)


def serve(options: ServeOptions) -> int:
    logs.configure(fmt="text")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if remounted := make_cgroups_writable():
        _stderr(f"cgroups made writable for runc: {', '.join(remounted)}")
    settings = ClusterSettings(apiserver_bind=options.bind_address, apiserver_port=options.port)
    cluster = start_local_cluster(settings=settings, binaries=cached_binaries(), base=options.base, progress=_stderr)
    names = node_names(options.nodes)
    fabric = node_run_id(names[0])
    beats = NodeHeartbeats(client=cluster.client)
    loop = BackgroundLoop()
    rigs: list[FakeNodeRig] = []
    try:
        _write_kubeconfig(cluster, options.kubeconfig_out)
        beats.start()
        loop.start()
        site = RigSite(
            client=cluster.client, kubeconfig=cluster.kubeconfig, loop=loop, base=options.base, heartbeats=beats
        )
        for name in names:
            if stop.is_set():
                return 0
            rigs.append(FakeNodeRig.start(RigSpec(name=name, profile=options.profile, fabric=fabric), site=site))
            _stderr(f"node {name} up ({', '.join(rigs[-1].plugins)})")
        wait_for(
            lambda: _all_ready(cluster.client, names),
            timeout=NODE_READY_SECONDS,
            what="every node Ready with its slices published",
            abort=cluster.dead_component,
        )
        print(render_ready_line(nodes=len(names), kubeconfig=options.kubeconfig_out), flush=True)
        while not stop.wait(timeout=1.0):
            if (dead := cluster.dead_component()) is not None:
                raise dead
        _stderr("stopping")
        return 0
    finally:
        for rig in reversed(rigs):
            rig.stop(drain=True)
        remove_fabric(fabric)
        loop.stop()
        beats.stop()
        cluster.stop()
