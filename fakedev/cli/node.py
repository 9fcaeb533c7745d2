"""``fakedev node``: emulated nodes (the kubelet's DRA part + pods under runc) with fake plugins, against a cluster."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from fakedev import logs
from fakedev.cli.args import add_node_shape_arguments, kubeconfig_path
from fakedev.cli.realrig import RealNodeRig
from fakedev.cli.rig import FakeNodeRig, RigSite, RigSpec, remove_fabric
from harness.cluster.nodes import NodeHeartbeats
from harness.node.background import BackgroundLoop
from harness.node.layout import NodeLayout, node_run_id
from harness.node.podmode import PodMode
from harness.realnode.node import settings_for_cluster
from kubeclient import KubeClient, credentials_in_cluster
from kubeclient.resources import PODS

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
    add_node_shape_arguments(r)
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
        help="run a real node instead: kubelet + containerd + runc 1.5 (built by `fakedev cluster build "
        "--with-node`) in a private mount namespace, with the profile's NICs plugged in and its plugins registered "
        "into the real kubelet; pods run unchanged (a CNI pod network, images by name from the node's own "
        "registry, NIC claims moved into pods by runc)",
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
    where = lg.add_mutually_exclusive_group()
    where.add_argument("--kubeconfig", type=Path, default=None)
    where.add_argument(
        "--in-cluster", action="store_true", help="use the pod's service account (inside a fleet replica's pod)"
    )
    lg.add_argument("--base", type=Path, default=None, help="where node directories live (a fleet's --base)")
    lg.set_defaults(handler=_logs)


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
    kubeconfig = kubeconfig_path(args.kubeconfig, command="node run")
    names = _names(args)
    fabric = node_run_id(names[0])  # one fabric for every node of this process
    client = KubeClient.from_kubeconfig(kubeconfig)
    beats = NodeHeartbeats(client=client)
    beats.start()
    loop = BackgroundLoop()
    loop.start()
    site = RigSite(client=client, kubeconfig=kubeconfig, loop=loop, base=args.base, heartbeats=beats)
    stop = _stop_on_signals()
    rigs: list[FakeNodeRig] = []
    try:
        for name in names:
            rig = FakeNodeRig.start(
                RigSpec(
                    name=name,
                    profile=args.profile,
                    fabric=fabric,
                    wipe_grace=args.wipe_grace,
                    labels=dict(args.labels),
                    taints=tuple(args.taints),
                    pod_mode=PodMode(args.pods),
                    # Nothing would move NICs into pods that run no containers.
                    with_nics=PodMode(args.pods) is PodMode.CONTAINERS,
                ),
                site=site,
            )
            rigs.append(rig)
            print(f"node {name}: {rig.layout.root} ({', '.join(rig.plugins)})", flush=True)
        stop.wait()
    finally:
        # A kubelet stop: the Nodes stay (NotReady once their Leases age) and containers keep running; a later
        # `fakedev node run` with the same names adopts them.
        for rig in rigs:
            rig.stop(decommission=False)
        remove_fabric(fabric)
        loop.stop()
        beats.stop()
    return 0


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _run_real(args: argparse.Namespace) -> int:
    if args.nodes != 1:
        raise SystemExit("fakedev node run --real: one real node per address; --nodes must be 1")
    if args.pods != PodMode.CONTAINERS.value:
        raise SystemExit(
            "fakedev node run --real: a real kubelet runs pods' containers; --pods status is emulated only"
        )
    logs.configure(fmt=args.log_format)
    kubeconfig = kubeconfig_path(args.kubeconfig, command="node run")
    client = KubeClient.from_kubeconfig(kubeconfig)
    rig = RealNodeRig.start(
        profile=args.profile,
        settings=settings_for_cluster(
            client=client, ca_dir=args.ca or kubeconfig.parent / "pki", address=args.address, base=args.base
        ),
        client=client,
        kubeconfig=kubeconfig,
        progress=lambda step: print(f"real node {args.address}: starting {step}", flush=True),
    )
    try:
        node = rig.node
        nics = f", NICs in netns {node.settings.nic_netns}" if node.settings.nic_netns else ""
        print(
            f"real node {node.name}: kubelet root {node.layout.kubelet_root}, logs {node.run.path / 'logs'} "
            f"({', '.join(rig.plugins)}{nics}). Ctrl-C stops.",
            flush=True,
        )
        _stop_on_signals().wait()
    finally:
        rig.stop()
    return 0


def _logs(args: argparse.Namespace) -> int:
    if args.in_cluster:
        client = KubeClient(credentials_in_cluster())
    else:
        client = KubeClient.from_kubeconfig(kubeconfig_path(args.kubeconfig, command="node logs"))
    # A list by name, not a GET: a fleet replica's ServiceAccount may list pods but not get them.
    found = client.list(PODS, namespace=args.namespace, field_selector=f"metadata.name={args.pod}")
    if not found:
        raise SystemExit(f"fakedev node logs: no pod {args.namespace}/{args.pod}")
    pod = found[0]
    node = pod["spec"].get("nodeName")
    if not node:
        raise SystemExit(f"fakedev node logs: pod {args.namespace}/{args.pod} is not bound to a node yet")
    files = NodeLayout.for_node(node, base=args.base).pod(pod["metadata"]["uid"])
    containers = [args.container] if args.container else [c["name"] for c in pod["spec"]["containers"]]
    for name in containers:
        text = files.latest_log(name)
        if text is None:
            raise SystemExit(
                f"fakedev node logs: container {name} of {args.namespace}/{args.pod} has not run on "
                f"{node} (looked in {files.dir}; a node run with --pods status runs no containers, so it has no logs)"
            )
        sys.stdout.write(text)
    return 0
