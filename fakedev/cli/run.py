"""``fakedev run``: the main job on the embedded default."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("run", help="local control plane + emulated node + drills")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    raise NotImplementedError
