"""``fakedev profile list|show|render``: the built-in node profiles, their devices and their ResourceSlices."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from fakedev.cli.args import schema_pin
from fakedev.model.inventory import (
    ExampleGpu,
    GpuDevice,
    MigDevice,
    NicPf,
    NicVf,
    PassthroughGpu,
    VgpuDevice,
    VirtualNic,
    resolve_inventory,
)
from fakedev.profiles import builtin_profile_names, load_profile
from fakedev.render import PublishedDevice, render_node, schema_choices
from fakedev.render.release_table import (
    BEGIN_MARKER,
    END_MARKER,
    compute_release_tables,
    render_markdown,
    render_text,
    replace_block,
)
from fakedev.render.values import binary_quantity

DEFAULT_NODE = "fakedev-node"


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "profile",
        help="list, show and render node profiles",
        description="Node profiles describe an emulated node's GPUs (full, MIG, vGPU), NICs and PCI/NUMA topology. "
        "A profile is a built-in name (see `fakedev profile list`) or a path to a YAML file.",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    verbs.add_parser("list", help="the built-in profiles").set_defaults(handler=_list)

    s = verbs.add_parser("show", help="a table of every device the profile publishes")
    s.add_argument("profile", help="built-in profile name or path to a profile YAML")
    s.add_argument("--node-name", default=DEFAULT_NODE, help=f"node the devices belong to (default: {DEFAULT_NODE})")
    s.set_defaults(handler=_show)

    r = verbs.add_parser(
        "render",
        help="the profile's ResourceSlices as YAML or JSON",
        description="Render resource.k8s.io/v1 ResourceSlices, deterministic for a node name.",
    )
    r.add_argument("profile", help="built-in profile name or path to a profile YAML")
    r.add_argument("--node-name", required=True, help="spec.nodeName and the seed of every UUID and MAC")
    r.add_argument(
        "--schema",
        action="append",
        type=schema_pin,
        default=None,
        metavar="SCHEMA[@RELEASE]",
        help="nvidia (gpu.nvidia.com), dranet (dra.net) or example (gpu.example.com), optionally pinned to a "
        "release of the real driver (default: the profile's `releases:`, else the newest release); repeatable "
        f"(default: every schema the profile has devices for). Known: {schema_choices()}",
    )
    r.add_argument("--generation", type=int, default=1, help="pool generation (default: 1)")
    r.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json"),
        default="yaml",
        help="multi-document YAML or a JSON List (default: yaml)",
    )
    r.set_defaults(handler=_render)

    t = verbs.add_parser(
        "schemas",
        help="which device kinds carry each attribute and capacity, per driver release",
        description="A table per driver: one row per attribute or capacity name (numbered families such as "
        "memorySlice<i> in one row), one column per release (nvidia@v25.8.1 … nvidia@main, dranet@v1.4.0, "
        "dranet@main), cells naming the device kinds that carry it (gpu: full GPU with MIG off; dyn-gpu: full GPU "
        "beside its dynamic MIG devices; mig: pre-created MIG; dyn-mig: dynamic MIG; vfio: GPU bound to vfio-pci; "
        "nic, vf, ipoib, rdma-only, virtual: DraNet devices). Computed by rendering each release on built-in "
        "reference hardware that has every device kind the release can publish, in the mixes it allows on a node.",
    )
    t.add_argument("--markdown", action="store_true", help="Markdown tables (as in docs/profiles.md)")
    t.add_argument(
        "--update",
        metavar="FILE",
        type=Path,
        default=None,
        help=f"with --markdown: replace the block between {BEGIN_MARKER} and {END_MARKER} in FILE "
        "instead of printing (how docs/profiles.md is regenerated: `make release-table`)",
    )
    t.set_defaults(handler=_schemas)


def _list(args: argparse.Namespace) -> int:
    del args
    names = builtin_profile_names()
    width = max(len(n) for n in names)
    for name in names:
        print(f"{name:<{width}}  {load_profile(name).description}")
    return 0


def _row(device: PublishedDevice) -> tuple[str, ...]:
    model = device.model
    kind = product = bdf = numa = root = memory = "-"
    if isinstance(model, GpuDevice):
        kind, product, bdf = "gpu", model.product.product_name, model.bdf.render()
        numa, root, memory = str(model.pci.numa_node), model.pci.root.name, binary_quantity(model.product.memory_mib)
    elif isinstance(model, PassthroughGpu):
        kind, product, bdf = "vfio", model.product.product_name, model.bdf.render()
        numa, root, memory = str(model.pci.numa_node), model.pci.root.name, binary_quantity(model.product.memory_mib)
    elif isinstance(model, MigDevice):
        kind = "mig (pre-created)" if model.precreated else "mig"
        product = f"{model.profile.name} @{model.placement.start}"
        bdf, numa, root = model.parent.bdf.render(), str(model.parent.pci.numa_node), model.parent.pci.root.name
        memory = binary_quantity(model.profile.memory_mib)
    elif isinstance(model, VgpuDevice):
        kind, product = "vgpu", model.vgpu_type.name
        bdf, numa, root = model.parent.bdf.render(), str(model.parent.pci.numa_node), model.parent.pci.root.name
        memory = binary_quantity(model.vgpu_type.framebuffer_mib)
    elif isinstance(model, NicPf | NicVf):
        kind = "nic-vf" if isinstance(model, NicVf) else "nic"
        product = model.ifname
        bdf, numa, root = model.pci.bdf.render(), str(model.pci.numa_node), model.pci.root.name
    elif isinstance(model, VirtualNic):
        kind, product = "virtual-nic", model.ifname
    elif isinstance(model, ExampleGpu):
        kind, product, memory = "example-gpu", model.model, model.memory
    return (device.ref.device, device.ref.driver, kind, product, bdf, numa.replace("None", "-"), root, memory)


def _show(args: argparse.Namespace) -> int:
    profile = load_profile(args.profile)
    rendered = render_node(resolve_inventory(profile, node_name=args.node_name))
    rows: list[tuple[str, ...]] = [("NAME", "DRIVER", "TYPE", "PRODUCT/PROFILE", "BDF", "NUMA", "PCIEROOT", "MEMORY")]
    rows += [_row(d) for d in rendered.devices.values()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"# {profile.name}: {profile.description}" if profile.description else f"# {profile.name}")
    print(f"# releases: {', '.join(profile.releases.render())}")
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _render(args: argparse.Namespace) -> int:
    profile = load_profile(args.profile)
    schemas = [schema for schema, _ in args.schema] if args.schema else None
    for _, pin in args.schema or ():
        profile = replace(profile, releases=profile.releases.pinned(pin))
    rendered = render_node(
        resolve_inventory(profile, node_name=args.node_name), schemas=schemas, generation=args.generation
    )
    items = [dict(s) for s in rendered.slices]
    if args.output == "json":
        json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout, indent=2)
        print()
    else:
        yaml.safe_dump_all(items, sys.stdout, sort_keys=False, explicit_start=True)
    return 0


def _schemas(args: argparse.Namespace) -> int:
    tables = compute_release_tables()
    if args.update is not None:
        if not args.markdown:
            print("fakedev: error: --update writes the Markdown table: add --markdown", file=sys.stderr)
            return 2
        document = args.update.read_text(encoding="utf-8")
        try:
            updated = replace_block(document, block=render_markdown(tables))
        except ValueError as exc:
            print(f"fakedev: error: {args.update}: {exc}", file=sys.stderr)
            return 1
        if updated != document:
            args.update.write_text(updated, encoding="utf-8")
        return 0
    sys.stdout.write(render_markdown(tables) if args.markdown else render_text(tables))
    return 0
