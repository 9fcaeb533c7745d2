"""The ``fakedev fleet run`` and ``fakedev fleet clean`` commands: arguments in, a replica run until SIGTERM out."""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import resource
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fakedev import logs
from fakedev.cli.args import kubeconfig_path
from fakedev.cli.fleet.clean import fleet_node_names, remove_nodes
from fakedev.cli.fleet.metrics import EMPTY_SNAPSHOT, FleetMetrics, FleetSnapshot
from fakedev.cli.fleet.plan import (
    FleetReplicaId,
    StopKind,
    compute_metrics_port,
    compute_stop_kind,
    fleet_selector,
    select_orphans,
)
from fakedev.cli.fleet.replica import FleetReplica, FleetSpec
from fakedev.errors import ProfileError
from fakedev.model.inventory import resolve_inventory
from fakedev.plugin.tuning import tune_for_serving
from fakedev.profiles import load_profile
from fakedev.render import Schema, SchemaPin, default_schemas
from harness.node.podmode import PodMode
from kubeclient import (
    ApiError,
    ApiUnavailableError,
    Credentials,
    KubeClient,
    credentials_from_kubeconfig,
    credentials_in_cluster,
)
from kubeclient.resources import NODES, PODS, STATEFUL_SETS

log = logging.getLogger("fakedev.fleet")

IN_CLUSTER_NAMESPACE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
EXECUTOR_THREADS: Final = 64
DRAIN_POLL_SECONDS: Final = 1.0
STOP_READ_SECONDS: Final = 45.0
"""How long a stopping replica keeps asking for its StatefulSet (the chart's grace period is 120 s)."""
RETRY_SECONDS: Final = 2.0
SNAPSHOT_SECONDS: Final = 2.0
"""How long a scrape waits for the event loop to read the replica's state."""
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NODE_NAME_MAX: Final = 63
"""A Node's name is also its ``kubernetes.io/hostname`` label value: 63 characters at most."""


class FleetUsageError(ProfileError):
    """A fleet's arguments that cannot work (said before anything is registered)."""


def compute_schemas(*, profile: str, requested: list[tuple[Schema, SchemaPin]]) -> tuple[Schema, ...]:
    inventory = resolve_inventory(load_profile(profile), node_name="fleet-check")
    present = default_schemas(inventory)
    chosen = tuple(s for s, _p in requested) or tuple(s for s in present if s is not Schema.DRANET)
    if Schema.DRANET in chosen:
        raise FleetUsageError("fakedev fleet run: --schema dranet: fleets plug in no NICs; use `fakedev node run`")
    missing = [s.value for s in chosen if s not in present]
    if missing:
        raise FleetUsageError(
            f"fakedev fleet run: profile {profile} has no devices for {', '.join(missing)} "
            f"(it has: {', '.join(s.value for s in present) or 'none'})"
        )
    if not chosen:
        raise FleetUsageError(f"fakedev fleet run: profile {profile} has no devices a fleet can serve (no NICs)")
    return chosen


def _check_names(me: FleetReplicaId, *, nodes: int) -> None:
    if not _DNS_LABEL.match(me.fleet):
        raise FleetUsageError(
            f"fakedev fleet run: --fleet {me.fleet!r}: lower-case letters, digits and '-' only (a node name prefix)"
        )
    longest = me.node_names(count=nodes)[-1]
    if len(longest) > NODE_NAME_MAX:
        raise FleetUsageError(
            f"fakedev fleet run: node name {longest} is longer than {NODE_NAME_MAX} characters; shorten --fleet"
        )


def _credentials(args: argparse.Namespace, *, command: str) -> Credentials:
    if getattr(args, "in_cluster", False):
        return credentials_in_cluster()
    return credentials_from_kubeconfig(kubeconfig_path(args.kubeconfig, command=command))


def _namespace(args: argparse.Namespace) -> str | None:
    if args.namespace:
        return str(args.namespace)
    if args.in_cluster and IN_CLUSTER_NAMESPACE.exists():
        return IN_CLUSTER_NAMESPACE.read_text().strip()
    return None


def run_replica(args: argparse.Namespace) -> int:
    logs.configure(fmt=args.log_format)
    logging.getLogger("harness").handlers = logging.getLogger("fakedev").handlers
    logging.getLogger("harness").setLevel("INFO")
    me = FleetReplicaId(fleet=args.fleet, replica=args.replica)
    _check_names(me, nodes=args.nodes)
    namespace = _namespace(args)
    if args.statefulset and namespace is None:
        raise FleetUsageError("fakedev fleet run: --statefulset needs --namespace (or --in-cluster)")
    spec = FleetSpec(
        id=me,
        nodes=args.nodes,
        profile=args.profile,
        schemas=compute_schemas(profile=args.profile, requested=args.schemas),
        pins={s: p for s, p in args.schemas if p.release is not None},
        pod_mode=PodMode(args.pods),
        base=args.base,
        labels=dict(args.labels),
        taints=tuple(args.taints),
        device_faults=args.device_faults,
        wipe_grace=args.wipe_grace,
    )
    credentials = _credentials(args, command="fleet run")
    # Every node holds sockets and API connections: more than the default soft limit at a few hundred nodes.
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    statefulset = (namespace, str(args.statefulset)) if args.statefulset and namespace else None
    tune_for_serving()  # many plugins in one process: GIL hand-over and the collector's cost, as in the bench's
    metrics = MetricsPlace(
        address=args.metrics_address,
        port=compute_metrics_port(base=args.metrics_port, stride=args.metrics_port_stride, replica=args.replica),
    )
    return asyncio.run(_serve(spec, credentials=credentials, statefulset=statefulset, metrics=metrics))


def _statefulset_replicas_patiently(client: KubeClient, *, where: tuple[str, str] | None) -> int | None:
    """:func:`_statefulset_replicas` at SIGTERM, retried while the API server does not answer: at an uninstall every
    replica asks at once while hundreds of Nodes are being drained, and a replica that cannot tell a scale-down from
    a replacement keeps its Nodes."""
    deadline = time.monotonic() + STOP_READ_SECONDS
    while True:
        try:
            return _statefulset_replicas(client, where=where)
        except ApiUnavailableError as exc:
            if time.monotonic() + RETRY_SECONDS > deadline:
                raise
            log.warning("reading the StatefulSet at stop: trying again", extra={"fields": {"error": str(exc)}})
            time.sleep(RETRY_SECONDS)


@dataclass(frozen=True, kw_only=True)
class MetricsPlace:
    address: str
    port: int
    """0: no metrics server."""


def _statefulset_replicas(client: KubeClient, *, where: tuple[str, str] | None) -> int | None:
    """``spec.replicas`` of the StatefulSet (None: it is gone). Other API errors propagate."""
    if where is None:
        return None
    namespace, name = where
    found = client.get_or_none(STATEFUL_SETS, name, namespace=namespace)
    if found is None:
        return None
    return int((found.get("spec") or {}).get("replicas", 1))


async def _serve(
    spec: FleetSpec, *, credentials: Credentials, statefulset: tuple[str, str] | None, metrics: MetricsPlace
) -> int:
    loop = asyncio.get_running_loop()
    # Emulators and plugins run API calls in threads; enough of them for K nodes' pods and publishers.
    loop.set_default_executor(ThreadPoolExecutor(max_workers=EXECUTOR_THREADS, thread_name_prefix="fleet"))
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    me = spec.id
    who = f"fleet {me.fleet} replica {me.replica}"
    latest: list[FleetSnapshot] = [EMPTY_SNAPSHOT]

    async def take_snapshot() -> FleetSnapshot:
        return replica.snapshot()

    def snapshot() -> FleetSnapshot:
        """Called on the metrics server's thread: the state is read on the loop that owns it; a loop too busy to
        answer in time gets the previous answer served rather than a failed scrape."""
        future = asyncio.run_coroutine_threadsafe(take_snapshot(), loop)
        try:
            latest[-1] = future.result(timeout=SNAPSHOT_SECONDS)
        except (TimeoutError, RuntimeError):
            future.cancel()
        return latest[-1]

    observer = FleetMetrics(fleet=me.fleet, replica=me.replica, pods_mode=spec.pod_mode.value, snapshot=snapshot)
    replica = FleetReplica(
        spec=spec,
        credentials=credentials,
        observer=observer,
        publish_observer=observer,
        on_lease=observer.observe_lease,
    )

    def say(text: str) -> None:
        print(f"{who}: {text}", flush=True)

    if metrics.port:
        try:
            bound = observer.serve(address=metrics.address, port=metrics.port)
        except OSError as exc:
            where = f"{metrics.address}:{metrics.port}"
            raise FleetUsageError(f"fakedev fleet run: cannot serve metrics on {where}: {exc}") from exc
        say(f"metrics on http://{metrics.address}:{bound}/metrics")

    if statefulset is not None:
        counted = await asyncio.to_thread(_statefulset_replicas, replica.client, where=statefulset)
        if counted is None:
            raise FleetUsageError(f"fakedev fleet run: StatefulSet {statefulset[0]}/{statefulset[1]} not found")
        known = await asyncio.to_thread(replica.client.list, NODES, label_selector=fleet_selector(me.fleet))
        orphans = select_orphans(known, me=me, own=me.node_names(count=spec.nodes), statefulset_replicas=counted)
        if orphans:
            await asyncio.to_thread(remove_nodes, replica.client, names=orphans)
            say(f"removed {len(orphans)} Node(s) no replica runs any more: {', '.join(orphans)}")
    started = time.monotonic()
    kind = StopKind.KUBELET_STOP  # whatever goes wrong, a stop never deletes Nodes it was not sure about
    try:
        await replica.start(progress=say)
        say(f"{spec.nodes} node(s) registered in {time.monotonic() - started:.1f}s; pods: {spec.pod_mode.value}")
        while not stop.is_set() and replica.ready_count() < spec.nodes:
            await asyncio.sleep(0.2)
        if not stop.is_set():
            say(f"{spec.nodes} node(s) ready (slices published) in {time.monotonic() - started:.1f}s")
        await stop.wait()
        if statefulset is not None:
            try:
                counted = await asyncio.to_thread(_statefulset_replicas_patiently, replica.client, where=statefulset)
                kind = compute_stop_kind(replica=me.replica, statefulset_replicas=counted)
            except ApiError as exc:
                say(f"cannot read the StatefulSet ({exc}); leaving the Nodes for a replacement")
    finally:
        say(f"stopping: {kind.value}")
        report = await replica.stop(kind)
        observer.close()
        if report.left:
            say(
                f"{len(report.left)} of {report.nodes} Node(s) could not be deleted: {', '.join(report.left)}; "
                f"remove them with `fakedev fleet clean --fleet {me.fleet} --replica {me.replica}`"
            )
        elif kind is StopKind.DECOMMISSION:
            say(f"decommissioned {report.nodes} Node(s)")
        say("stopped")
    return 1 if report.left else 0


def clean_fleet(args: argparse.Namespace) -> int:
    client = KubeClient(_credentials(args, command="fleet clean"), field_manager="fakedev/fleet")
    selector = (
        FleetReplicaId(fleet=args.fleet, replica=args.replica).selector()
        if args.replica is not None
        else fleet_selector(args.fleet)
    )
    names = fleet_node_names(client, selector=selector)
    if not names:
        print(f"no Nodes with {selector}")
        return 0
    removed = remove_nodes(client, names=names)
    print(f"removed {len(removed)} Node(s) with their pods, slices and Leases: {', '.join(removed)}")
    return 0


def drain_fleet(args: argparse.Namespace) -> int:
    """Scale the StatefulSet to 0 and wait for its pods to end: each replica sees itself no longer counted at SIGTERM
    and decommissions its Nodes while its credentials still exist."""
    namespace = _namespace(args)
    if namespace is None:
        raise FleetUsageError("fakedev fleet drain: give --namespace (or run --in-cluster)")
    client = KubeClient(_credentials(args, command="fleet drain"), field_manager="fakedev/fleet")
    name = str(args.statefulset)
    found = client.get_or_none(STATEFUL_SETS, name, namespace=namespace)
    if found is None:
        print(f"StatefulSet {namespace}/{name} is gone: nothing to drain")
        return 0
    labels = ((found.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    client.patch(STATEFUL_SETS, name, {"spec": {"replicas": 0}}, namespace=namespace, patch_type="merge")
    print(
        f"StatefulSet {namespace}/{name} scaled to 0; waiting for its replicas to decommission their Nodes", flush=True
    )
    deadline = time.monotonic() + args.timeout
    left: list[str] = []
    while time.monotonic() < deadline:
        try:
            pods = client.list(PODS, namespace=namespace, label_selector=selector)
        except ApiUnavailableError as exc:  # the API server is busiest exactly now: every replica is draining
            print(f"fakedev fleet drain: {exc}; asking again", file=sys.stderr, flush=True)
            time.sleep(RETRY_SECONDS)
            continue
        left = sorted(p["metadata"]["name"] for p in pods)
        if not left:
            print(f"every replica of {namespace}/{name} is gone", flush=True)
            return _sweep_patiently(client, fleet=args.fleet, deadline=deadline)
        time.sleep(DRAIN_POLL_SECONDS)
    print(f"fakedev fleet drain: after {args.timeout:.0f}s replicas still stopping: {', '.join(left)}", file=sys.stderr)
    return 1


def _sweep_patiently(client: KubeClient, *, fleet: str | None, deadline: float) -> int:
    while True:
        try:
            return _sweep(client, fleet=fleet)
        except ApiUnavailableError as exc:
            if time.monotonic() + RETRY_SECONDS > deadline:
                raise
            print(f"fakedev fleet drain: {exc}; sweeping again", file=sys.stderr, flush=True)
            time.sleep(RETRY_SECONDS)


def _sweep(client: KubeClient, *, fleet: str | None) -> int:
    """With every replica gone, a Node still labelled with the fleet belongs to a replica that was killed before it
    finished its decommission (its grace period ran out): remove it, and say so, since it points at a defect or a
    grace period too short for the fleet's size."""
    if fleet is None:
        return 0
    outlived = fleet_node_names(client, selector=fleet_selector(fleet))
    if not outlived:
        print(f"no Node of fleet {fleet} is left", flush=True)
        return 0
    print(
        f"fakedev fleet drain: {len(outlived)} Node(s) of fleet {fleet} outlived their replicas (killed before their "
        f"decommission ended? see the replicas' logs, or raise fleet.terminationGracePeriodSeconds); removing them",
        file=sys.stderr,
        flush=True,
    )
    removed = remove_nodes(client, names=outlived)
    print(f"removed {len(removed)} Node(s) with their pods, slices and Leases", flush=True)
    return 0
