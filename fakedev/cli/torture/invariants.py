"""The invariants a crash-safe plugin keeps, checked on a snapshot of the node against the ledger (pure, no I/O).

- every held claim has its checkpoint record (answering what the client was told), its CDI specs and every metadata
  file those specs mount; a released claim has none of these, and nothing on the node belongs to no claim;
- no temp file of an interrupted write survives a restart (nor the end of a run);
- ``status.devices`` of a current claim lists exactly the devices its checkpoint record has (none once released,
  none ever for a driver that writes no status, as NVIDIA's);
- a NIC not held by a claim is as the hardware has it (on the node, hardware MAC and MTU, no address), and a held
  one carries the configuration its record names;
- after the last unprepare the CDI directory, the metadata root and the checkpoint hold no claim at all.

Claims in doubt (their last call was cut short) may have any subset of their files; the kubelet's next call about
them settles that, and the next check judges the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from fakedev.cli.torture.ledger import Belief, ClaimBelief
from fakedev.driver import cdi_layout, metadata
from fakedev.driver.checkpoint import ClaimRecord, prepared_device
from fakedev.nics.ports import NicPort


class Rule(StrEnum):
    """Which invariant a violation breaks."""

    FILES = "files"
    TEMP_FILES = "temp files"
    CHECKPOINT = "checkpoint"
    STATUS = "status"
    NICS = "nics"
    ANSWER = "answer"
    PROCESS = "process"


SETTLING_RULES: Final = frozenset({Rule.STATUS, Rule.TEMP_FILES})
"""What a live plugin may still be finishing while the node is read: a status write on its way, a file being
written (a start-up's owed status writes may compact the journal, whose temp file lives for milliseconds). A
violation of these counts only if it is still there once the checker has waited."""


def may_settle(found: Sequence[Violation]) -> bool:
    """Whether every violation found may still go away by itself (pure)."""
    return all(v.rule in SETTLING_RULES for v in found)


@dataclass(frozen=True, kw_only=True)
class Violation:
    rule: Rule
    detail: str

    def render(self) -> str:
        return f"{self.rule.value}: {self.detail}"


@dataclass(frozen=True, kw_only=True)
class NicState:
    """One NIC as netlink shows it in the node's namespace; ``present`` False: not there (moved, or unplugged)."""

    present: bool
    mac: str = ""
    mtu: int = 0
    addresses: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class NodeSnapshot:
    """What is on the node (and in the API) between two calls."""

    specs: Mapping[str, tuple[str, ...]]
    """The driver's CDI spec files (name → the host paths they mount)."""
    metadata_dirs: frozenset[str]
    """Top-level entries of the metadata root."""
    metadata_files: frozenset[str]
    """Every regular file below the metadata root, as an absolute path."""
    temp_files: tuple[str, ...]
    """Temp files of interrupted writes in the CDI directory (the driver's), the metadata tree and the state dir."""
    checkpoint: Mapping[str, ClaimRecord] | None
    checkpoint_error: str | None = None
    status: Mapping[str, frozenset[tuple[str, str]]] | None = None
    """Current claims by UID → the (pool, device) entries this driver has in their ``status.devices``; None: not
    read."""
    writes_status: bool = True
    """False: the driver writes no ``status.devices`` (NVIDIA), so every claim's entries must stay empty."""
    nics: Mapping[str, NicState] | None = None
    """By node-side interface name; None: no NICs in this run."""


@dataclass(frozen=True, kw_only=True)
class CheckScope:
    """How a snapshot is to be judged."""

    driver: str
    ports: Sequence[NicPort] = ()
    """The node's NICs as the hardware has them (empty: no NICs)."""
    device_ifnames: Mapping[str, str] | None = None
    """Allocated device name → its node-side interface (NIC profiles)."""


def compute_violations(snapshot: NodeSnapshot, claims: Sequence[ClaimBelief], *, scope: CheckScope) -> list[Violation]:
    """Every invariant ``snapshot`` breaks, given what the client believes about ``claims`` (every UID of the run)."""
    out: list[Violation] = []
    if snapshot.checkpoint is None:
        return [Violation(rule=Rule.CHECKPOINT, detail=snapshot.checkpoint_error or "the checkpoint cannot be read")]
    out += [Violation(rule=Rule.TEMP_FILES, detail=f"left behind: {t}") for t in snapshot.temp_files]
    owned_specs: set[str] = set()
    owned_dirs: set[str] = set()
    for claim in claims:
        specs = _specs_of(snapshot, claim, driver=scope.driver)
        record = snapshot.checkpoint.get(claim.uid)
        dirs = {metadata.host_claim_dir_name(namespace=claim.namespace, name=claim.name, uid=claim.uid)}
        if record is not None:
            dirs.add(record["metadataDir"])
        present_dirs = dirs & snapshot.metadata_dirs
        if claim.belief is Belief.HELD:
            out += _check_held(snapshot, claim, record=record, specs=specs)
        elif claim.belief is Belief.RELEASED:
            out += _check_released(claim, record=record, specs=specs, dirs=present_dirs)
        if claim.belief is not Belief.RELEASED:
            owned_specs.update(specs)
            owned_dirs.update(present_dirs)
    known = {c.uid for c in claims}
    out += [
        Violation(rule=Rule.CHECKPOINT, detail=f"a record of {uid}, a claim this run never prepared")
        for uid in sorted(set(snapshot.checkpoint) - known)
    ]
    stray_specs = sorted(set(snapshot.specs) - owned_specs - _released_specs(snapshot, claims, driver=scope.driver))
    out += [Violation(rule=Rule.FILES, detail=f"CDI spec {s} belongs to no claim") for s in stray_specs]
    stray_dirs = sorted(snapshot.metadata_dirs - owned_dirs - _released_dirs(snapshot, claims))
    out += [Violation(rule=Rule.FILES, detail=f"metadata directory {d} belongs to no claim") for d in stray_dirs]
    out += compute_status_violations(snapshot, claims)
    if snapshot.nics is not None:
        out += _check_nics(snapshot.nics, claims, checkpoint=snapshot.checkpoint, scope=scope)
    return out


def compute_status_violations(snapshot: NodeSnapshot, claims: Sequence[ClaimBelief]) -> list[Violation]:
    """``status.devices`` against the checkpoint, for current claims whose status was read (a claim the run has
    deleted has none to judge); a claim in doubt is judged after its next call settles it."""
    if snapshot.status is None or snapshot.checkpoint is None:
        return []
    out: list[Violation] = []
    for claim in claims:
        if not claim.current or claim.belief.in_doubt or claim.uid not in snapshot.status:
            continue
        record = snapshot.checkpoint.get(claim.uid)
        want: frozenset[tuple[str, str]] = frozenset()
        if record is not None and snapshot.writes_status:
            want = frozenset((d["pool"], d["device"]) for d in record["devices"])
        got = snapshot.status[claim.uid]
        if got != want:
            out.append(
                Violation(
                    rule=Rule.STATUS,
                    detail=f"{_name(claim)}: status.devices lists {sorted(got)}, the checkpoint {sorted(want)}",
                )
            )
    return out


def compute_final_violations(snapshot: NodeSnapshot) -> list[Violation]:
    """After every claim was unprepared: nothing of any claim is left anywhere."""
    out = [Violation(rule=Rule.FILES, detail=f"CDI spec {s} left after the last unprepare") for s in snapshot.specs]
    out += [
        Violation(rule=Rule.FILES, detail=f"metadata {d} left after the last unprepare")
        for d in sorted(snapshot.metadata_dirs)
    ]
    if snapshot.checkpoint:
        out.append(
            Violation(
                rule=Rule.CHECKPOINT, detail=f"records left after the last unprepare: {sorted(snapshot.checkpoint)}"
            )
        )
    return out


def _name(claim: ClaimBelief) -> str:
    return f"{claim.namespace}/{claim.name} ({claim.uid})"


def _specs_of(snapshot: NodeSnapshot, claim: ClaimBelief, *, driver: str) -> set[str]:
    claim_specs = cdi_layout.claim_spec_files(driver=driver, claim_uid=claim.uid)
    prefix = metadata.metadata_spec_prefix(driver=driver, claim_uid=claim.uid)
    return {s for s in snapshot.specs if s in claim_specs or s.startswith(prefix)}


def _released_specs(snapshot: NodeSnapshot, claims: Sequence[ClaimBelief], *, driver: str) -> set[str]:
    """Specs of released claims: reported by the claim's own check, not again as belonging to nobody."""
    return {s for c in claims if c.belief is Belief.RELEASED for s in _specs_of(snapshot, c, driver=driver)}


def _released_dirs(snapshot: NodeSnapshot, claims: Sequence[ClaimBelief]) -> set[str]:
    names = {
        metadata.host_claim_dir_name(namespace=c.namespace, name=c.name, uid=c.uid)
        for c in claims
        if c.belief is Belief.RELEASED
    }
    return names & snapshot.metadata_dirs


def _check_held(
    snapshot: NodeSnapshot, claim: ClaimBelief, *, record: ClaimRecord | None, specs: set[str]
) -> list[Violation]:
    if record is None:
        return [Violation(rule=Rule.CHECKPOINT, detail=f"{_name(claim)} is held but has no checkpoint record")]
    out: list[Violation] = []
    recorded = tuple(prepared_device(d) for d in record["devices"])
    if claim.answer is not None and recorded != claim.answer:
        out.append(Violation(rule=Rule.CHECKPOINT, detail=f"{_name(claim)}: the record's devices are not the answer"))
    if (record["namespace"], record["name"]) != (claim.namespace, claim.name):
        out.append(
            Violation(
                rule=Rule.CHECKPOINT,
                detail=f"{_name(claim)} is recorded as {record['namespace']}/{record['name']}",
            )
        )
    out += [
        Violation(rule=Rule.FILES, detail=f"{_name(claim)} is held but its CDI spec {f} is missing")
        for f in record["cdiSpecFiles"]
        if f not in snapshot.specs
    ]
    if record["metadataDir"] not in snapshot.metadata_dirs:
        out.append(Violation(rule=Rule.FILES, detail=f"{_name(claim)} is held but its metadata directory is missing"))
    out += [
        Violation(rule=Rule.FILES, detail=f"{_name(claim)} is held but {spec} mounts {path}, which is missing")
        for spec in sorted(specs)
        for path in snapshot.specs[spec]
        if path not in snapshot.metadata_files
    ]
    return out


def _check_released(
    claim: ClaimBelief, *, record: ClaimRecord | None, specs: set[str], dirs: set[str]
) -> list[Violation]:
    out: list[Violation] = []
    if record is not None:
        out.append(Violation(rule=Rule.CHECKPOINT, detail=f"{_name(claim)} is released but still recorded"))
    out += [Violation(rule=Rule.FILES, detail=f"{_name(claim)} is released but {s} is left") for s in sorted(specs)]
    out += [
        Violation(rule=Rule.FILES, detail=f"{_name(claim)} is released but metadata {d} is left") for d in sorted(dirs)
    ]
    return out


def _check_nics(
    nics: Mapping[str, NicState],
    claims: Sequence[ClaimBelief],
    *,
    checkpoint: Mapping[str, ClaimRecord],
    scope: CheckScope,
) -> list[Violation]:
    ifnames = scope.device_ifnames or {}
    doubt = {ifnames[d] for c in claims if c.belief.in_doubt for d in c.devices if d in ifnames}
    held = {
        n["hostIfname"]: n
        for c in claims
        if c.belief is Belief.HELD and (record := checkpoint.get(c.uid)) is not None
        for n in record["nics"]
    }
    out: list[Violation] = []
    for port in scope.ports:
        state = nics.get(port.ifname, NicState(present=False))
        if port.ifname in doubt:
            continue
        if not state.present:
            out.append(Violation(rule=Rule.NICS, detail=f"{port.ifname} is not in the node's namespace"))
            continue
        if (want := held.get(port.ifname)) is not None:
            if (state.mac, state.mtu) != (want["mac"], want["mtu"]) or not set(want["addresses"]) <= set(
                state.addresses
            ):
                out.append(
                    Violation(
                        rule=Rule.NICS,
                        detail=f"{port.ifname} is held but shows {state.mac} mtu {state.mtu} {list(state.addresses)}, "
                        f"the record {want['mac']} mtu {want['mtu']} {want['addresses']}",
                    )
                )
            continue
        if (state.mac, state.mtu, state.addresses) != (port.mac, port.mtu, ()):
            out.append(
                Violation(
                    rule=Rule.NICS,
                    detail=f"{port.ifname} is held by no claim but shows {state.mac} mtu {state.mtu} "
                    f"{list(state.addresses)}, not the hardware's {port.mac} mtu {port.mtu} without addresses",
                )
            )
    return out
