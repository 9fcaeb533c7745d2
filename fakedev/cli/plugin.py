"""``fakedev plugin``: the fake driver's kubelet plugin, as a DaemonSet container would run it."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from enum import StrEnum
from pathlib import Path
from typing import Any

from fakedev import logs
from fakedev.cli.args import schema_pin
from fakedev.driver.crash import crash_at_from_env
from fakedev.errors import CrashPointError
from fakedev.model.inventory import resolve_inventory
from fakedev.plugin.app import DEFAULT_CDI_DIR, DEFAULT_KUBELET_ROOT, PluginSettings, run_plugin
from fakedev.plugin.nodeprofile import profile_from_node
from fakedev.plugin.tuning import tune_for_serving
from fakedev.profiles import load_profile
from fakedev.render import Schema, default_schemas, schema_choices
from kubeclient import Credentials, KubeClient, credentials_from_kubeconfig, credentials_in_cluster

log = logging.getLogger("fakedev.plugin")

DESCRIPTION = """\
Serve the fake DRA driver's kubelet plugin for one node: DRA v1 and v1beta1 and health v1 and v1alpha1 on
<kubelet-root>/plugins/<driver>/dra.sock and registration on <kubelet-root>/plugins_registry/<driver>-reg.sock,
both from one gRPC server on gRPC core's older listener (GRPC_EXPERIMENTS=-event_engine_listener, unless set).
Devices come from a node profile (`fakedev profile list`); their ResourceSlices are published for --node-name.
Prepare writes CDI specs into --cdi-dir and device-metadata files below the plugin's data dir, and sets the
claim's status.devices. Stop with SIGTERM or Ctrl-C; prepared claims survive restarts (checkpoint).
With an API server, the plugin also applies the DeviceFault objects (fakedev.io/v1alpha1) of its node and driver:
device health and taints, failing or slow prepares, NIC faults; it clears each when the object goes or its `until`
passes and reports in the object's status (see `fakedev fault --help`). --no-device-faults switches that off.
"""


class AbsentSchema(StrEnum):
    """What a plugin does on a node whose profile has no devices for its schema."""

    FAIL = "fail"
    IDLE = "idle"


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "plugin",
        help="run the fake driver's kubelet plugin",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--profile",
        default=None,
        help="built-in profile name or path to a profile YAML; with --profile-from-node-label: the default for "
        "nodes without the label",
    )
    p.add_argument(
        "--profile-from-node-label",
        default=None,
        metavar="LABEL",
        help="read this label of the plugin's Node (e.g. fakedev.io/profile) at start and serve the built-in "
        "profile it names, else --profile (needs get on nodes; how one DaemonSet serves nodes of several profiles)",
    )
    p.add_argument(
        "--node-name", default=os.environ.get("NODE_NAME"), help="the Node this plugin serves (default: $NODE_NAME)"
    )
    p.add_argument(
        "--schema",
        type=schema_pin,
        default=None,
        metavar="SCHEMA[@RELEASE]",
        help="which driver's schema to serve when the profile has several, optionally pinned to a release of the "
        f"real driver (the profile's `releases:`, else the newest release, is the default): {schema_choices()}",
    )
    p.add_argument(
        "--if-schema-absent",
        choices=[a.value for a in AbsentSchema],
        default=AbsentSchema.FAIL.value,
        help="when the node's profile has no devices for --schema: fail (exit 1, the default) or idle (serve "
        "nothing, register nothing, wait for SIGTERM: a DaemonSet container on a node of another kind)",
    )
    p.add_argument(
        "--driver-name",
        default=None,
        help="driver name to register and publish (default: the schema's: gpu.nvidia.com, dra.net, gpu.example.com)",
    )
    p.add_argument(
        "--kubelet-root",
        type=Path,
        default=DEFAULT_KUBELET_ROOT,
        help=f"kubelet root dir holding plugins/ and plugins_registry/ (default: {DEFAULT_KUBELET_ROOT})",
    )
    p.add_argument("--cdi-dir", type=Path, default=DEFAULT_CDI_DIR, help=f"CDI spec dir (default: {DEFAULT_CDI_DIR})")
    p.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="checkpoint and fake /dev (default: <kubelet-root>/plugins/<driver>)",
    )
    p.add_argument(
        "--rolling-update-uid",
        default=None,
        help="run as one of two instances during a rolling update (the pod's UID): socket names carry its first 8 "
        "characters (dra-<uid[:8]>.sock, …), prepare/unprepare serialized through a file lock",
    )
    api = p.add_mutually_exclusive_group()
    api.add_argument("--kubeconfig", type=Path, default=None, help="kubeconfig (default: $KUBECONFIG)")
    api.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    api.add_argument(
        "--no-api",
        action="store_true",
        help="run without an API server: sockets only, every prepare fails (socket-level tests)",
    )
    p.add_argument(
        "--netns",
        default=None,
        help="network namespace holding the node's NICs (dranet schema; default: the plugin's own)",
    )
    p.add_argument(
        "--fabric-netns",
        default=None,
        help="namespace of the NICs' fabric ports: their link state drives health and NoExecute taints",
    )
    p.add_argument(
        "--health-timeout",
        type=int,
        default=30,
        help="health_check_timeout_seconds reported to the kubelet (default: 30)",
    )
    p.add_argument(
        "--record-calls",
        type=Path,
        default=None,
        metavar="FILE",
        help="append one JSON line per gRPC call served (method, claims, status, ms) to FILE: what the kubelet asked",
    )
    p.add_argument(
        "--no-device-faults",
        action="store_true",
        help="do not list, watch or apply DeviceFault objects (e.g. without RBAC on devicefaults.fakedev.io)",
    )
    p.add_argument(
        "--no-claim-cache",
        action="store_true",
        help="do not list and watch ResourceClaims (each prepare then plans only after its GET is answered; "
        "for an account without list/watch on resourceclaims)",
    )
    p.add_argument("--log-format", choices=logs.FORMATS, default="text")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(handler=_run)


def _credentials(args: argparse.Namespace) -> Credentials | None:
    if args.no_api:
        return None
    if args.in_cluster:
        return credentials_in_cluster()
    path = args.kubeconfig or (Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG") else None)
    if path is None:
        raise SystemExit("fakedev plugin: no API server: give --kubeconfig, set KUBECONFIG, or use --in-cluster")
    return credentials_from_kubeconfig(path)


def _check_arguments(args: argparse.Namespace) -> None:
    """Refuse combinations argparse cannot express, each with the flag to change."""
    if not args.node_name:
        raise SystemExit("fakedev plugin: --node-name is required (or set NODE_NAME)")
    if args.profile is None and args.profile_from_node_label is None:
        raise SystemExit("fakedev plugin: give --profile, --profile-from-node-label, or both")
    if args.profile_from_node_label is not None and args.no_api:
        raise SystemExit("fakedev plugin: --profile-from-node-label reads the Node, which --no-api rules out")
    if args.if_schema_absent == AbsentSchema.IDLE and args.schema is None:
        raise SystemExit("fakedev plugin: --if-schema-absent idle needs --schema (which schema may be absent)")


def _choose_profile(args: argparse.Namespace, credentials: Credentials | None) -> str:
    if args.profile_from_node_label is None:
        return str(args.profile)
    assert credentials is not None  # _check_arguments refused --no-api
    client = KubeClient(credentials, field_manager="fakedev/plugin")
    try:
        choice = profile_from_node(
            client, node_name=args.node_name, label=args.profile_from_node_label, default=args.profile
        )
    finally:
        client.close()
    return choice.profile


def _schema_absent(*, profile: str, node_name: str, schema: Schema | None) -> bool:
    """True when ``schema`` was asked for and the profile, resolved for this node, has no devices for it."""
    if schema is None:
        return False
    return schema not in default_schemas(resolve_inventory(load_profile(profile), node_name=node_name))


async def _idle(*, profile: str, node_name: str, schema: Schema) -> None:
    log.warning(
        "nothing to serve: the profile has no devices for this schema; idle until stopped",
        extra={"fields": {"node": node_name, "profile": profile, "schema": schema.value}},
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def _run(args: argparse.Namespace) -> int:
    _check_arguments(args)
    logs.configure(fmt=args.log_format, level=args.log_level)
    try:
        # Hidden on purpose (no flag, no --help line): only the torture tool arms crash points.
        crash_at = crash_at_from_env()
    except CrashPointError as exc:
        raise SystemExit(f"fakedev plugin: {exc}") from exc
    credentials = _credentials(args)
    profile = _choose_profile(args, credentials)
    schema, pin = args.schema if args.schema else (None, None)
    if args.if_schema_absent == AbsentSchema.IDLE and _schema_absent(
        profile=profile, node_name=args.node_name, schema=schema
    ):
        assert schema is not None  # _check_arguments: idle needs --schema
        asyncio.run(_idle(profile=profile, node_name=args.node_name, schema=schema))
        return 0
    tune_for_serving()
    settings = PluginSettings(
        profile=profile,
        node_name=args.node_name,
        schema=schema,
        pin=pin,
        driver_name=args.driver_name,
        kubelet_root=args.kubelet_root,
        cdi_dir=args.cdi_dir,
        state_dir=args.state_dir,
        rolling_update_uid=args.rolling_update_uid,
        credentials=credentials,
        health_timeout_seconds=args.health_timeout,
        nic_netns=args.netns,
        fabric_netns=args.fabric_netns,
        record_calls=args.record_calls,
        crash_at=crash_at,
        watch_device_faults=not args.no_device_faults,
        cache_claims=not args.no_claim_cache,
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_plugin(settings, stop=stop)

    asyncio.run(main())
    return 0
