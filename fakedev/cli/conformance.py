"""``fakedev conformance``: the DRA driver conformance suite against any driver's kubelet plugin."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.cluster.local import local_cluster
from harness.conformance.checks import CATALOG, select
from harness.conformance.context import conformance_context
from harness.conformance.exdriver import example_driver_spec
from harness.conformance.runner import run_checks
from harness.node.drivers import template_driver
from harness.reports import compute_exit_code, render_console, render_json, render_junit
from kubeclient import KubeClient

DESCRIPTION = """\
Run the DRA driver conformance suite: an emulated node (the kubelet's plugin manager and DRA manager) registers the
driver under test, the real scheduler allocates its devices, and each check exercises one clause of the kubelet ⇄
driver contract. Give the driver's command after `--`; these placeholders are filled per node (and also exported as
NODE_NAME, KUBELET_ROOT, KUBELET_REGISTRAR_DIRECTORY_PATH, KUBELET_PLUGINS_DIRECTORY_PATH, CDI_ROOT, KUBECONFIG):
  {node} {kubelet_root} {registry_dir} {plugins_dir} {cdi_dir} {kubeconfig}
Examples:
  fakedev conformance -- fakedev plugin --profile seed-example --node-name {node} \\
      --kubelet-root {kubelet_root} --cdi-dir {cdi_dir} --kubeconfig {kubeconfig}
  fakedev conformance --example-driver        # sigs.k8s.io/dra-example-driver v0.4.0, built from the Go proxy
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
    p.add_argument("--junit", type=Path, default=None, help="write JUnit XML here")
    p.add_argument("--json", type=Path, default=None, help="write JSON results here")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the driver command with placeholders")
    p.set_defaults(handler=_run)


def _listing() -> str:
    width = max(len(c.id) for c in CATALOG)
    return "\n".join(
        f"{c.id:<{width}}  {'required   ' if c.required else 'recommended'}  {c.title}  [{c.clause}]" for c in CATALOG
    )


@contextlib.contextmanager
def _cluster(kubeconfig: Path | None) -> Iterator[tuple[KubeClient, Path]]:
    if kubeconfig is not None:
        yield KubeClient.from_kubeconfig(kubeconfig), kubeconfig
        return
    print("[conformance] starting a local control plane …", file=sys.stderr, flush=True)
    with local_cluster() as cluster:
        yield cluster.client, cluster.kubeconfig


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

    with (
        _cluster(args.kubeconfig) as (client, kubeconfig),
        conformance_context(client=client, kubeconfig=kubeconfig, driver=driver) as ctx,
    ):
        results = run_checks(ctx, checks, progress=progress)
        name = ctx.driver_name or "(unregistered)"
    title = f"DRA conformance: {name} — {driver.description[:100]}"
    print(render_console(results, title=title))
    if args.junit:
        args.junit.parent.mkdir(parents=True, exist_ok=True)
        args.junit.write_text(render_junit(results, suite=f"dra-conformance.{name}"))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            render_json(results, meta={"driver": name, "command": driver.description, "host": os.uname().nodename})
        )
    return compute_exit_code(results)
