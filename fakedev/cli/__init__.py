"""The ``fakedev`` command: the one place that composes the fake driver with the harness."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Final

from fakedev import __version__
from fakedev.errors import FakedevError
from fakedev.plugin.tuning import grpc_environment
from harness.errors import HarnessError
from kubeclient.errors import KubeClientError

COMMANDS: Final = (
    "bench",
    "cluster",
    "conformance",
    "deviceclasses",
    "drill",
    "fault",
    "fleet",
    "image",
    "kubevirt",
    "node",
    "plugin",
    "profile",
    "run",
    "soak",
    "torture",
)
"""Each is a module ``fakedev.cli.<name>`` with ``add_parser(sub)``; only the one a command line names is imported,
so a long-running ``fakedev plugin`` does not carry the harness, the drills and the benchmarks in its memory."""

DESCRIPTION = """\
fakedev — emulated GPUs and NICs behind a real Kubernetes DRA kubelet plugin, a kubelet emulator that
doubles as a DRA driver conformance suite, and fault drills. Start with `fakedev cluster build`, then
`fakedev run`.
"""


def _command_module(name: str) -> ModuleType:
    return importlib.import_module(f"fakedev.cli.{name}")


def build_parser(*, only: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The full parser, or (``only``) one with just those commands, which imports nothing else."""
    parser = argparse.ArgumentParser(
        prog="fakedev", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"fakedev {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS if only is None else only:
        _command_module(name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # One command imports only its own module; `--version` imports none (a container's first check stays cheap).
    only: Sequence[str] | None = None
    if words and words[0] in COMMANDS:
        only = (words[0],)
    elif words[:1] == ["--version"]:
        only = ()
    if only == ("plugin",):
        # Before the command's module imports grpc: its core reads its settings once.
        os.environ.update(grpc_environment(os.environ))
    parser = build_parser(only=only)
    args = parser.parse_args(words)
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
