"""``fakedev deviceclasses``: the DeviceClasses of a real driver release, and the committed manifests regenerated."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fakedev.model.releases import DriverReleases
from fakedev.render import Schema, parse_schema, schema_choices
from fakedev.render.class_manifests import compute_generated_files, render_fakedev_manifest, render_release_manifest


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "deviceclasses",
        help="the DeviceClasses of a real driver release (or regenerate deploy/deviceclasses)",
        description="Print the DeviceClasses that go with a schema pinned to a release, as that release's chart "
        "renders them (DraNet's chart has none: its repository's classes), or, with --update, rewrite every "
        "generated DeviceClass file of a checkout (`make deviceclasses`).",
    )
    p.add_argument(
        "schema",
        nargs="?",
        default=None,
        help=f"SCHEMA[@RELEASE] ({schema_choices()}; no release: the newest); `example` prints fakedev's own classes",
    )
    p.add_argument(
        "--update",
        metavar="CHECKOUT",
        type=Path,
        default=None,
        help="write deploy/deviceclasses/ and the chart's class table below this checkout instead of printing",
    )
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    if args.update is not None:
        for path, text in compute_generated_files().items():
            target = args.update / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists() or target.read_text() != text:
                target.write_text(text)
                print(f"wrote {path}")
        return 0
    schema, pin = parse_schema(args.schema or Schema.NVIDIA.value)
    releases = DriverReleases().pinned(pin)
    match schema:
        case Schema.NVIDIA:
            sys.stdout.write(render_release_manifest(releases.nvidia))
        case Schema.DRANET:
            sys.stdout.write(render_release_manifest(releases.dranet))
        case Schema.EXAMPLE:
            sys.stdout.write(render_fakedev_manifest())
    return 0
