"""Taking a snapshot of the node for the invariant checker: the driver's files, its checkpoint, the claims' status
through the API, and its NICs through netlink (the I/O half of :mod:`fakedev.cli.torture.invariants`)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import cdi
from fakedev.cli.torture.invariants import NicState, NodeSnapshot
from fakedev.driver import cdi_layout, metadata
from fakedev.driver.checkpoint import Checkpoint, ClaimRecord
from fakedev.driver.fsutil import temp_file_target
from fakedev.errors import CheckpointError
from kubeclient import KubeClient
from kubeclient.resources import RESOURCE_CLAIMS
from linuxns import netlink


@dataclass(frozen=True, kw_only=True)
class NodeFiles:
    """Where the plugin under torture keeps its files."""

    driver: str
    cdi_dir: Path
    metadata_root: Path
    checkpoint: Path
    writes_status: bool = True
    """Whether the driver writes ``status.devices`` (no NVIDIA release does)."""


def read_snapshot(
    files: NodeFiles,
    *,
    kube: KubeClient | None,
    namespace: str,
    nic_netns: str | None,
) -> NodeSnapshot:
    """``kube`` None: leave the status unread; ``nic_netns`` None: no NICs to look at."""
    specs, temps = _read_cdi(files)
    metadata_dirs, metadata_files, metadata_temps = _read_metadata(files.metadata_root)
    state_temps = [
        str(p)
        for p in sorted(files.checkpoint.parent.glob(".*.tmp"))
        if temp_file_target(p.name) == files.checkpoint.name
    ]
    checkpoint: Mapping[str, ClaimRecord] | None
    try:
        checkpoint, error = Checkpoint(path=files.checkpoint).load(), None
    except CheckpointError as exc:
        checkpoint, error = None, str(exc)
    return NodeSnapshot(
        specs=specs,
        metadata_dirs=metadata_dirs,
        metadata_files=metadata_files,
        temp_files=(*temps, *metadata_temps, *state_temps),
        checkpoint=checkpoint,
        checkpoint_error=error,
        status=read_status(kube, namespace=namespace, driver=files.driver) if kube is not None else None,
        writes_status=files.writes_status,
        nics=read_nics(nic_netns) if nic_netns is not None else None,
    )


def _ours(name: str, *, driver: str) -> bool:
    """A claim's spec file of ``driver`` (the base spec some releases write is the node's: no claim owns it)."""
    return cdi_layout.is_claim_spec(name, driver=driver) or name.startswith(
        metadata.metadata_spec_driver_prefix(driver)
    )


def _temp_of_ours(name: str, *, driver: str) -> bool:
    """A temp file of a write of one of ``driver``'s specs, base spec included (a crash may cut that short too)."""
    return name.startswith((*cdi_layout.spec_file_prefixes(driver), metadata.metadata_spec_driver_prefix(driver)))


def _read_cdi(files: NodeFiles) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    specs: dict[str, tuple[str, ...]] = {}
    temps: list[str] = []
    entries = sorted(files.cdi_dir.iterdir()) if files.cdi_dir.is_dir() else []
    for entry in entries:
        if entry.name.startswith("."):
            if entry.name.endswith(".tmp") and _temp_of_ours(entry.name[1:], driver=files.driver):
                temps.append(str(entry))
            continue
        if not _ours(entry.name, driver=files.driver):
            continue
        try:
            spec = cdi.load_spec_file(entry)  # JSON or YAML, as the release writes it
            mounts = tuple(m.host_path for d in spec.devices for m in d.container_edits.mounts)
        except cdi.CdiError:
            mounts = ("<unreadable spec>",)  # a torn spec mounts nothing that exists: the check reports it
        specs[entry.name] = mounts
    return specs, temps


def _read_metadata(root: Path) -> tuple[frozenset[str], frozenset[str], list[str]]:
    if not root.is_dir():
        return frozenset(), frozenset(), []
    dirs = frozenset(p.name for p in root.iterdir())
    files: set[str] = set()
    temps: list[str] = []
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        if temp_file_target(path.name) is not None:
            temps.append(str(path))
        else:
            files.add(str(path))
    return dirs, frozenset(files), temps


def read_status(kube: KubeClient, *, namespace: str, driver: str) -> dict[str, frozenset[tuple[str, str]]]:
    """Each claim of the namespace by UID → this driver's (pool, device) entries in its ``status.devices``."""
    out: dict[str, frozenset[tuple[str, str]]] = {}
    for claim in kube.list(RESOURCE_CLAIMS, namespace=namespace):
        entries = (claim.get("status") or {}).get("devices") or []
        out[claim["metadata"]["uid"]] = frozenset(
            (e["pool"], e["device"]) for e in entries if e.get("driver") == driver
        )
    return out


def read_nics(netns: str) -> dict[str, NicState]:
    """Every interface in ``netns`` by name; link-local IPv6 addresses (the kernel's own) are left out."""
    out: dict[str, NicState] = {}
    with netlink(netns) as ipr:
        addresses: dict[int, list[str]] = {}
        for a in ipr.get_addr():
            address = a.get_attr("IFA_ADDRESS")
            if ipaddress.ip_address(address).is_link_local:
                continue
            addresses.setdefault(a["index"], []).append(f"{address}/{a['prefixlen']}")
        for link in ipr.get_links():
            out[link.get_attr("IFLA_IFNAME")] = NicState(
                present=True,
                mac=link.get_attr("IFLA_ADDRESS"),
                mtu=link.get_attr("IFLA_MTU"),
                addresses=tuple(sorted(addresses.get(link["index"], []))),
            )
    return out
