"""The release × attribute table: which device kinds carry each attribute and capacity, per driver release.

Computed, never written by hand: every release is rendered on fixed reference hardware that exercises each device kind
the release can publish, in the mixes the release allows on one node (:data:`NVIDIA_REFERENCE_NODES`,
:data:`DRANET_REFERENCE_NODES`). When a renderer learns a kind, or a release gains one, the tables below change and
the document follows (``fakedev profile schemas --markdown``). The golden capture tests classify devices with the same
:func:`published_kind`, so a kind means the same thing in the table and in the tests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from fakedev.model.inventory import DeviceKind, GpuDevice, MigDevice, NicPf, resolve_inventory
from fakedev.model.nic import LinkType
from fakedev.model.profile import MigMode, NodeProfile, parse_profile
from fakedev.model.releases import DranetRelease, NvidiaRelease
from fakedev.render import render_node
from fakedev.render.published import PublishedDevice, Schema

BEGIN_MARKER: Final = "<!-- release-table:begin -->"
END_MARKER: Final = "<!-- release-table:end -->"
REFERENCE_NODE: Final = "reference-node"
_IF_NAME: Final = "dra.net/ifName"


class PublishedKind(StrEnum):
    """A published device's kind as the release tables and golden captures name it (finer than the model's kind:
    the same GPU model publishes different shapes with and without dynamic MIG)."""

    GPU = "gpu"  # full GPU, MIG mode off
    DYN_GPU = "dyn-gpu"  # full GPU next to its dynamic MIG devices (consumes its counter set)
    MIG = "mig"  # pre-created (static) MIG device
    DYN_MIG = "dyn-mig"  # dynamic MIG device: a profile at a placement, created on prepare
    VFIO = "vfio"  # GPU bound to vfio-pci
    VGPU = "vgpu"  # fakedev's own vGPU model (extension)
    NIC = "nic"  # PCI Ethernet NIC with a host netdev
    VF = "vf"  # SR-IOV VF with a host netdev
    IPOIB = "ipoib"  # InfiniBand port with an IPoIB netdev
    RDMA_ONLY = "rdma-only"  # PCI RDMA device without a host netdev (EFA, VFs whose netdev is gone)
    VIRTUAL = "virtual"  # netdev without a PCI device
    EXAMPLE = "example"  # gpu.example.com device


def _gpu_kind(device: PublishedDevice) -> PublishedKind:
    model = device.model
    assert isinstance(model, GpuDevice)
    return PublishedKind.DYN_GPU if model.mig_mode is MigMode.DYNAMIC else PublishedKind.GPU


def _mig_kind(device: PublishedDevice) -> PublishedKind:
    model = device.model
    assert isinstance(model, MigDevice)
    return PublishedKind.MIG if model.precreated else PublishedKind.DYN_MIG


def _pf_kind(device: PublishedDevice) -> PublishedKind:
    model = device.model
    assert isinstance(model, NicPf)
    if _IF_NAME not in device.attributes:
        return PublishedKind.RDMA_ONLY  # DraNet's kind is what it saw: a PCI function whose netdev it did not find
    return PublishedKind.IPOIB if model.link is LinkType.INFINIBAND else PublishedKind.NIC


def _vf_kind(device: PublishedDevice) -> PublishedKind:
    return PublishedKind.VF if _IF_NAME in device.attributes else PublishedKind.RDMA_ONLY


_KINDS: Final[Mapping[DeviceKind, Callable[[PublishedDevice], PublishedKind]]] = {
    DeviceKind.GPU: _gpu_kind,
    DeviceKind.MIG: _mig_kind,
    DeviceKind.VGPU: lambda _: PublishedKind.VGPU,
    DeviceKind.PASSTHROUGH_GPU: lambda _: PublishedKind.VFIO,
    DeviceKind.NIC_PF: _pf_kind,
    DeviceKind.NIC_VF: _vf_kind,
    DeviceKind.VIRTUAL_NIC: lambda _: PublishedKind.VIRTUAL,
    DeviceKind.EXAMPLE_GPU: lambda _: PublishedKind.EXAMPLE,
}


def published_kind(device: PublishedDevice) -> PublishedKind:
    return _KINDS[device.model.kind](device)


# -- reference hardware ---------------------------------------------------------------------------------------------

_DYNAMIC_MIG: Final = frozenset({PublishedKind.DYN_GPU, PublishedKind.DYN_MIG})

NVIDIA_REFERENCE_NODES: Final[Mapping[NvidiaRelease, tuple[frozenset[PublishedKind], ...]]] = {
    # One node per device mix the release can publish (docs/research/nvidia-releases.md §1.1, §2.1, §3.1, §7):
    # dynamic MIG is a node-wide gate that excludes passthrough (vfio), so it gets a node of its own.
    NvidiaRelease.V25_8_1: (frozenset({PublishedKind.GPU, PublishedKind.MIG}),),
    NvidiaRelease.V25_12_0: (frozenset({PublishedKind.GPU, PublishedKind.MIG, PublishedKind.VFIO}), _DYNAMIC_MIG),
    # From v0.4.1 passthrough also gives every GPU without MIG devices a vfio sibling, which fakedev does not model
    # (render/nvidia_mix.py refuses such a node): vfio goes on a node beside pre-created MIG only.
    NvidiaRelease.V0_4_1: (
        frozenset({PublishedKind.GPU, PublishedKind.MIG}),
        frozenset({PublishedKind.MIG, PublishedKind.VFIO}),
        _DYNAMIC_MIG,
    ),
    NvidiaRelease.MAIN: (
        frozenset({PublishedKind.GPU, PublishedKind.MIG}),
        frozenset({PublishedKind.MIG, PublishedKind.VFIO}),
        _DYNAMIC_MIG,
    ),
}
"""The device kinds of each release, grouped into the nodes that may carry them together."""

_NETDEVS: Final = frozenset({PublishedKind.NIC, PublishedKind.VF, PublishedKind.IPOIB, PublishedKind.VIRTUAL})

DRANET_REFERENCE_NODES: Final[Mapping[DranetRelease, tuple[frozenset[PublishedKind], ...]]] = {
    # DraNet publishes every kind side by side in one slice (dranet-releases.md §1.1). rdma-only devices have no
    # profile field yet, so the reference cannot ask for them.
    DranetRelease.V1_4_0: (_NETDEVS,),
    DranetRelease.MAIN: (_NETDEVS,),
}

# Hopper: MIG mode toggles without a reset, so every release that has dynamic MIG publishes its full GPU beside it.
_GPU_PRODUCT: Final = "h100-sxm5-80gb"
_ROOT: Final = "pci0000:00"

# What each kind adds to a reference profile (a fragment of its top-level lists).
_FRAGMENTS: Final[Mapping[PublishedKind, Mapping[str, Sequence[Mapping[str, Any]]]]] = {
    PublishedKind.GPU: {"gpus": [{"product": _GPU_PRODUCT, "root": _ROOT, "mig": {"mode": "disabled"}}]},
    PublishedKind.MIG: {
        "gpus": [
            {
                "product": _GPU_PRODUCT,
                "root": _ROOT,
                "mig": {"mode": "static", "instances": [{"profile": "1g.10gb", "start": 0}]},
            }
        ]
    },
    # A dynamic-MIG GPU publishes both kinds; asking for either adds it once.
    PublishedKind.DYN_GPU: {"gpus": [{"product": _GPU_PRODUCT, "root": _ROOT, "mig": {"mode": "dynamic"}}]},
    PublishedKind.DYN_MIG: {"gpus": [{"product": _GPU_PRODUCT, "root": _ROOT, "mig": {"mode": "dynamic"}}]},
    PublishedKind.VFIO: {"gpus": [{"product": _GPU_PRODUCT, "root": _ROOT, "passthrough": True}]},
    # A PF with VFs publishes both kinds.
    PublishedKind.NIC: {"nics": [{"product": "connectx-7", "root": _ROOT, "vfs": 1}]},
    PublishedKind.VF: {"nics": [{"product": "connectx-7", "root": _ROOT, "vfs": 1}]},
    PublishedKind.IPOIB: {"nics": [{"product": "connectx-7", "root": _ROOT, "linkType": "infiniband"}]},
    PublishedKind.VIRTUAL: {"virtualNics": [{"name": "dummy0"}]},
}


def reference_document(
    *, schema: Schema, release: NvidiaRelease | DranetRelease, kinds: Iterable[PublishedKind]
) -> dict[str, Any]:
    """The profile (as its YAML mapping) whose hardware makes ``release`` publish ``kinds``."""
    document: dict[str, Any] = {
        "name": f"reference-{schema.value}",
        "description": f"reference hardware for {schema.value}@{release.value}",
        "releases": {schema.value: release.value},
        "numaNodes": [{"id": 0, "cpus": "0-7"}],
        "pcieRoots": [{"name": _ROOT, "numaNode": 0}],
    }
    for kind in sorted(set(kinds)):
        for key, items in _FRAGMENTS[kind].items():
            listed = document.setdefault(key, [])
            listed += [dict(item) for item in items if item not in listed]
    return document


def reference_profile(
    *, schema: Schema, release: NvidiaRelease | DranetRelease, kinds: Iterable[PublishedKind]
) -> NodeProfile:
    """:func:`reference_document` parsed: JSON is YAML, so it passes the same parser and checks as a user's file."""
    document = reference_document(schema=schema, release=release, kinds=kinds)
    return parse_profile(json.dumps(document), source=f"<reference {schema.value}@{release.value}>")


# -- shapes and the table -------------------------------------------------------------------------------------------

_NUMBERED: Final = re.compile(r"^(memorySlice|memory-slice-)[0-9]+$")


def row_name(name: str) -> str:
    """Numbered families collapse to one row: ``memorySlice3`` → ``memorySlice<i>``."""
    return _NUMBERED.sub(r"\g<1><i>", name)


@dataclass(frozen=True, kw_only=True)
class ReleaseTable:
    """One driver's table: rows are attribute and capacity names, cells the kinds that carry them per release."""

    driver: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, tuple[tuple[PublishedKind, ...], ...]], ...]


REFERENCE_ADDRESSES: Final = ("192.0.2.10/24", "2001:db8::10/64")
"""Documentation-range addresses (RFC 5737, RFC 3849): global unicast, as DraNet counts them."""


def _rendered_devices(profile: NodeProfile, *, schema: Schema) -> list[PublishedDevice]:
    inventory = resolve_inventory(profile, node_name=REFERENCE_NODE)
    # Every interface with an address of each family, so the attributes that need one (dra.net/ipv4, ipv6) show.
    interfaces = [pf.ifname for pf in inventory.nics] + [vf.ifname for pf in inventory.nics for vf in pf.vfs]
    interfaces += [v.ifname for v in inventory.virtual_nics]
    addresses = dict.fromkeys(interfaces, REFERENCE_ADDRESSES)
    rendered = render_node(inventory, schemas=[schema], addresses=addresses)
    return [d for d in rendered.devices.values() if d.ref.driver == schema.driver]


def _carriers(
    *, schema: Schema, release: NvidiaRelease | DranetRelease, nodes: tuple[frozenset[PublishedKind], ...]
) -> dict[str, set[PublishedKind]]:
    carriers: dict[str, set[PublishedKind]] = {}
    for kinds in nodes:
        for device in _rendered_devices(reference_profile(schema=schema, release=release, kinds=kinds), schema=schema):
            kind = published_kind(device)
            for name in device.attributes:
                carriers.setdefault(row_name(name), set()).add(kind)
            for name in device.capacity:
                carriers.setdefault(f"capacity: {row_name(name)}", set()).add(kind)
    return carriers


def _table(
    *,
    schema: Schema,
    references: Mapping[NvidiaRelease, tuple[frozenset[PublishedKind], ...]]
    | Mapping[DranetRelease, tuple[frozenset[PublishedKind], ...]],
) -> ReleaseTable:
    per_release = {
        f"{schema.value}@{release.value}": _carriers(schema=schema, release=release, nodes=nodes)
        for release, nodes in references.items()
    }
    names = sorted(
        {n for carriers in per_release.values() for n in carriers}, key=lambda n: (n.startswith("capacity: "), n)
    )
    order = list(PublishedKind)
    rows = tuple(
        (name, tuple(tuple(sorted(c.get(name, set()), key=order.index)) for c in per_release.values()))
        for name in names
    )
    return ReleaseTable(driver=schema.driver, columns=tuple(per_release), rows=rows)


def compute_release_tables() -> tuple[ReleaseTable, ...]:
    """The NVIDIA and the DraNet table, each release rendered on its reference hardware."""
    return (
        _table(schema=Schema.NVIDIA, references=NVIDIA_REFERENCE_NODES),
        _table(schema=Schema.DRANET, references=DRANET_REFERENCE_NODES),
    )


def _cell(kinds: tuple[PublishedKind, ...]) -> str:
    return ", ".join(k.value for k in kinds) if kinds else "—"


def render_markdown(tables: Sequence[ReleaseTable]) -> str:
    out: list[str] = []
    for table in tables:
        out.append(f"`{table.driver}`:")
        out.append("")
        out.append("| attribute / capacity | " + " | ".join(f"`{c}`" for c in table.columns) + " |")
        out.append("|---" * (len(table.columns) + 1) + "|")
        for name, cells in table.rows:
            out.append(f"| `{name}` | " + " | ".join(_cell(c) for c in cells) + " |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def render_text(tables: Sequence[ReleaseTable]) -> str:
    out: list[str] = []
    for table in tables:
        rows = [("ATTRIBUTE/CAPACITY", *table.columns)] + [(n, *(_cell(c) for c in cells)) for n, cells in table.rows]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        out.append(f"# {table.driver}")
        out += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def replace_block(document: str, *, block: str) -> str:
    """``document`` with the text between the release-table markers replaced by ``block`` (ValueError: no markers)."""
    begin, end = document.find(BEGIN_MARKER), document.find(END_MARKER)
    if begin < 0 or end < begin:
        raise ValueError(f"the document has no {BEGIN_MARKER} … {END_MARKER} block")
    return document[: begin + len(BEGIN_MARKER)] + "\n" + block + document[end:]


def committed_block(document: str) -> str:
    """The text between the markers, as :func:`replace_block` writes it."""
    begin, end = document.find(BEGIN_MARKER), document.find(END_MARKER)
    if begin < 0 or end < begin:
        raise ValueError(f"the document has no {BEGIN_MARKER} … {END_MARKER} block")
    return document[begin + len(BEGIN_MARKER) + 1 : end]
