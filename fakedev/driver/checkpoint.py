"""The plugin's checkpoint: which claims are prepared, with everything needed to undo them after a crash.

Format ``fakedev.dra/checkpoint-v2``: ``{"version", "checksum", "claims"}`` where ``checksum`` is the SHA-256 of the
canonical JSON of ``claims``. A file that fails to parse, has an unknown version or a wrong checksum stops the plugin
with a clear error and is left in place for inspection: a silent reset would orphan prepared devices.

A ``checkpoint-v1`` file (written before the upgrade) still loads: its records carried two fields nothing read
(``state``, always ``PrepareCompleted``, and ``statusApplied``), which are dropped; the next save writes v2.

This module is also the one boundary between records and the driver's types: NIC records are converted to and from
:class:`~fakedev.nics.plan.PreparedNic` here, and device records into the kubelet's prepared devices.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypedDict

from fakedev.driver.fsutil import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, BeforeRename, atomic_write
from fakedev.errors import CheckpointError
from fakedev.nics.plan import NicAssignment, PreparedNic
from kubeletapi.types import PreparedDevice

VERSION: Final = "fakedev.dra/checkpoint-v2"
VERSION_V1: Final = "fakedev.dra/checkpoint-v1"
_V1_ONLY_FIELDS: Final = ("state", "statusApplied")


class DeviceRecord(TypedDict):
    requestNames: list[str]
    pool: str
    device: str
    cdiDeviceIDs: list[str]
    shareID: str | None


class NicRecord(TypedDict):
    device: str
    hostIfname: str
    podIfname: str
    mac: str
    mtu: int
    addresses: list[str]
    hardwareMac: str
    hardwareMtu: int


class ClaimRecord(TypedDict):
    uid: str
    namespace: str
    name: str
    devices: list[DeviceRecord]
    cdiSpecFiles: list[str]
    """File names (not paths) inside the CDI directory."""
    metadataDir: str
    """Directory name inside the metadata root, "" when none."""
    metadataGeneration: int
    nics: list[NicRecord]
    mdevs: list[str]
    """UUIDs of the mediated devices prepare created (vGPUs), removed again on unprepare."""


def _canonical(claims: Mapping[str, Any]) -> bytes:
    return json.dumps(claims, sort_keys=True, separators=(",", ":")).encode()


def compute_checksum(claims: Mapping[str, Any]) -> str:
    return hashlib.sha256(_canonical(claims)).hexdigest()


def render_checkpoint(claims: dict[str, ClaimRecord]) -> bytes:
    """The file: the claims serialized once (canonically, so the checksum covers exactly the bytes written), in a
    compact document; every prepare and unprepare rewrites it, so its cost grows with the claims held."""
    canonical = _canonical(claims)
    checksum = hashlib.sha256(canonical).hexdigest()
    return b'{"checksum":"%s","claims":%s,"version":"%s"}\n' % (checksum.encode(), canonical, VERSION.encode())


def parse_checkpoint(data: bytes, *, source: str) -> dict[str, ClaimRecord]:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:  # bad UTF-8 and bad JSON are ValueErrors; nesting too deep is not
        raise CheckpointError(
            f"{source}: not valid JSON ({exc}); kept for inspection, the plugin will not start"
        ) from exc
    version = doc.get("version") if isinstance(doc, dict) else None
    if version not in (VERSION, VERSION_V1):
        raise CheckpointError(f"{source}: unknown checkpoint version {version!r} (expected {VERSION!r})")
    claims = doc.get("claims")
    if not isinstance(claims, dict):
        raise CheckpointError(f"{source}: 'claims' is missing or not an object")
    # The checksum covers the claims as written, so a v1 file is checked before it is converted.
    if doc.get("checksum") != compute_checksum(claims):
        raise CheckpointError(
            f"{source}: checksum mismatch — the file is corrupt; kept for inspection, the plugin will not start"
        )
    return _from_v1(claims, source=source) if version == VERSION_V1 else claims


def _from_v1(claims: Mapping[str, Any], *, source: str) -> dict[str, ClaimRecord]:
    out: dict[str, ClaimRecord] = {}
    for uid, record in claims.items():
        if not isinstance(record, dict):
            raise CheckpointError(f"{source}: claims.{uid}: not an object; kept for inspection")
        converted = {k: v for k, v in record.items() if k not in _V1_ONLY_FIELDS}
        # Files written before NICs (or mdevs) were supported have no such lists.
        converted.setdefault("nics", [])
        converted.setdefault("mdevs", [])
        out[uid] = converted  # type: ignore[assignment]  # JSON from disk, shaped as v2 from here on
    return out


def nic_record(nic: PreparedNic) -> NicRecord:
    a = nic.assignment
    return {
        "device": a.device,
        "hostIfname": a.host_ifname,
        "podIfname": a.pod_ifname,
        "mac": a.mac,
        "mtu": a.mtu,
        "addresses": list(a.addresses),
        "hardwareMac": nic.hardware_mac,
        "hardwareMtu": nic.hardware_mtu,
    }


def prepared_nic(record: NicRecord) -> PreparedNic:
    return PreparedNic(
        assignment=NicAssignment(
            device=record["device"],
            host_ifname=record["hostIfname"],
            pod_ifname=record["podIfname"],
            mac=record["mac"],
            mtu=record["mtu"],
            addresses=tuple(record["addresses"]),
        ),
        hardware_mac=record["hardwareMac"],
        hardware_mtu=record["hardwareMtu"],
    )


def prepared_device(record: DeviceRecord) -> PreparedDevice:
    return PreparedDevice(
        request_names=tuple(record["requestNames"]),
        pool=record["pool"],
        device=record["device"],
        cdi_device_ids=tuple(record["cdiDeviceIDs"]),
        share_id=record["shareID"],
    )


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    path: Path

    def load(self) -> dict[str, ClaimRecord]:
        """The recorded claims; an absent file means none."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        return parse_checkpoint(data, source=str(self.path))

    def save(self, claims: dict[str, ClaimRecord], *, before_rename: BeforeRename | None = None) -> None:
        atomic_write(
            self.path,
            render_checkpoint(claims),
            mode=PRIVATE_FILE_MODE,
            dir_mode=PRIVATE_DIR_MODE,
            before_rename=before_rename,
        )
