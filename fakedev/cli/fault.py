"""``fakedev fault``: inject faults into a running fake plugin through its control socket.

Every verb but ``nic`` is one request of :mod:`fakedev.plugin.protocol`, sent with its :class:`ControlClient`; the
reply is printed as JSON (``{"ok": false, "error": ...}`` and exit status 1 when the plugin refuses).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

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
Talk to a running `fakedev plugin` through <kubelet-root>/plugins/<driver>/control.sock:
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
    p.add_argument("--kubelet-root", type=Path, default=DEFAULT_KUBELET_ROOT)
    p.add_argument("--driver", default="gpu.nvidia.com", help="driver name of the plugin (default: gpu.nvidia.com)")
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
    verbs.add_parser("clear", help="remove every call fault")
    n = verbs.add_parser("nic", help="NIC hardware faults on an emulated node (needs no running plugin)")
    n.add_argument("action", choices=["unplug", "replug", "down", "up"])
    n.add_argument("ifname", help="the NIC's interface name on the node (dra.net/ifName)")
    n.add_argument("--node", required=True, help="the emulated node")
    n.add_argument("--profile", required=True, help="the node's profile (for the NIC's MAC and MTU)")
    n.add_argument(
        "--fabric-node",
        default=None,
        help="the node whose fabric the NIC hangs off (default: --node; `fakedev node run --nodes K` "
        "puts every node on the fabric of its first node)",
    )
    p.set_defaults(handler=_run)


def _nic(args: argparse.Namespace) -> int:
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
    if args.verb == "nic":
        return _nic(args)
    path = (
        args.socket
        or PluginPaths(
            kubelet_root=args.kubelet_root, driver=args.driver, rolling_update_uid=args.rolling_update_uid
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
