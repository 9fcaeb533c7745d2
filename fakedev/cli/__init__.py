"""The ``fakedev`` command: the one place that composes the fake driver with the harness."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from fakedev.cli import bench as bench_cmd
from fakedev.cli import cluster as cluster_cmd
from fakedev.cli import conformance as conformance_cmd
from fakedev.cli import drill as drill_cmd
from fakedev.cli import fault as fault_cmd
from fakedev.cli import kubevirt as kubevirt_cmd
from fakedev.cli import node as node_cmd
from fakedev.cli import plugin as plugin_cmd
from fakedev.cli import profile as profile_cmd
from fakedev.cli import run as run_cmd
from fakedev.errors import FakedevError
from harness.errors import HarnessError
from kubeclient.errors import KubeClientError

DESCRIPTION = """\
fakedev — emulated GPUs and NICs behind a real Kubernetes DRA kubelet plugin, a kubelet emulator that
doubles as a DRA driver conformance suite, and fault drills. Start with `fakedev cluster build`, then
`fakedev run`.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fakedev", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    bench_cmd.add_parser(sub)
    cluster_cmd.add_parser(sub)
    conformance_cmd.add_parser(sub)
    drill_cmd.add_parser(sub)
    fault_cmd.add_parser(sub)
    kubevirt_cmd.add_parser(sub)
    node_cmd.add_parser(sub)
    plugin_cmd.add_parser(sub)
    profile_cmd.add_parser(sub)
    run_cmd.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except (FakedevError, HarnessError, KubeClientError) as exc:
        print(f"fakedev: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `fakedev profile render … | head`: the reader left; say nothing more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return code


if __name__ == "__main__":
    sys.exit(main())
