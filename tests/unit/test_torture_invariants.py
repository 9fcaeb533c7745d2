"""The torture tool's invariant checker on crafted node states: silent on a consistent node, and able to fail —
one planted fault per invariant."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import pytest

from fakedev.cli.torture.choices import OpKind, choose_op, compute_candidates
from fakedev.cli.torture.invariants import (
    CheckScope,
    NicState,
    NodeSnapshot,
    Rule,
    compute_final_violations,
    compute_violations,
    may_settle,
)
from fakedev.cli.torture.ledger import Belief, ClaimBelief, Ledger
from fakedev.driver.checkpoint import ClaimRecord
from fakedev.nics.ports import NicPort
from kubeletapi.types import PreparedDevice

DRIVER = "gpu.example.com"
META = "/k/plugins/gpu.example.com/dra-device-metadata"
HELD_UID = "aaaaaaaa-0000-0000-0000-000000000001"
GONE_UID = "bbbbbbbb-0000-0000-0000-000000000002"


def _record(uid: str, *, name: str, device: str) -> ClaimRecord:
    return {
        "uid": uid,
        "namespace": "ns",
        "name": name,
        "devices": [
            {
                "requestNames": ["r0"],
                "pool": "node",
                "device": device,
                "cdiDeviceIDs": [f"k8s.{DRIVER}/device={uid}-{device}", f"{DRIVER}/metadata={uid}_r0"],
                "shareID": None,
            }
        ],
        "cdiSpecFiles": [f"k8s.{DRIVER}-device_{uid}.json", f"{DRIVER}_metadata_{uid}_r0.json"],
        "metadataDir": f"ns_{name}_{uid}",
        "metadataGeneration": 1,
        "nics": [],
        "mdevs": [],
    }


def _answer(record: ClaimRecord) -> tuple[PreparedDevice, ...]:
    return tuple(
        PreparedDevice(
            request_names=tuple(d["requestNames"]),
            pool=d["pool"],
            device=d["device"],
            cdi_device_ids=tuple(d["cdiDeviceIDs"]),
            share_id=d["shareID"],
        )
        for d in record["devices"]
    )


HELD_RECORD = _record(HELD_UID, name="c", device="gpu-0")
HELD = ClaimBelief(
    uid=HELD_UID, namespace="ns", name="c", devices=("gpu-0",), belief=Belief.HELD, answer=_answer(HELD_RECORD)
)
GONE = ClaimBelief(uid=GONE_UID, namespace="ns", name="c", devices=("gpu-1",), current=False)
METADATA_FILE = f"{META}/ns_c_{HELD_UID}/r0/metadata.json"
CONSISTENT = NodeSnapshot(
    specs={f"k8s.{DRIVER}-device_{HELD_UID}.json": (), f"{DRIVER}_metadata_{HELD_UID}_r0.json": (METADATA_FILE,)},
    metadata_dirs=frozenset({f"ns_c_{HELD_UID}"}),
    metadata_files=frozenset({METADATA_FILE}),
    temp_files=(),
    checkpoint={HELD_UID: HELD_RECORD},
    status={HELD_UID: frozenset({("node", "gpu-0")})},
)
SCOPE = CheckScope(driver=DRIVER)


def _rules(snapshot: NodeSnapshot, claims: Sequence[ClaimBelief] = (HELD, GONE)) -> list[tuple[Rule, str]]:
    return [(v.rule, v.detail) for v in compute_violations(snapshot, claims, scope=SCOPE)]


def test_a_consistent_node_breaks_nothing() -> None:
    assert _rules(CONSISTENT) == []


PLANTED = {
    "metadata-file-gone": (
        dataclasses.replace(CONSISTENT, metadata_files=frozenset()),
        Rule.FILES,
        f"is held but {DRIVER}_metadata_{HELD_UID}_r0.json mounts {METADATA_FILE}, which is missing",
    ),
    "spec-gone": (
        dataclasses.replace(CONSISTENT, specs={f"{DRIVER}_metadata_{HELD_UID}_r0.json": (METADATA_FILE,)}),
        Rule.FILES,
        f"is held but its CDI spec k8s.{DRIVER}-device_{HELD_UID}.json is missing",
    ),
    "record-gone": (
        dataclasses.replace(CONSISTENT, checkpoint={}, status=None),
        Rule.CHECKPOINT,
        "is held but has no checkpoint record",
    ),
    "released-claims-spec-left": (
        dataclasses.replace(CONSISTENT, specs={**CONSISTENT.specs, f"k8s.{DRIVER}-device_{GONE_UID}.json": ()}),
        Rule.FILES,
        f"({GONE_UID}) is released but k8s.{DRIVER}-device_{GONE_UID}.json is left",
    ),
    "released-claims-record-left": (
        dataclasses.replace(
            CONSISTENT, checkpoint={HELD_UID: HELD_RECORD, GONE_UID: _record(GONE_UID, name="c", device="gpu-1")}
        ),
        Rule.CHECKPOINT,
        f"({GONE_UID}) is released but still recorded",
    ),
    "spec-of-nobody": (
        dataclasses.replace(CONSISTENT, specs={**CONSISTENT.specs, f"k8s.{DRIVER}-device_stranger.json": ()}),
        Rule.FILES,
        f"CDI spec k8s.{DRIVER}-device_stranger.json belongs to no claim",
    ),
    "metadata-of-nobody": (
        dataclasses.replace(CONSISTENT, metadata_dirs=CONSISTENT.metadata_dirs | {"ns_c"}),
        Rule.FILES,
        "metadata directory ns_c belongs to no claim",
    ),
    "temp-file": (
        dataclasses.replace(CONSISTENT, temp_files=("/cdi/.x.json.abc.tmp",)),
        Rule.TEMP_FILES,
        "left behind: /cdi/.x.json.abc.tmp",
    ),
    "status-behind": (
        dataclasses.replace(CONSISTENT, status={HELD_UID: frozenset()}),
        Rule.STATUS,
        "status.devices lists [], the checkpoint [('node', 'gpu-0')]",
    ),
    "status-from-a-driver-that-writes-none": (
        dataclasses.replace(CONSISTENT, writes_status=False),
        Rule.STATUS,
        "status.devices lists [('node', 'gpu-0')], the checkpoint []",
    ),
    "corrupt-checkpoint": (
        dataclasses.replace(CONSISTENT, checkpoint=None, checkpoint_error="checksum mismatch"),
        Rule.CHECKPOINT,
        "checksum mismatch",
    ),
}


def test_a_driver_that_writes_no_status_is_consistent_without_it() -> None:
    assert _rules(dataclasses.replace(CONSISTENT, writes_status=False, status={HELD_UID: frozenset()})) == []


@pytest.mark.parametrize(("snapshot", "rule", "detail"), PLANTED.values(), ids=PLANTED.keys())
def test_a_planted_fault_is_caught(snapshot: NodeSnapshot, rule: Rule, detail: str) -> None:
    found = _rules(snapshot)
    assert any(r is rule and detail in d for r, d in found), found


def test_a_claim_in_doubt_may_have_any_of_its_files() -> None:
    doubt = dataclasses.replace(HELD, belief=Belief.DOUBT_UNPREPARE)
    half_gone = dataclasses.replace(CONSISTENT, metadata_files=frozenset(), checkpoint={}, status={})
    assert _rules(half_gone, (doubt, GONE)) == []


def test_the_end_leaves_nothing_of_any_claim() -> None:
    released = dataclasses.replace(HELD, belief=Belief.RELEASED, answer=None)
    empty = NodeSnapshot(
        specs={}, metadata_dirs=frozenset(), metadata_files=frozenset(), temp_files=(), checkpoint={}, status={}
    )
    assert _rules(empty, (released, GONE)) == [] and compute_final_violations(empty) == []
    assert [v.rule for v in compute_final_violations(CONSISTENT)] == [
        Rule.FILES,
        Rule.FILES,
        Rule.FILES,
        Rule.CHECKPOINT,
    ]


PORT = NicPort(ifname="enp8s0f0v0", mac="02:00:00:00:00:01", mtu=9000, port="p1")


@pytest.mark.parametrize(
    ("state", "broken"),
    [
        (NicState(present=True, mac=PORT.mac, mtu=9000), False),
        (NicState(present=True, mac=PORT.mac, mtu=1500), True),
        (NicState(present=True, mac=PORT.mac, mtu=9000, addresses=("10.1.2.3/24",)), True),
        (NicState(present=False), True),
    ],
    ids=["as-the-hardware-has-it", "mtu-not-given-back", "address-left", "moved-away"],
)
def test_a_nic_no_claim_holds_is_as_the_hardware_has_it(state: NicState, broken: bool) -> None:
    scope = CheckScope(driver="dra.net", ports=(PORT,), device_ifnames={"pci-0000-08-00-2": PORT.ifname})
    snapshot = dataclasses.replace(
        CONSISTENT, specs={}, metadata_dirs=frozenset(), checkpoint={}, status={}, nics={PORT.ifname: state}
    )
    found = compute_violations(snapshot, (), scope=scope)
    assert [v.rule for v in found] == ([Rule.NICS] if broken else [])


def test_a_held_claim_answered_with_other_devices_is_a_violation() -> None:
    ledger = Ledger()
    ledger.add(dataclasses.replace(HELD, belief=Belief.RELEASED, answer=None))
    first = _answer(HELD_RECORD)
    assert ledger.prepared(HELD_UID, first) is None
    ledger.doubted(HELD_UID, belief=Belief.DOUBT_PREPARE)  # a repeat cut short: the retry must answer the same
    other = _answer(_record(HELD_UID, name="c", device="gpu-7"))
    wrong = ledger.prepared(HELD_UID, other)
    assert wrong is not None and "prepared twice with different devices" in wrong and "node/gpu-7" in wrong
    ledger.unprepared(HELD_UID)
    assert ledger.prepared(HELD_UID, other) is None  # released in between: a new holding


def test_a_claim_whose_unprepare_was_cut_short_is_only_unprepared_again() -> None:
    ledger = Ledger()
    ledger.add(dataclasses.replace(HELD, belief=Belief.DOUBT_UNPREPARE))
    candidates = compute_candidates(ledger)
    assert [c.uid for c in candidates[OpKind.UNPREPARE]] == [HELD_UID]
    assert all(not v for k, v in candidates.items() if k is not OpKind.UNPREPARE)
    op = choose_op(ledger, rng=random.Random(0), settle_doubt=True)
    assert (op.kind, [c.uid for c in op.claims]) == (OpKind.UNPREPARE, [HELD_UID])


def test_only_a_status_or_a_temp_file_is_waited_for_before_it_counts() -> None:
    """A live plugin may be mid-write when the node is read (a start-up's owed status writes compact the journal
    through a temp file): those are read again; a file that belongs to no claim is never waited for."""
    temp = compute_violations(
        dataclasses.replace(CONSISTENT, temp_files=("/k/.checkpoint.json.abc.tmp",)), (HELD, GONE), scope=SCOPE
    )
    status = compute_violations(
        dataclasses.replace(CONSISTENT, status={HELD_UID: frozenset()}), (HELD, GONE), scope=SCOPE
    )
    stray = compute_violations(
        dataclasses.replace(CONSISTENT, metadata_dirs=CONSISTENT.metadata_dirs | {"ns_c"}), (HELD, GONE), scope=SCOPE
    )
    assert temp and status and stray
    assert may_settle(temp) and may_settle(temp + status)
    assert not may_settle(stray) and not may_settle(temp + stray)
