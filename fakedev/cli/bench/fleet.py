"""Many emulated nodes in one process: the subject of the scale benchmark (``python -m fakedev.cli.bench.fleet``).

Per node, everything a node contributes to the control plane's view: the Node (Ready, Lease renewed), an in-process
fakedev kubelet plugin (its DRA, health and registration gRPC servers on the node's own sockets, its device model and
slice publisher) and the kubelet side of plugin registration (the emulator's plugin manager: handshake, then the
health stream it keeps open). Pod containers are not run: the benchmark measures publishing and scheduling.

The process reports milestones as JSON lines on stdout (``{"event": ..., "t": <unix time>, ...}``) and runs until
SIGTERM, so the parent can read its RSS while everything is up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import resource
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar

from fakedev.cli.fleet.replica import run_bounded
from fakedev.cli.procfs import memory_mib
from fakedev.model.inventory import NodeInventory, resolve_inventory
from fakedev.plugin.app import PluginApp, PluginSettings
from fakedev.plugin.tuning import tune_for_serving
from fakedev.profiles import load_profile
from fakedev.render import RenderedNode, Schema, render_node
from harness.cluster.nodes import NodeHeartbeats, register_node
from harness.node.plugins import PluginManager
from kubeclient import KubeClient, credentials_from_kubeconfig

T = TypeVar("T")
START_CONCURRENCY: Final = 32
"""Plugins started at once; each start renders its node and opens two gRPC servers and a control socket."""
API_THREADS: Final = 16
REGISTRY_POLL_SECONDS: Final = 1.0
"""The fleet's kubelet side polls each node's registry directory instead of watching it (inotify limits)."""


def emit(event: str, **fields: Any) -> None:
    print(
        json.dumps({"event": event, "t": time.time(), "rssMiB": round(memory_mib()["VmRSS"], 1), **fields}), flush=True
    )


def node_names(*, prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i:04d}" for i in range(count)]


async def run_fleet(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    # Publishing runs in worker threads (the plugin's own asyncio.to_thread); enough of them to keep the API busy.
    loop.set_default_executor(ThreadPoolExecutor(max_workers=API_THREADS, thread_name_prefix="fleet-api"))
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    names = node_names(prefix=args.prefix, count=args.nodes)
    profile = load_profile(args.profile)
    started = time.perf_counter()
    # Each render is kept for the node's plugin: rendering twice was a sixth of the fleet's CPU (make bench).
    rendered: dict[str, tuple[NodeInventory, RenderedNode]] = {}
    for i, name in enumerate(names):
        inventory = resolve_inventory(profile, node_name=name)
        rendered[name] = (inventory, render_node(inventory, schemas=[Schema.NVIDIA]))
        # What a node's render leaves is alive for good: out of the collector's sight, or every young-generation
        # collection traverses all the nodes rendered so far again.
        gc.freeze()
        if (i + 1) % 100 == 0:
            emit("progress", what="render", done=i + 1)
    emit("rendered", nodes=len(names), seconds=time.perf_counter() - started)

    credentials = credentials_from_kubeconfig(args.kubeconfig)
    # One connection pool for the whole fleet: a client (TLS context, handshakes) per node was CPU the API
    # server needed. The plugins share one too, with their own field manager.
    client = KubeClient(credentials, field_manager="fakedev/bench-fleet", connections=API_THREADS)
    plugin_client = KubeClient(credentials, field_manager="fakedev/gpu.nvidia.com", connections=API_THREADS)
    beats = NodeHeartbeats(client=client)
    started = time.perf_counter()

    async def register(name: str) -> None:
        await asyncio.to_thread(register_node, client, name=name, labels={"fakedev.io/bench": args.prefix})

    await run_bounded(names, limit=API_THREADS, run=register)
    for name in names:
        beats.add(name)
    beats.start()
    emit("nodes-registered", nodes=len(names), seconds=time.perf_counter() - started)

    apps: list[PluginApp] = []
    managers: list[PluginManager] = []
    tasks: list[asyncio.Task[None]] = []

    async def start(name: str) -> None:
        inventory, made = rendered.pop(name)
        root = args.base / str(names.index(name))  # short: socket paths under it are limited to 107 bytes
        app = await PluginApp.build(
            PluginSettings(
                profile=args.profile,
                node_name=name,
                schema=Schema.NVIDIA,
                kubelet_root=root / "k",
                cdi_dir=root / "cdi",
                credentials=credentials,
                # A thousand watches would measure the watch cache, not the fleet (and share one client's pool).
                watch_device_faults=False,
                cache_claims=False,
                threaded_dra=False,
            ),
            client=plugin_client,
            inventory=inventory,
            rendered=made,
        )
        await app.start()
        apps.append(app)
        manager = PluginManager(
            registry_dir=root / "k" / "plugins_registry",
            on_health=lambda _d, _h: None,
            watch_directory=False,
            retry_interval=REGISTRY_POLL_SECONDS,
        )
        managers.append(manager)
        tasks.append(asyncio.create_task(manager.run(), name=f"{name}-plugins"))
        if len(apps) % 100 == 0:
            emit("progress", what="plugins", done=len(apps))

    emit("publishing")
    started = time.perf_counter()
    await run_bounded(names, limit=START_CONCURRENCY, run=start)
    emit("plugins-started", nodes=len(apps), seconds=time.perf_counter() - started)
    await asyncio.gather(*(m.wait_registered("gpu.nvidia.com", timeout=120) for m in managers))
    emit("registered", nodes=len(managers), seconds=time.perf_counter() - started)
    while not stop.is_set() and sum(1 for a in apps if a.publisher and a.publisher.synced) < len(apps):
        await asyncio.sleep(0.05)
    emit("published", nodes=len(apps), seconds=time.perf_counter() - started)

    await stop.wait()
    for task in tasks:
        task.cancel()
    for manager in managers:
        with contextlib.suppress(Exception):
            await manager.close()
    for app in apps:
        with contextlib.suppress(Exception):
            await app.stop()
    beats.stop()
    emit("stopped")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fakedev-bench-fleet", description=__doc__)
    p.add_argument("--kubeconfig", type=Path, required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--profile", default="dgx-h100")
    p.add_argument("--prefix", default="fleet")
    p.add_argument("--base", type=Path, required=True, help="a private directory for the nodes' sockets and files")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    # As in `fakedev plugin`: the event loop thread must not queue behind the API threads for the GIL.
    tune_for_serving()
    # Every node holds a few sockets and an API connection: more than the default soft limit at 1000 nodes.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        asyncio.run(run_fleet(args))
    except BaseException as exc:
        emit("failed", error=f"{type(exc).__name__}: {exc}")
        os._exit(1)  # gRPC servers and worker threads of a half-started fleet would keep a normal exit waiting
    return 0


if __name__ == "__main__":
    sys.exit(main())
