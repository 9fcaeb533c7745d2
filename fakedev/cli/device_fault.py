"""``fakedev fault --kubeconfig``: DeviceFault objects made from the same verbs and options as the control socket's.

The objects are built with :func:`fakedev.plugin.device_faults.render_device_fault` and checked with
:func:`~fakedev.plugin.device_faults.parse_spec` before they are sent, so a mistake is named here, in the option's
words, rather than by the API server's rule.
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Sequence
from typing import Final

from fakedev.errors import DeviceFaultError, KubeApiError
from fakedev.kube import DeviceFaultApi
from fakedev.plugin.device_faults import (
    DeviceFaultKind,
    DeviceFaultSpec,
    FailPrepareParams,
    SlowPrepareParams,
    TaintParams,
    UnhealthyParams,
    delay_seconds,
    parse_spec,
    render_device_fault,
    render_spec,
)
from kubeclient import JsonObj, KubeClient, credentials_from_kubeconfig
from kubeclient.timestamps import parse_time, utc_now
from kubeclient.values import TaintEffect

DEFAULT_DRIVER: Final = "gpu.nvidia.com"
"""The driver both modes of ``fakedev fault`` address unless told otherwise."""


def _until(args: argparse.Namespace) -> datetime.datetime | None:
    if args.until is not None:
        try:
            return parse_time(args.until)
        except ValueError as exc:
            raise DeviceFaultError(f"--until: {exc}") from None
    if args.lasting is not None:
        try:
            return utc_now() + datetime.timedelta(seconds=delay_seconds(args.lasting))
        except ValueError:
            raise DeviceFaultError(
                f"--for: a duration such as 30s, 5m or 1h (at most 1h), not {args.lasting!r}"
            ) from None
    return None


def compute_spec(args: argparse.Namespace) -> DeviceFaultSpec:
    """The DeviceFault a creating verb stands for (raises :class:`DeviceFaultError` naming the option)."""
    if not args.api_node:
        raise DeviceFaultError(f"{args.verb}: --node is required with --kubeconfig (the node whose plugin applies it)")
    kind: DeviceFaultKind
    device: str | None = None
    params: UnhealthyParams | TaintParams | FailPrepareParams | SlowPrepareParams | None
    match args.verb:
        case "health":
            if args.state != "Unhealthy":
                raise DeviceFaultError(
                    f"health: --state {args.state}: a DeviceFault makes a device Unhealthy; "
                    "to make it Healthy again, delete the DeviceFault (fakedev fault --kubeconfig K clear NAME)"
                )
            kind, device = DeviceFaultKind.UNHEALTHY, args.device
            params = UnhealthyParams(
                message=args.message, taint_effect=None if args.taint is None else TaintEffect(args.taint)
            )
        case "taint":
            kind, device = DeviceFaultKind.TAINT, args.device
            params = TaintParams(
                effect=TaintEffect(args.effect), key=args.key or "fakedev.io/fault", value=args.value or ""
            )
        case "prepare":
            if (args.fail != 0) == (args.delay != 0):
                raise DeviceFaultError("prepare: give --fail N or --delay S (one DeviceFault each)")
            if args.fail:
                if args.fail < 0:
                    raise DeviceFaultError(
                        "prepare: --fail must be at least 1 (delete the DeviceFault to stop failing)"
                    )
                kind, params = DeviceFaultKind.FAIL_PREPARE, FailPrepareParams(count=args.fail, message=args.error)
            else:
                delay: int | str = int(args.delay) if float(args.delay).is_integer() else f"{args.delay}s"
                kind, params = DeviceFaultKind.SLOW_PREPARE, SlowPrepareParams(delay=delay)
        case "nic":
            if args.action not in ("unplug", "down"):
                raise DeviceFaultError(f"nic {args.action}: delete the NicUnplug/NicDown DeviceFault instead")
            kind = DeviceFaultKind.NIC_UNPLUG if args.action == "unplug" else DeviceFaultKind.NIC_DOWN
            device, params = args.ifname, None
        case _:
            raise DeviceFaultError(f"{args.verb}: needs the control socket of a plugin run by hand (no --kubeconfig)")
    spec = DeviceFaultSpec(
        node_name=args.api_node,
        driver=args.driver or DEFAULT_DRIVER,
        kind=kind,
        device=device,
        params=params,
        until=_until(args),
    )
    return parse_spec(render_spec(spec))  # the CRD's rules, in our words, before the API server's


def _row(obj: JsonObj) -> Sequence[str]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return (
        obj["metadata"]["name"],
        str(spec.get("nodeName", "")),
        str(spec.get("driver", "")),
        str(spec.get("device", "-")),
        str(spec.get("kind", "")),
        str(status.get("phase", "-")),
        str(status.get("error", "")),
    )


def _table(rows: Sequence[Sequence[str]]) -> str:
    header = ("NAME", "NODE", "DRIVER", "DEVICE", "KIND", "PHASE", "ERROR")
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in (header, *rows))


def run_api_mode(args: argparse.Namespace) -> int:
    api = DeviceFaultApi(client=KubeClient(credentials_from_kubeconfig(args.kubeconfig), field_manager="fakedev-fault"))
    driver = args.driver  # list and clear filter by it only when given
    try:
        if args.verb == "list":
            objects, _ = api.list(node_name=args.api_node, driver=driver)
            print(_table([_row(o) for o in sorted(objects, key=lambda o: o["metadata"]["name"])]))
            return 0
        if args.verb == "clear":
            if args.names:
                names = list(args.names)
            elif args.api_node:
                names = [o["metadata"]["name"] for o in api.list(node_name=args.api_node, driver=driver)[0]]
            else:
                raise DeviceFaultError("clear: name the DeviceFaults to delete, or give --node to delete all of a node")
            for name in names:
                api.delete(name)
                print(name)
            return 0
        created = api.create(render_device_fault(compute_spec(args), name=args.name))
        print(created["metadata"]["name"])
        return 0
    except DeviceFaultError as exc:
        raise SystemExit(f"fakedev fault: {exc}") from exc
    except KubeApiError as exc:
        hint = " (is the DeviceFault CRD installed? deploy/helm/fakedev/crds/)" if exc.status == 404 else ""
        raise SystemExit(f"fakedev fault: {exc}{hint}") from exc
