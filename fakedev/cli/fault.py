"""``fakedev fault``: inject faults into fake plugins, through the API (DeviceFault objects) or a control socket.

With ``--kubeconfig`` every verb creates, lists or deletes DeviceFault objects (:mod:`fakedev.cli.device_fault`);
the plugins of a cluster apply them. Without it, every verb but ``nic`` is one request of
:mod:`fakedev.plugin.protocol`, sent with its :class:`ControlClient` to a plugin run by hand on this machine; the
reply is printed as JSON (``{"ok": false, "error": ...}`` and exit status 1 when the plugin refuses).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fakedev.cli.device_fault import DEFAULT_DRIVER, run_api_mode
from fakedev.errors import ControlError, ControlRefusedError
from fakedev.faults import CallFault
from fakedev.plugin.app import DEFAULT_KUBELET_ROOT
from fakedev.plugin.paths import PluginPaths
from fakedev.plugin.protocol import (
    MAX_TEXT,
    AckReply,
    Call,
    ControlClient,
    ErrorReply,
    FaultAckReply,
    StatusReply,
)
from kubeclient.values import TaintEffect
from kubeletapi.types import HealthState

DESCRIPTION = """\
Two modes.

Through the API (--kubeconfig K --node N [--driver D]): each verb creates a DeviceFault object
(fakedev.io/v1alpha1, the CRD from deploy/helm/fakedev/crds/) and prints its name; the plugin of that node and
driver applies it, reports in its status (kubectl get devicefaults), and clears it when the object is deleted or
--until / --for runs out. Works wherever the plugins run: a DaemonSet on real kubelets, emulated nodes.
  health DEVICE --state Unhealthy [--message M] [--taint EFFECT]
  taint DEVICE --effect NoSchedule|NoExecute [--key K] [--value V]
  prepare --fail N [--error TEXT]  |  prepare --delay S      (one DeviceFault each: FailPrepare / SlowPrepare)
  nic unplug|down DEVICE                                     (NicUnplug / NicDown: unhealthy + NoExecute taint)
  list                                                       the DeviceFaults (of --node, if given)
  clear [NAME...]                                            delete these, or every DeviceFault of --node
  (Healthy, replug and up are: delete the DeviceFault; unprepare faults and status need the control socket.)

Through a control socket (no --kubeconfig): a `fakedev plugin` run by hand, at
<kubelet-root>/plugins/<driver>/control.sock:
  status                          devices with health and taints, registration, prepared claims, faults
  health DEVICE --state S         report a device Healthy, Unhealthy or Unknown on the health stream
                                  (--taint EFFECT also taints it in the ResourceSlice; Healthy removes the taint)
  prepare|unprepare [--delay S] [--fail N] [--error TEXT]
                                  slow calls down by S seconds and/or fail the next N calls (-1: every call)
  clear                           remove every call fault
  nic {unplug|replug|down|up} IFNAME --node N --profile P
                                  NIC hardware faults on an emulated node: pull the NIC (its veth pair goes), plug it
                                  back, or take its link down/up; the dranet plugin notices within milliseconds
Process-level faults (kill, stop, restart, socket removal) are done by `fakedev drill` or by hand with signals.
"""


def free_text(text: str) -> str:
    """An ``argparse`` type: text the control protocol carries (a fault's error, a health message)."""
    if len(text) > MAX_TEXT:
        raise argparse.ArgumentTypeError(f"at most {MAX_TEXT} characters, not {len(text)}")
    return text


def fault_error(text: str) -> str:
    """An ``argparse`` type: a fault's error text (an empty one would make the failing calls look prepared)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return free_text(text)


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "fault",
        help="inject faults into a running fake plugin",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    api = p.add_argument_group("through the API (DeviceFault objects)")
    api.add_argument("--kubeconfig", type=Path, default=None, help="create DeviceFault objects in this cluster")
    api.add_argument("--node", dest="api_node", default=None, help="the node whose plugin applies the fault")
    until = api.add_mutually_exclusive_group()
    until.add_argument("--until", default=None, help="clear the fault at this RFC 3339 time (2026-01-02T15:04:05Z)")
    until.add_argument("--for", dest="lasting", default=None, help="clear the fault after this long (30s, 5m, 1h)")
    api.add_argument("--name", default=None, help="the DeviceFault's name (default: generated from node and kind)")
    p.add_argument("--kubelet-root", type=Path, default=DEFAULT_KUBELET_ROOT)
    p.add_argument(
        "--driver",
        default=None,
        help=f"driver name of the plugin (default: {DEFAULT_DRIVER}; with --kubeconfig, list and clear filter by it "
        "only when given)",
    )
    p.add_argument("--rolling-update-uid", default=None, help="address one instance of a rolling update")
    p.add_argument("--socket", type=Path, default=None, help="the control socket (overrides the three above)")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs.add_parser("status", help="show the plugin's devices, claims and faults")
    h = verbs.add_parser("health", help="set a device's health")
    h.add_argument("device")
    h.add_argument("--state", required=True, choices=[h.value for h in HealthState])
    h.add_argument("--message", type=free_text, default="")
    h.add_argument(
        "--taint",
        choices=[e.value for e in TaintEffect],
        default=None,
        help="also taint the device in its ResourceSlice with this effect",
    )
    for call in Call:
        c = verbs.add_parser(call.value, help=f"slow down or fail {call} calls")
        c.add_argument("--delay", type=float, default=0.0, help="seconds each call waits first")
        c.add_argument("--fail", type=int, default=0, help="fail this many calls (-1: all until cleared)")
        c.add_argument(
            "--error",
            type=fault_error,
            default="injected fault",
            help=f"the per-claim error text (at most {MAX_TEXT} characters)",
        )
    t = verbs.add_parser("taint", help="taint a device in its ResourceSlice (API mode)")
    t.add_argument("device")
    t.add_argument("--effect", required=True, choices=[TaintEffect.NO_SCHEDULE.value, TaintEffect.NO_EXECUTE.value])
    t.add_argument("--key", default=None, help="the taint's key (default: fakedev.io/fault)")
    t.add_argument("--value", default=None, help="the taint's value (default: empty)")
    verbs.add_parser("list", help="list the DeviceFaults (API mode)")
    c = verbs.add_parser("clear", help="remove every call fault; API mode: delete DeviceFaults")
    c.add_argument("names", nargs="*", metavar="NAME", help="API mode: the DeviceFaults to delete")
    n = verbs.add_parser("nic", help="NIC hardware faults on an emulated node (needs no running plugin)")
    n.add_argument("action", choices=["unplug", "replug", "down", "up"])
    n.add_argument("ifname", help="the NIC's interface name on the node (dra.net/ifName); API mode: the device name")
    n.add_argument("--node", default=None, help="the emulated node")
    n.add_argument("--profile", default=None, help="the node's profile (for the NIC's MAC and MTU)")
    n.add_argument(
        "--fabric-node",
        default=None,
        help="the node whose fabric the NIC hangs off (default: --node; `fakedev node run --nodes K` "
        "puts every node on the fabric of its first node)",
    )
    p.set_defaults(handler=_run)


def _nic(args: argparse.Namespace) -> int:
    if not args.node or not args.profile:
        raise SystemExit("fakedev fault nic: --node and --profile are required (or use --kubeconfig for a DeviceFault)")
    from fakedev.model.inventory import resolve_inventory
    from fakedev.nics import hardware
    from fakedev.nics.node import nic_namespaces
    from fakedev.nics.ports import compute_ports
    from fakedev.profiles import load_profile
    from harness.node.layout import node_run_id

    hw = nic_namespaces(node_run_id=node_run_id(args.node), fabric_run_id=node_run_id(args.fabric_node or args.node))
    ports = {p.ifname: p for p in compute_ports(resolve_inventory(load_profile(args.profile), node_name=args.node))}
    port = ports.get(args.ifname)
    if port is None:
        raise SystemExit(f"fakedev fault nic: {args.node} has no NIC {args.ifname!r} (known: {', '.join(ports)})")
    if args.action == "unplug":
        done = hardware.unplug(hw, port)
        print(f"{args.ifname} unplugged" if done else f"{args.ifname} was not plugged")
    elif args.action == "replug":
        hardware.plug(hw, port)
        print(f"{args.ifname} plugged in")
    else:
        hardware.set_carrier(hw, port, up=args.action == "up")
        print(f"{args.ifname} link {args.action}")
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.kubeconfig is not None:
        return run_api_mode(args)
    if args.verb in ("taint", "list") or (args.verb == "clear" and args.names):
        raise SystemExit(f"fakedev fault {args.verb}: DeviceFault objects need --kubeconfig (and --node)")
    if args.verb == "nic":
        return _nic(args)
    path = (
        args.socket
        or PluginPaths(
            kubelet_root=args.kubelet_root,
            driver=args.driver or DEFAULT_DRIVER,
            rolling_update_uid=args.rolling_update_uid,
        ).control_socket
    )
    client = ControlClient(path=path)
    answer: StatusReply | AckReply | FaultAckReply | ErrorReply
    try:
        if args.verb == "status":
            answer = client.status()
        elif args.verb == "health":
            answer = client.set_health(
                device=args.device,
                health=HealthState(args.state),
                message=args.message,
                taint=None if args.taint is None else TaintEffect(args.taint),
            )
        elif args.verb == "clear":
            answer = client.clear_faults()
        else:
            fault = CallFault(delay_seconds=args.delay, fail_times=args.fail, error=args.error)
            answer = client.set_fault(call=Call(args.verb), fault=fault)
    except ControlRefusedError as exc:
        answer = {"ok": False, "error": exc.reason}
    except ControlError as exc:  # unreachable, or an answer that is no reply
        raise SystemExit(f"fakedev fault: {exc}") from exc
    print(json.dumps(answer, indent=2))
    if not answer["ok"]:
        print(f"fakedev fault: {answer['error']}", file=sys.stderr)
        return 1
    return 0
