"""``fakedev torture``: kill the fake plugin over and over while it prepares real claims, and check it recovers."""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fakedev.cli.args import positive_count
from fakedev.cli.torture.report import TortureSettings, render_summary, render_summary_lines
from fakedev.cli.torture.runner import run_torture
from fakedev.driver.crash import CrashPoint
from harness.cluster.local import local_cluster
from kubeclient import KubeClient

DEFAULT_PROFILE = "seed-example"
NIC_PROFILE = "nic-only"

DESCRIPTION = f"""\
Crash-test the fake plugin. This command plays the kubelet: it registers a Node that no emulator runs pods for,
creates claims with a pod each pinned to it (the real kube-scheduler allocates them), and drives a `fakedev plugin`
process through the kubelet's registration handshake and gRPC client, preparing and unpreparing those claims, also
in batches, repeating prepares, re-creating claims under the same name and repeating old unprepares late, as a
restarting kubelet does.

Every plugin process is killed with SIGKILL: either at a crash point armed through a hidden switch — between each
file written (and before each temp file is renamed), the status write and the checkpoint; {len(CrashPoint)} points
in prepare and unprepare — or at a random moment during a call. After each restart, and at the end, it checks:
every claim it believes prepared has its checkpoint record, its CDI specs and the metadata files they mount, and
claims it believes unprepared have nothing left; no file belongs to no claim; no temp file survives a restart;
an answer for a held claim never changes; status.devices matches the checkpoint (read through the API); with
--nics, NICs held by no claim are back as the hardware has them and no namespace is left. At the end everything
is unprepared and nothing may remain.

Prints progress, then the figures (kills, of which at crash points, prepares, unprepares, longest recovery from
a restart to the first successful call) and the seed. Exits 1 at the first violation, printing it and the command
that makes the same decisions again (timing-dependent kills aside). Starts a private control plane unless
--kubeconfig is given, and removes what it made (claims, pods, Node, namespaces, processes) even when interrupted.
"""


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "torture",
        help="kill the fake plugin at crash points and random moments, check it recovers",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--kills", type=positive_count, default=100, metavar="N", help="SIGKILLs to deliver (default 100)")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="seed of every decision (default: a random one)")
    p.add_argument(
        "--profile",
        default=None,
        help=f"node profile of the plugin (default {DEFAULT_PROFILE}; with --nics, {NIC_PROFILE})",
    )
    p.add_argument(
        "--schema",
        choices=("nvidia", "dranet", "example"),
        default=None,
        help="which of the profile's drivers to torture when it has several",
    )
    p.add_argument(
        "--claims",
        type=positive_count,
        default=4,
        metavar="N",
        help="claims held in turn (one or two devices each, so the profile needs 1.5×N devices; default 4)",
    )
    p.add_argument(
        "--nics",
        action="store_true",
        help="torture the dranet plugin with the profile's NICs plugged in (network namespaces: needs root)",
    )
    p.add_argument(
        "--kubeconfig", type=Path, default=None, help="use this cluster (default: start a private control plane)"
    )
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the summary as JSON to FILE")
    p.add_argument(
        "--evidence-dir",
        type=Path,
        default=Path("build/torture"),
        metavar="DIR",
        help="where a run that finds a violation copies the plugin's log and files (default build/torture)",
    )
    p.set_defaults(handler=_run)


def _say(message: str) -> None:
    print(f"[torture] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _cluster(kubeconfig: Path | None) -> Iterator[tuple[KubeClient, Path]]:
    if kubeconfig is not None:
        yield KubeClient.from_kubeconfig(kubeconfig), kubeconfig
        return
    _say("starting the local Kubernetes 1.37 control plane")
    with local_cluster(progress=_say) as cluster:
        yield cluster.client, cluster.kubeconfig


def _run(args: argparse.Namespace) -> int:
    settings = TortureSettings(
        kills=args.kills,
        seed=args.seed if args.seed is not None else secrets.randbelow(2**31),
        profile=args.profile or (NIC_PROFILE if args.nics else DEFAULT_PROFILE),
        schema=args.schema,
        claims=args.claims,
        nics=args.nics,
        kubeconfig=args.kubeconfig,
        evidence_dir=args.evidence_dir,
    )
    # SIGTERM unwinds like Ctrl-C, so the tear-down runs.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: signal.raise_signal(signal.SIGINT))
    _say(f"seed {settings.seed}: {settings.command()}")
    with _cluster(args.kubeconfig) as (kube, kubeconfig):
        tally = run_torture(settings, kube=kube, kubeconfig=kubeconfig, say=_say)
    summary = render_summary(settings, tally)
    print("\n".join(render_summary_lines(summary)), flush=True)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 1 if summary["violations"] else 0
