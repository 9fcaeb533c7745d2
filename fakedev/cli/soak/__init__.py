"""``fakedev soak``: a fake node under a continuous pod churn, through long control-plane outages, watched for leaks.

On its own local control plane (it stops kube-apiserver and etcd, so it never runs against a cluster it did not
start): an emulated node with an example-schema plugin (one device per pod), pods with a DRA claim created and
deleted continuously, then kube-apiserver down for --apiserver-outage seconds and etcd down for --etcd-outage
seconds, then --minutes more of churn, then every pod deleted. It checks that claims the plugin already holds are
served while the API is away, that the node comes to rest after each outage (every pod Running, the plugin holding
exactly the claims of the pods that exist), that nothing stays at the end (claims, CDI specs, sandboxes, network
namespaces), and that the RSS, open files and threads of the plugin and of the emulator's process stay flat through
the --minutes of churn after the outages (the means of the first and last fifth of those samples: RSS within +10 %,
files and threads within +4; an outage may fill a bounded thread pool to its cap, which is not a leak).

Prints a report and writes --json; exit status 1 when any of that fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from fakedev import logs
from fakedev.cli.args import positive_count
from fakedev.cli.soak.run import Soak, SoakReport, SoakSettings
from harness.cluster.local import local_cluster


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"must be from 0 to 86400 seconds, got {text}")
    return value


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "soak",
        help="long outages and a continuous pod churn on an emulated node, watched for leaks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d = SoakSettings()
    p.add_argument("--pods", type=positive_count, default=d.pods, help=f"pods alive at once, ≤ 128 ({d.pods})")
    p.add_argument("--minutes", type=float, default=d.minutes, help=f"churn after the outages ({d.minutes:g})")
    p.add_argument("--warmup", type=_seconds, default=d.warmup_seconds, help="seconds of churn before the outages")
    p.add_argument(
        "--apiserver-outage", type=_seconds, default=d.apiserver_outage_seconds, help="seconds kube-apiserver is down"
    )
    p.add_argument("--etcd-outage", type=_seconds, default=d.etcd_outage_seconds, help="seconds etcd is down")
    p.add_argument("--period", type=_seconds, default=d.period, help="seconds between churn actions")
    p.add_argument("--sample", type=_seconds, default=d.sample_seconds, help="seconds between footprint samples")
    p.add_argument("--json", type=Path, default=None, help="write the report (samples included) here")
    p.set_defaults(handler=_run)


def _say(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def render_summary(report: SoakReport) -> str:
    lines = [
        f"soak: {'passed' if report.ok else 'FAILED'} in {report.seconds:.0f}s — {report.pods_created} pods created, "
        f"{report.pods_deleted} deleted, {report.churn_api_errors} churn calls retried",
    ]
    for o in report.outages:
        converged = f"at rest {o.converged_seconds}s after" if o.converged_seconds is not None else "NOT at rest"
        lines.append(
            f"  {o.component} down {o.seconds:.0f}s: known claims served {o.known_claims_served}/"
            f"{o.known_claims_asked}, {o.churn_api_errors} churn calls retried, {converged}"
            + (f" ({o.not_converged})" if o.not_converged else "")
        )
    lines.append(
        "  at the end: "
        + ("nothing left" if report.at_rest_at_end else f"NOT at rest ({report.not_at_rest})")
        + (f"; namespaces left behind: {list(report.leaked_namespaces)}" if report.leaked_namespaces else "")
    )
    for name, drifts in report.drift.items():
        shown = ", ".join(
            f"{d.measure} {d.first:g} → {d.last:g} ({'flat' if d.flat else 'GREW'}, limit {d.limit})" for d in drifts
        )
        judged = sum(1 for x in report.samples.get(name, ()) if report.load_since <= x.t <= report.load_until)
        lines.append(f"  {name}: {shown} over {judged} samples, {report.load_since:g}s to {report.load_until:g}s")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    settings = SoakSettings(
        pods=min(args.pods, 128),
        minutes=args.minutes,
        warmup_seconds=args.warmup,
        apiserver_outage_seconds=args.apiserver_outage,
        etcd_outage_seconds=args.etcd_outage,
        period=args.period,
        sample_seconds=args.sample,
    )
    logs.configure(fmt="text", level="WARNING")
    logging.getLogger("harness").handlers = logging.getLogger("fakedev").handlers
    logging.getLogger("harness").setLevel("WARNING")
    _say("starting a local control plane")
    with local_cluster() as cluster:
        report = Soak(settings=settings, cluster=cluster, say=_say).run()
    print(render_summary(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "ok": report.ok,
            "flat": {name: {d.measure: d.flat for d in drifts} for name, drifts in report.drift.items()},
            **dataclasses.asdict(report),
        }
        args.json.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        print(f"report written to {args.json}")
    return 0 if report.ok else 1
