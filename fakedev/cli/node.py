"""``fakedev node``: emulated nodes (the kubelet's DRA part + pods under runc) with fake plugins, against a cluster."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from fakedev import logs
from fakedev.model.inventory import resolve_inventory
from fakedev.nics.hardware import remove as remove_hardware
from fakedev.nics.node import NodeNics, install_node_nics
from fakedev.profiles import load_profile
from fakedev.render import Schema, default_schemas
from harness.cluster import daemon
from harness.cluster.nodes import NodeHeartbeats
from harness.errors import ClusterStateError
from harness.node.drivers import DriverContext, DriverProcess, template_driver
from harness.node.emulator import NodeEmulator, NodeSettings, node_root, node_run_id
from harness.procs import default_run_base
from harness.realnode.node import RealNode, settings_for_cluster
from kubeclient import KubeClient
from kubeclient.resources import PODS
from linuxns import delete_netns

DESCRIPTION = """\
run   Emulate one or more nodes: register each Node (Ready, Lease kept fresh), start a `fakedev plugin` per
      driver of the profile (as a DaemonSet would), register it through the kubelet handshake, prepare claims of
      pods bound to the node and run their containers under runc with the CDI edits applied. Ctrl-C stops.
logs  Print a container's output (the emulated kubelet's log file for it).
Without --kubeconfig, KUBECONFIG or the cluster started by `fakedev cluster up` is used.
"""


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "node",
        help="emulated nodes running pods with fake devices",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    r = verbs.add_parser("run", help="run emulated nodes until interrupted")
    r.add_argument("--profile", required=True, help="node profile (`fakedev profile list`)")
    r.add_argument("--node-name", default=None, help="node name (one node); default: fakedev-node-0 …")
    r.add_argument("--nodes", type=int, default=1, help="how many nodes to emulate in this process (default 1)")
    r.add_argument("--kubeconfig", type=Path, default=None)
    r.add_argument("--base", type=Path, default=None, help="where node directories live (default: temp dir)")
    r.add_argument(
        "--wipe-grace",
        type=float,
        default=30.0,
        help="seconds after a driver disconnects before its slices are wiped (kubelet: 30)",
    )
    r.add_argument("--log-format", choices=logs.FORMATS, default="text")
    r.add_argument(
        "--real",
        action="store_true",
        help="run a real node instead: kubelet + containerd (built by `fakedev cluster build --with-node`) in a "
        "private mount namespace, with the profile's plugins registered into the real kubelet",
    )
    r.add_argument(
        "--address",
        default="127.0.0.1",
        help="--real: the node's loopback address, also its name (default 127.0.0.1)",
    )
    r.add_argument(
        "--ca",
        type=Path,
        default=None,
        help="--real: directory with the cluster CA (ca.crt, ca.key) to sign the kubelet's certificates; "
        "default: the pki/ next to the kubeconfig (clusters from `fakedev cluster up`)",
    )
    r.set_defaults(handler=_run)
    lg = verbs.add_parser("logs", help="print a container's output")
    lg.add_argument("pod")
    lg.add_argument("-n", "--namespace", default="default")
    lg.add_argument("-c", "--container", default=None)
    lg.add_argument("--kubeconfig", type=Path, default=None)
    lg.add_argument("--base", type=Path, default=None)
    lg.set_defaults(handler=_logs)


def kubeconfig_path(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    if os.environ.get("KUBECONFIG"):
        return Path(os.environ["KUBECONFIG"])
    try:
        return Path(daemon.read_pointer(state_dir=daemon.default_state_dir(), name="default")["kubeconfig"])
    except ClusterStateError as exc:
        raise SystemExit(
            f"fakedev node: no cluster: give --kubeconfig, set KUBECONFIG or run `fakedev cluster up` ({exc})"
        ) from exc


def plugin_command(*, profile: str, schema: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The fake plugin as the harness launches any driver: a command line with per-node placeholders."""
    return (
        sys.executable,
        "-m",
        "fakedev",
        "plugin",
        "--profile",
        profile,
        "--schema",
        schema,
        "--node-name",
        "{node}",
        "--kubelet-root",
        "{kubelet_root}",
        "--cdi-dir",
        "{cdi_dir}",
        "--kubeconfig",
        "{kubeconfig}",
        *extra,
    )


def _names(args: argparse.Namespace) -> list[str]:
    if args.node_name and args.nodes == 1:
        return [args.node_name]
    return [f"{args.node_name or 'fakedev-node'}-{i}" for i in range(args.nodes)]


def _run(args: argparse.Namespace) -> int:
    if args.real:
        return _run_real(args)
    logs.configure(fmt=args.log_format)
    import logging

    logging.getLogger("harness").handlers = logging.getLogger("fakedev").handlers
    logging.getLogger("harness").setLevel("INFO")
    kubeconfig = kubeconfig_path(args.kubeconfig)
    profile = load_profile(args.profile)
    schemas = default_schemas(resolve_inventory(profile, node_name="probe"))
    names = _names(args)
    fabric_id = node_run_id(names[0])

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        client = KubeClient.from_kubeconfig(kubeconfig)
        beats = NodeHeartbeats(client=client)
        beats.start()
        nodes, drivers = [], []
        hardware_made: list[NodeNics] = []
        try:
            for name in names:
                # The node's NICs are its hardware: made before its drivers start, on one fabric for all nodes.
                # Off the loop: pyroute2's synchronous sockets run an event loop of their own.
                nics = await asyncio.to_thread(
                    install_node_nics,
                    resolve_inventory(profile, node_name=name),
                    node_run_id=node_run_id(name),
                    fabric_run_id=fabric_id,
                )
                hardware_made.extend([nics] if nics else [])
                node = NodeEmulator(
                    settings=NodeSettings(
                        name=name,
                        base=args.base,
                        slice_wipe_grace=args.wipe_grace,
                        node_netns=nics.hardware.node_netns if nics else None,
                    ),
                    client=client,
                    heartbeats=beats,
                )
                await node.start()
                nodes.append(node)
                for schema in schemas:
                    d = DriverProcess(
                        name=f"plugin-{schema.value}",
                        spec=template_driver(
                            plugin_command(
                                profile=args.profile,
                                schema=schema.value,
                                extra=nics.plugin_args() if nics and schema == Schema.DRANET else (),
                            )
                        ),
                        context=DriverContext(
                            node=name,
                            kubelet_root=node.paths.kubelet_root,
                            cdi_dir=node.paths.cdi,
                            kubeconfig=kubeconfig,
                        ),
                        run=node.run,
                    )
                    d.start()
                    drivers.append(d)
                print(f"node {name}: {node.paths.root} ({', '.join(s.driver for s in schemas)})", flush=True)
            await stop.wait()
        finally:
            for d in drivers:
                d.stop()
            for node in nodes:
                await node.stop()
            for made in hardware_made:
                await asyncio.to_thread(remove_hardware, made.hardware)
            if hardware_made:
                await asyncio.to_thread(delete_netns, hardware_made[0].hardware.fabric_netns)
            beats.stop()

    asyncio.run(main())
    return 0


def _run_real(args: argparse.Namespace) -> int:
    if args.nodes != 1:
        raise SystemExit("fakedev node run --real: one real node per address; --nodes must be 1")
    logs.configure(fmt=args.log_format)
    kubeconfig = kubeconfig_path(args.kubeconfig)
    profile = load_profile(args.profile)
    schemas = default_schemas(resolve_inventory(profile, node_name="probe"))
    client = KubeClient.from_kubeconfig(kubeconfig)
    node = RealNode(
        settings=settings_for_cluster(
            client=client, ca_dir=args.ca or kubeconfig.parent / "pki", address=args.address, base=args.base
        )
    )
    node.start(client=client, progress=lambda step: print(f"real node {args.address}: starting {step}", flush=True))
    drivers = []
    try:
        for schema in schemas:
            d = DriverProcess(
                name=f"plugin-{schema.value}",
                spec=template_driver(plugin_command(profile=args.profile, schema=schema.value)),
                context=DriverContext(
                    node=node.name,
                    kubelet_root=node.layout.kubelet_root,
                    cdi_dir=node.layout.cdi_dir,
                    kubeconfig=kubeconfig,
                ),
                run=node.run,
            )
            d.start()
            drivers.append(d)
        print(
            f"real node {node.name}: kubelet root {node.layout.kubelet_root}, logs {node.run.path / 'logs'} "
            f"({', '.join(s.driver for s in schemas)}). Ctrl-C stops.",
            flush=True,
        )
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        stop.wait()
    finally:
        for d in drivers:
            d.stop()
        node.stop()
    return 0


def _logs(args: argparse.Namespace) -> int:
    client = KubeClient.from_kubeconfig(kubeconfig_path(args.kubeconfig))
    pod = client.get(PODS, args.pod, namespace=args.namespace)
    node = pod["spec"].get("nodeName")
    if not node:
        raise SystemExit(f"fakedev node logs: pod {args.namespace}/{args.pod} is not bound to a node yet")
    pod_dir = node_root(node, base=args.base or default_run_base()) / "emulator" / "pods" / pod["metadata"]["uid"]
    containers = [args.container] if args.container else [c["name"] for c in pod["spec"]["containers"]]
    for name in containers:
        attempts = sorted(pod_dir.glob(f"{name}-*"), key=lambda p: int(p.name.rsplit("-", 1)[1]))
        if not attempts:
            raise SystemExit(
                f"fakedev node logs: container {name} of {args.namespace}/{args.pod} has not run on "
                f"{node} (looked in {pod_dir})"
            )
        sys.stdout.write((attempts[-1] / "log").read_text(errors="replace"))
    return 0
