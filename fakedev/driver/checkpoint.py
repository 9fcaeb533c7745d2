"""The plugin's checkpoint: which claims are prepared, with everything needed to undo them after a crash.

Format ``fakedev.dra/checkpoint-v1``: ``{"version", "checksum", "claims"}`` where ``checksum`` is the SHA-256 of the
canonical JSON of ``claims``. A file that fails to parse, has an unknown version or a wrong checksum stops the plugin
with a clear error and is left in place for inspection: a silent reset would orphan prepared devices.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, NotRequired, TypedDict

from fakedev.driver.fsutil import atomic_write
from fakedev.errors import CheckpointError

VERSION: Final = "fakedev.dra/checkpoint-v1"

PrepareState = Literal["PrepareStarted", "PrepareCompleted"]


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
    state: PrepareState
    devices: list[DeviceRecord]
    cdiSpecFiles: list[str]
    """File names (not paths) inside the CDI directory."""
    metadataDir: str
    """Directory name inside the metadata root, "" when none."""
    metadataGeneration: int
    statusApplied: bool
    nics: NotRequired[list[NicRecord]]
    mdevs: NotRequired[list[str]]
    """UUIDs of the mediated devices prepare created (vGPUs), removed again on unprepare."""


def _canonical(claims: dict[str, ClaimRecord]) -> bytes:
    return json.dumps(claims, sort_keys=True, separators=(",", ":")).encode()


def compute_checksum(claims: dict[str, ClaimRecord]) -> str:
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
    except ValueError as exc:
        raise CheckpointError(
            f"{source}: not valid JSON ({exc}); kept for inspection, the plugin will not start"
        ) from exc
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        version = doc.get("version") if isinstance(doc, dict) else None
        raise CheckpointError(f"{source}: unknown checkpoint version {version!r} (expected {VERSION!r})")
    claims = doc.get("claims")
    if not isinstance(claims, dict):
        raise CheckpointError(f"{source}: 'claims' is missing or not an object")
    if doc.get("checksum") != compute_checksum(claims):
        raise CheckpointError(
            f"{source}: checksum mismatch — the file is corrupt; kept for inspection, the plugin will not start"
        )
    return claims


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

    def save(self, claims: dict[str, ClaimRecord]) -> None:
        atomic_write(self.path, render_checkpoint(claims), mode=0o600)
