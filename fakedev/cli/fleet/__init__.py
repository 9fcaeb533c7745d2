"""``fakedev fleet``: many emulated nodes per process, as the replicas of a StatefulSet (the chart's ``fleet``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fakedev import logs
from fakedev.cli.args import add_node_shape_arguments, non_negative_count, positive_count, schema_pin

DESCRIPTION = """\
run    Emulate K nodes in this process as replica N of fleet NAME: Nodes NAME-N-0 … NAME-N-(K-1), labelled
       fakedev.io/fleet=NAME and fakedev.io/fleet-replica=N, each Ready with its Lease renewed and its fake plugins
       (one per schema, in this process, real gRPC on the node's sockets) registered and publishing slices. Pods
       bound to them have their claims prepared, then run under runc (--pods containers) or are only marked
       Running (--pods status). On SIGTERM the Nodes stay for a replacement to adopt, unless the StatefulSet no
       longer counts this replica (scaled down, uninstalled): then its pods are drained and its Nodes deleted.
drain  Scale a fleet's StatefulSet to 0 and wait until every replica has decommissioned its Nodes; with --fleet,
       then remove (and report) any Node of the fleet a replica left, killed before it finished. The chart's
       pre-delete hook runs it, so that `helm uninstall` leaves no Node behind.
clean  Delete the Nodes of a fleet (or of one replica) with their pods, slices and Leases: after a replica died
       hard and will not come back.
Without --kubeconfig (and without --in-cluster), KUBECONFIG or the cluster of `fakedev cluster up` is used.
"""


def _port(text: str) -> int:
    value = non_negative_count(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is at most 65535, got {value}")
    return value


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "fleet",
        help="many emulated nodes per process (the replicas of the chart's fleet StatefulSet)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    r = verbs.add_parser("run", help="run one replica of a fleet until SIGTERM")
    r.add_argument("--fleet", required=True, help="the fleet's name: node name prefix and fakedev.io/fleet label")
    r.add_argument("--replica", type=non_negative_count, default=0, help="this replica's ordinal (default 0)")
    r.add_argument("--nodes", type=positive_count, default=1, help="emulated nodes in this replica (default 1)")
    r.add_argument("--profile", required=True, help="node profile (`fakedev profile list`)")
    r.add_argument(
        "--schema",
        dest="schemas",
        type=schema_pin,
        action="append",
        default=[],
        metavar="SCHEMA[@RELEASE]",
        help="a plugin per node for this schema (repeatable); default: every schema the profile has devices for, "
        "except dranet (fleets plug in no NICs)",
    )
    add_node_shape_arguments(r)
    api = r.add_mutually_exclusive_group()
    api.add_argument("--kubeconfig", type=Path, default=None)
    api.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    r.add_argument("--base", type=Path, default=None, help="where node directories live (default: temp dir)")
    r.add_argument(
        "--statefulset",
        default=None,
        help="the StatefulSet this replica belongs to: at SIGTERM it tells a scale-down (decommission the nodes) "
        "from a replacement (leave them); at start, nodes of ordinals it no longer counts are removed. Without it "
        "a stop always leaves the Nodes",
    )
    r.add_argument("--namespace", default=None, help="the StatefulSet's namespace (default: the pod's, in-cluster)")
    r.add_argument("--metrics-address", default="127.0.0.1", help="where /metrics listens (default 127.0.0.1)")
    r.add_argument("--metrics-port", type=_port, default=0, help="/metrics port; 0: no metrics server (default)")
    r.add_argument(
        "--metrics-port-stride",
        type=non_negative_count,
        default=0,
        help="serve on PORT + STRIDE × replica (1 when replicas share one host network, default 0)",
    )
    r.add_argument(
        "--no-device-faults",
        dest="device_faults",
        action="store_false",
        help="do not watch DeviceFault objects (one watch per node and driver; for very large fleets)",
    )
    r.add_argument("--wipe-grace", type=float, default=30.0, help="seconds before a vanished driver's slices go")
    r.add_argument("--log-format", choices=logs.FORMATS, default="text")
    r.set_defaults(handler=_run)
    d = verbs.add_parser("drain", help="scale a fleet to 0 and wait until its replicas removed their Nodes")
    d.add_argument("--statefulset", required=True, help="the fleet's StatefulSet")
    d.add_argument("--namespace", default=None, help="its namespace (default: the pod's, in-cluster)")
    d.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the replicas (default 600)")
    d.add_argument(
        "--fleet",
        default=None,
        help="the fleet's name: once its replicas are gone, remove any of its Nodes they left (reported)",
    )
    dapi = d.add_mutually_exclusive_group()
    dapi.add_argument("--kubeconfig", type=Path, default=None)
    dapi.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    d.set_defaults(handler=_drain)
    c = verbs.add_parser("clean", help="delete a fleet's Nodes (with their pods, slices and Leases)")
    c.add_argument("--fleet", required=True)
    c.add_argument("--replica", type=non_negative_count, default=None, help="only this replica's Nodes")
    c.add_argument("--kubeconfig", type=Path, default=None)
    c.set_defaults(handler=_clean)


def _run(args: argparse.Namespace) -> int:
    from fakedev.cli.fleet.run import run_replica

    return run_replica(args)


def _drain(args: argparse.Namespace) -> int:
    from fakedev.cli.fleet.run import drain_fleet

    return drain_fleet(args)


def _clean(args: argparse.Namespace) -> int:
    from fakedev.cli.fleet.run import clean_fleet

    return clean_fleet(args)
