"""The plugin's checkpoint: which claims are prepared, with everything needed to undo them after a crash, and
which ``status.devices`` writes are still owed.

Today's format is the journal ``fakedev.dra/checkpoint-v3`` (:mod:`fakedev.driver.journal` writes it; this module
renders, parses and folds its lines). Older files load and are rewritten as a journal:

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
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, NotRequired, TypedDict

import orjson

from fakedev.driver.fsutil import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, atomic_write
from fakedev.errors import CheckpointError
from fakedev.nics.plan import NicAssignment, PreparedNic
from kubeletapi.types import PreparedDevice

VERSION_V3: Final = "fakedev.dra/checkpoint-v3"
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
    unconfirmed: NotRequired[bool]
    """Written before the API server's answer confirmed the allocation it was planned from (a watch cache's): not
    trusted until a read has (:meth:`fakedev.driver.state.ClaimState.held`); absent once confirmed."""
    bootId: NotRequired[str]
    """The node's boot in which the claim's files were written without fsync (:mod:`fakedev.driver.boot`); the
    record is trusted only in that boot. Absent: the files were fsynced (or live on a volatile CDI directory)."""


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


class StatusOwed(TypedDict):
    """A ``status.devices`` write the driver owes a claim (``devices`` empty: clear ours), until it is sent."""

    uid: str
    namespace: str
    name: str
    devices: list[dict[str, Any]]
    token: str
    """Tells this write from a later one of the same claim: only its own ``sent`` entry settles it."""


class PutEntry(TypedDict):
    op: Literal["put"]
    record: ClaimRecord


class DelEntry(TypedDict):
    op: Literal["del"]
    uid: str


class OweEntry(TypedDict):
    op: Literal["owe"]
    status: StatusOwed


class SentEntry(TypedDict):
    op: Literal["sent"]
    uid: str
    token: str


JournalEntry = PutEntry | DelEntry | OweEntry | SentEntry


@dataclass(frozen=True, kw_only=True)
class JournalState:
    """The journal folded: prepared claims by UID, and the status writes owed by UID (at most one each)."""

    claims: Mapping[str, ClaimRecord] = field(default_factory=dict)
    owed: Mapping[str, StatusOwed] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ParsedFile:
    state: JournalState
    lines: int
    """Entry lines of a v3 journal (0 for older formats)."""
    needs_rewrite: bool
    """An older format, a missing file, or a torn tail: the file must be rewritten before anything is appended."""


JOURNAL_HEADER: Final = b'{"version":"%s"}\n' % VERSION_V3.encode()


def put_entry(record: ClaimRecord) -> PutEntry:
    return {"op": "put", "record": record}


def del_entry(uid: str) -> DelEntry:
    return {"op": "del", "uid": uid}


def owe_entry(status: StatusOwed) -> OweEntry:
    return {"op": "owe", "status": status}


def sent_entry(*, uid: str, token: str) -> SentEntry:
    return {"op": "sent", "uid": uid, "token": token}


def render_entry(entry: JournalEntry) -> bytes:
    body = orjson.dumps(entry, option=orjson.OPT_SORT_KEYS)
    return b"%08x %s\n" % (zlib.crc32(body), body)


def fold_entries(state: JournalState, entries: Sequence[JournalEntry]) -> JournalState:
    """The state after ``entries`` (pure; new mappings, so readers of the old state are never disturbed).

    ``del`` forgets a claim and any write owed to it (an ``owe`` after it in the same batch owes the clear)."""
    claims, owed = dict(state.claims), dict(state.owed)
    for e in entries:
        fold_entry(e, claims=claims, owed=owed)
    return JournalState(claims=claims, owed=owed)


def fold_entry(entry: JournalEntry, *, claims: dict[str, ClaimRecord], owed: dict[str, StatusOwed]) -> None:
    """Fold one entry into the (caller's own, fresh) mappings of :func:`fold_entries`."""
    if entry["op"] == "put":
        claims[entry["record"]["uid"]] = entry["record"]
    elif entry["op"] == "del":
        claims.pop(entry["uid"], None)
        owed.pop(entry["uid"], None)
    elif entry["op"] == "owe":
        owed[entry["status"]["uid"]] = entry["status"]
    elif (
        entry["op"] == "sent" and (current := owed.get(entry["uid"])) is not None and current["token"] == entry["token"]
    ):
        del owed[entry["uid"]]


def entry_claim(entry: PutEntry | DelEntry) -> str:
    """The UID of the claim a ``put`` or ``del`` is about."""
    return entry["record"]["uid"] if entry["op"] == "put" else entry["uid"]


def render_journal(state: JournalState) -> bytes:
    """A fresh journal holding exactly ``state`` (what compaction writes)."""
    entries: list[JournalEntry] = [put_entry(r) for _, r in sorted(state.claims.items())]
    entries += [owe_entry(o) for _, o in sorted(state.owed.items())]
    return JOURNAL_HEADER + b"".join(render_entry(e) for e in entries)


def _parse_entry_line(line: bytes) -> JournalEntry | None:
    """A line's entry, or None when the line is torn or garbled (a bad checksum, bad JSON, an unknown op)."""
    crc, space, body = line.partition(b" ")
    if not space or len(crc) != 8:
        return None
    try:
        if int(crc, 16) != zlib.crc32(body):
            return None
        entry = orjson.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(entry, dict) or entry.get("op") not in ("put", "del", "owe", "sent"):
        return None
    return entry  # type: ignore[return-value]  # checksummed JSON of our own rendering


def parse_journal(data: bytes, *, source: str) -> ParsedFile:
    """A v3 journal: every good line folded; a bad tail (a batch cut short) dropped; a bad line followed by a good
    one is corruption (CheckpointError)."""
    header, _, rest = data.partition(b"\n")
    if header + b"\n" != JOURNAL_HEADER:
        raise CheckpointError(f"{source}: not a {VERSION_V3} journal header; kept for inspection")
    entries: list[JournalEntry] = []
    bad_at: int | None = None
    lines = rest.split(b"\n")
    torn = lines[-1] != b""  # the last batch's final newline never reached the disk
    if not torn:
        lines.pop()
    for number, line in enumerate(lines, start=2):
        entry = _parse_entry_line(line) if line else None
        if entry is None:
            bad_at = number if bad_at is None else bad_at
            continue
        if bad_at is not None:
            raise CheckpointError(
                f"{source}:{bad_at}: damaged journal line before good ones — the file is corrupt; kept for "
                "inspection, the plugin will not start"
            )
        entries.append(entry)
    state = fold_entries(JournalState(), entries)
    _check_records(state.claims, source=source)
    return ParsedFile(state=state, lines=len(entries), needs_rewrite=torn or bad_at is not None)


def _check_records(claims: Mapping[str, Any], *, source: str) -> None:
    for uid, record in claims.items():
        if not isinstance(record, dict) or record.get("uid") != uid:
            raise CheckpointError(f"{source}: claims.{uid}: not a claim record; kept for inspection")


def parse_checkpoint_file(data: bytes, *, source: str) -> ParsedFile:
    """Any checkpoint this plugin ever wrote: a v3 journal, or a v2 or v1 document (their claims, to be rewritten
    as a journal). An empty file is no checkpoint of ours (every one starts with its version): CheckpointError."""
    if data.startswith(JOURNAL_HEADER):
        return parse_journal(data, source=source)
    return ParsedFile(state=JournalState(claims=parse_checkpoint(data, source=source)), lines=0, needs_rewrite=True)


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
    """Read-only access for tools (torture, soak, ``fakedev plugin claims``); the plugin writes through
    :class:`~fakedev.driver.journal.ClaimJournal`."""

    path: Path

    def read(self) -> JournalState:
        """The recorded claims and owed status writes; an absent file means none."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return JournalState()
        return parse_checkpoint_file(data, source=str(self.path)).state

    def load(self) -> dict[str, ClaimRecord]:
        """The recorded claims; an absent file means none."""
        return dict(self.read().claims)

    def save(self, claims: Mapping[str, ClaimRecord]) -> None:
        """Replace the file with a journal of exactly ``claims`` (tools and tests; never while a plugin runs)."""
        atomic_write(
            self.path,
            render_journal(JournalState(claims=dict(claims))),
            mode=PRIVATE_FILE_MODE,
            dir_mode=PRIVATE_DIR_MODE,
        )
