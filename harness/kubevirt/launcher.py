"""What virt-launcher does with a DRA GPU or host device: find its metadata file, read it, write a libvirt hostdev.

The rules, as virt-launcher applies them inside the compute container:

- the request's directory is ``<root>/resourceclaims/<resourceClaimName>/<request>/`` for a claim the VMI names
  directly, ``<root>/resourceclaimtemplates/<pod claim name>/<request>/`` for one made from a template;
- it holds exactly one ``*-metadata.json``;
- of the JSON stream in it, only the ``metadata.resource.k8s.io/v1alpha1`` object is decoded;
- the request has exactly one device;
- an unqualified ``mdevUUID`` attribute makes an mdev hostdev; otherwise ``resource.kubernetes.io/pciBusID``,
  which must match the BDF pattern, makes a PCI hostdev (``managed='no'``: the driver bound it to vfio-pci).

The same rules are implemented in Go by the launcher stand-in that runs inside a container
(``harness/kubevirt/standin``); the verifier compares the two.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Final

from harness.errors import LauncherError
from harness.kubevirt.vmi import DraDevice

ATTRIBUTES_ROOT: Final = PurePosixPath("/var/run/kubernetes.io/dra-device-attributes")
V1ALPHA1: Final = "metadata.resource.k8s.io/v1alpha1"
PCI_BUS_ID: Final = "resource.kubernetes.io/pciBusID"
PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"
MDEV_UUID: Final = "mdevUUID"
BDF: Final = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
ALIAS_PREFIXES: Final = {"gpu": "ua-dra-gpu-", "hostDevice": "ua-dra-hostdevice-"}


@dataclass(frozen=True, kw_only=True)
class ContainerFiles:
    """The compute container's view of the attributes tree: a directory listing and file reads."""

    list_dir: Callable[[PurePosixPath], list[str]]
    read: Callable[[PurePosixPath], bytes]


@dataclass(frozen=True, kw_only=True)
class HostDevice:
    device: DraDevice
    kind: str
    """``pci`` or ``mdev``."""
    address: str
    """The BDF as read, or the mdev UUID."""
    metadata_file: PurePosixPath
    metadata_device: Mapping[str, Any]
    """The device entry of the v1alpha1 object (driver, pool, name, attributes)."""


def request_dir(device: DraDevice) -> PurePosixPath:
    if device.claim.claim_name is not None:
        return ATTRIBUTES_ROOT / "resourceclaims" / device.claim.claim_name / device.request
    return ATTRIBUTES_ROOT / "resourceclaimtemplates" / device.claim.name / device.request


def _objects(stream: bytes) -> list[Any]:
    """Decode a stream of JSON values back to back (what a Go json.Decoder loop reads)."""
    decoder = json.JSONDecoder()
    text = stream.decode()
    out: list[Any] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            return out
        value, pos = decoder.raw_decode(text, pos)
        out.append(value)


def read_host_device(device: DraDevice, files: ContainerFiles) -> HostDevice:
    directory = request_dir(device)
    try:
        names = sorted(n for n in files.list_dir(directory) if n.endswith("-metadata.json"))
    except FileNotFoundError:
        names = []
    if len(names) != 1:
        raise LauncherError(
            "launcher/one-metadata-file",
            f"{directory}: expected exactly one *-metadata.json, found {len(names)}"
            + (f": {', '.join(names)}" if names else ""),
        )
    path = directory / names[0]
    try:
        objects = _objects(files.read(path))
    except (ValueError, UnicodeDecodeError) as exc:
        raise LauncherError("launcher/v1alpha1-object", f"{path}: not a JSON stream: {exc}") from exc
    chosen = next((o for o in objects if isinstance(o, Mapping) and o.get("apiVersion") == V1ALPHA1), None)
    if chosen is None:
        seen = [o.get("apiVersion") for o in objects if isinstance(o, Mapping)]
        raise LauncherError("launcher/v1alpha1-object", f"{path}: no {V1ALPHA1} object in the stream (found {seen})")
    requests = [r for r in chosen.get("requests") or [] if isinstance(r, Mapping) and r.get("name") == device.request]
    devices = [d for r in requests for d in r.get("devices") or []]
    if len(devices) != 1:
        raise LauncherError(
            "launcher/one-device",
            f"{path}: request {device.request!r} has {len(devices)} devices, expected exactly one",
        )
    entry = devices[0]
    attributes = entry.get("attributes") or {}
    mdev = (attributes.get(MDEV_UUID) or {}).get("string")
    if mdev:
        return HostDevice(device=device, kind="mdev", address=str(mdev), metadata_file=path, metadata_device=entry)
    bus_id = (attributes.get(PCI_BUS_ID) or {}).get("string")
    if not bus_id:
        raise LauncherError("launcher/address", f"{path}: device {entry.get('name')!r} has no mdevUUID or pciBusID")
    if not BDF.match(str(bus_id)):
        raise LauncherError("launcher/bdf-format", f"{path}: pciBusID {bus_id!r} is not a PCI address (DDDD:BB:DD.F)")
    return HostDevice(device=device, kind="pci", address=str(bus_id), metadata_file=path, metadata_device=entry)


def render_hostdev(host: HostDevice) -> str:
    """The ``<hostdev>`` element virt-launcher writes into the domain XML (one line per element, two-space indent)."""
    alias = ALIAS_PREFIXES[host.device.kind] + host.device.name
    if host.kind == "mdev":
        return (
            "<hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci'>\n"
            f"  <source>\n    <address uuid='{host.address}'/>\n  </source>\n"
            f"  <alias name='{alias}'/>\n</hostdev>"
        )
    domain, bus, rest = host.address.split(":")
    slot, function = rest.split(".")
    return (
        "<hostdev mode='subsystem' type='pci' managed='no'>\n"
        "  <source>\n"
        f"    <address domain='0x{int(domain, 16):04x}' bus='0x{int(bus, 16):02x}' slot='0x{int(slot, 16):02x}'"
        f" function='0x{int(function, 16):x}'/>\n"
        "  </source>\n"
        f"  <alias name='{alias}'/>\n</hostdev>"
    )
