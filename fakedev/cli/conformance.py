"""``fakedev conformance``: the DRA driver conformance suite against any driver's kubelet plugin."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.cluster.local import local_cluster
from harness.conformance.checks import CATALOG, select
from harness.conformance.context import conformance_context
from harness.conformance.exdriver import example_driver_spec
from harness.conformance.nodes import ConformanceNode, real_node
from harness.conformance.report import render_conformance_html
from harness.conformance.runner import run_checks
from harness.node.background import BackgroundLoop
from harness.node.drivers import template_driver
from harness.realnode.node import settings_for_cluster
from harness.reports import compute_exit_code, render_console, render_json, render_junit
from kubeclient import KubeClient

DESCRIPTION = """\
Run the DRA driver conformance suite: a node registers the driver under test, the real scheduler allocates its
devices, and each check exercises one clause of the kubelet ⇄ driver contract. The node is the emulator (the
kubelet's plugin manager and DRA manager, default) or, with --node real, a real kubelet v1.37 and containerd 2
(built by `make build`; root; one per host) — then the kubelet registers the driver and runs the checks' pods.
Give the driver's command after `--`; these placeholders are filled per node (and also exported as
NODE_NAME, KUBELET_ROOT, KUBELET_REGISTRAR_DIRECTORY_PATH, KUBELET_PLUGINS_DIRECTORY_PATH, CDI_ROOT, KUBECONFIG):
  {node} {kubelet_root} {registry_dir} {plugins_dir} {cdi_dir} {kubeconfig}
Examples:
  fakedev conformance -- fakedev plugin --profile seed-example --node-name {node} \\
      --kubelet-root {kubelet_root} --cdi-dir {cdi_dir} --kubeconfig {kubeconfig}
  fakedev conformance --example-driver        # sigs.k8s.io/dra-example-driver v0.4.0, built from the Go proxy
  fakedev conformance --node real --example-driver
Exit status 0 only when every required check passes.
"""


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "conformance",
        help="check any DRA driver's kubelet plugin against the kubelet contract",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--list", action="store_true", help="list the checks and exit")
    p.add_argument("--only", action="append", default=[], metavar="ID", help="run only these checks (repeatable)")
    p.add_argument("--skip", action="append", default=[], metavar="ID", help="skip these checks (repeatable)")
    p.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="use this cluster (default: start a private local control plane for the run)",
    )
    p.add_argument(
        "--example-driver",
        action="store_true",
        help="test the kubelet plugin of sigs.k8s.io/dra-example-driver (built by `make build`)",
    )
    p.add_argument(
        "--node",
        choices=["emulated", "real"],
        default="emulated",
        help="the node that registers the driver: the emulator (default) or a real kubelet + containerd",
    )
    p.add_argument(
        "--address",
        default="127.0.0.1",
        help="--node real: the node's loopback address, also its name (default 127.0.0.1)",
    )
    p.add_argument(
        "--ca",
        type=Path,
        default=None,
        help="--node real with --kubeconfig: the cluster CA directory (ca.crt, ca.key; default: <kubeconfig dir>/pki)",
    )
    p.add_argument("--junit", type=Path, default=None, help="write JUnit XML here")
    p.add_argument("--json", type=Path, default=None, help="write JSON results here")
    p.add_argument(
        "--report-dir",
        type=Path,
        default=None,
        metavar="D",
        help="write D/console.txt, D/junit.xml, D/results.json and D/report.html (per check: clause, what was "
        "sent, what came back, the verdict and why)",
    )
    p.add_argument(
        "--verbose", action="store_true", help="print tracebacks of ERROR verdicts on the console (always in files)"
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the driver command with placeholders")
    p.set_defaults(handler=_run)


def _listing() -> str:
    width = max(len(c.id) for c in CATALOG)
    return "\n".join(
        f"{c.id:<{width}}  {'required   ' if c.required else 'recommended'}  {c.title}  [{c.clause}]"
        + (f"  needs: {', '.join(n.describe() for n in c.needs)}" if c.needs else "")
        for c in CATALOG
    )


@contextlib.contextmanager
def _cluster(kubeconfig: Path | None, *, ca: Path | None) -> Iterator[tuple[KubeClient, Path, Path]]:
    """The cluster's client, kubeconfig and CA directory (the CA signs a real node's certificates)."""
    if kubeconfig is not None:
        yield KubeClient.from_kubeconfig(kubeconfig), kubeconfig, ca or kubeconfig.parent / "pki"
        return
    print("[conformance] starting a local control plane …", file=sys.stderr, flush=True)
    with local_cluster() as cluster:
        yield cluster.client, cluster.kubeconfig, cluster.layout.pki


def _node_factory(
    args: argparse.Namespace, *, client: KubeClient, ca_dir: Path
) -> Callable[[BackgroundLoop], ConformanceNode] | None:
    if args.node == "emulated":
        return None
    settings = settings_for_cluster(client=client, ca_dir=ca_dir, address=args.address)
    return real_node(
        client=client,
        settings=settings,
        progress=lambda step: print(f"[conformance] real node {args.address}: {step}", file=sys.stderr, flush=True),
    )


def _run(args: argparse.Namespace) -> int:
    if args.list:
        print(_listing())
        return 0
    command = list(args.command[1:] if args.command[:1] == ["--"] else args.command)
    if args.example_driver and command:
        raise SystemExit("fakedev conformance: give either --example-driver or a driver command, not both")
    if not args.example_driver and not command:
        raise SystemExit("fakedev conformance: no driver command; add `-- <command>` or --example-driver (see --help)")
    driver = example_driver_spec() if args.example_driver else template_driver(tuple(command))
    try:
        checks = select(only=tuple(args.only), skip=tuple(args.skip))
    except ValueError as exc:
        raise SystemExit(f"fakedev conformance: {exc}") from None

    def progress(message: str) -> None:
        print(f"[conformance] {message}", file=sys.stderr, flush=True)

    if args.ca is not None and args.node != "real":
        raise SystemExit("fakedev conformance: --ca is for --node real")
    with contextlib.ExitStack() as stack:
        client, kubeconfig, ca_dir = stack.enter_context(_cluster(args.kubeconfig, ca=args.ca))
        ctx = stack.enter_context(
            conformance_context(
                client=client,
                kubeconfig=kubeconfig,
                driver=driver,
                node=_node_factory(args, client=client, ca_dir=ca_dir),
            )
        )
        results = run_checks(ctx, checks, progress=progress)
        name = ctx.driver_name or "(unregistered)"
    title = (
        f"DRA conformance: {name} on {'a real kubelet' if args.node == 'real' else 'the node emulator'} — "
        + (driver.description[:100])
    )
    print(render_console(results, title=title, verbose=args.verbose))
    meta = {"driver": name, "command": driver.description, "node": args.node, "host": os.uname().nodename}
    outputs: dict[Path | None, Callable[[], str]] = {
        args.junit: lambda: render_junit(results, suite=f"dra-conformance.{name}"),
        args.json: lambda: render_json(results, meta=meta),
    }
    if args.report_dir is not None:
        d: Path = args.report_dir
        outputs |= {
            d / "console.txt": lambda: render_console(results, title=title, verbose=True) + "\n",
            d / "junit.xml": lambda: render_junit(results, suite=f"dra-conformance.{name}"),
            d / "results.json": lambda: render_json(results, meta=meta),
            d / "report.html": lambda: render_conformance_html(results, title=title, meta=meta),
        }
    for path, render in outputs.items():
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render())
    if args.report_dir is not None:
        print(f"[conformance] report: {(args.report_dir / 'report.html').resolve()}", file=sys.stderr, flush=True)
    return compute_exit_code(results)
