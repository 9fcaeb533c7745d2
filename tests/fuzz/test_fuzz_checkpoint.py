"""Fuzz the checkpoint loader: a damaged file (bytes flipped, cut off, inserted, appended) or any bytes at all is a
CheckpointError with a one-line message naming the file, or loads exactly the claims that were saved."""

from __future__ import annotations

import hashlib
import json
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakedev.driver.checkpoint import (
    VERSION_V1,
    Checkpoint,
    ClaimRecord,
    JournalEntry,
    JournalState,
    del_entry,
    fold_entries,
    owe_entry,
    put_entry,
    render_checkpoint,
    render_entry,
    render_journal,
)
from fakedev.errors import CheckpointError
from tests.fuzz.fuzzing import MARKS, PURE_SECONDS, Figures, fuzz_settings, json_values, mutated, repeated
from tests.helpers import empty_record

pytestmark = MARKS

CLAIMS: Final[dict[str, ClaimRecord]] = {
    "0d6b2c1e-6f1d-4f7e-9a51-3c1f0b1e2a01": {
        "uid": "0d6b2c1e-6f1d-4f7e-9a51-3c1f0b1e2a01",
        "namespace": "team-a",
        "name": "gpu-claim",
        "devices": [
            {
                "requestNames": ["gpu"],
                "pool": "n1",
                "device": "gpu-0",
                "cdiDeviceIDs": ["k8s.gpu.example.com/gpu=0d6b2c1e-gpu-0"],
                "shareID": None,
            }
        ],
        "cdiSpecFiles": ["k8s.gpu.example.com-0d6b2c1e.json"],
        "metadataDir": "team-a_gpu-claim",
        "metadataGeneration": 2,
        "nics": [
            {
                "device": "nic-0",
                "hostIfname": "eth1",
                "podIfname": "net1",
                "mac": "02:00:00:00:00:01",
                "mtu": 9000,
                "addresses": ["10.0.0.2/24"],
                "hardwareMac": "0a:00:00:00:00:01",
                "hardwareMtu": 1500,
            }
        ],
        "mdevs": ["5b3a1d2e-0000-4000-8000-000000000001"],
    },
    "uid-2": empty_record("uid-2", name="ünïcødé-is-kept-as-written"),
}
V2: Final = render_checkpoint(CLAIMS)


def _v1_file() -> bytes:
    """The same claims as a checkpoint-v1 file wrote them (two more fields per record, no NIC or mdev lists)."""
    old = {
        uid: {
            **{k: v for k, v in record.items() if k not in ("nics", "mdevs")},
            "state": "PrepareCompleted",
            "statusApplied": True,
        }
        for uid, record in CLAIMS.items()
    }
    old["0d6b2c1e-6f1d-4f7e-9a51-3c1f0b1e2a01"]["nics"] = CLAIMS["0d6b2c1e-6f1d-4f7e-9a51-3c1f0b1e2a01"]["nics"]
    old["0d6b2c1e-6f1d-4f7e-9a51-3c1f0b1e2a01"]["mdevs"] = CLAIMS["0d6b2c1e-6f1d-4f7e-9a51-3c1f0b1e2a01"]["mdevs"]
    checksum = hashlib.sha256(json.dumps(old, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return json.dumps({"version": VERSION_V1, "checksum": checksum, "claims": old}, indent=2).encode()


V1: Final = _v1_file()
JOURNAL_TAIL: Final[list[JournalEntry]] = [
    del_entry("uid-2"),
    owe_entry(
        {"uid": "uid-2", "namespace": "ns", "name": "n", "devices": [], "token": "0123456789abcdef"},
    ),
    put_entry(CLAIMS["uid-2"]),
]
V3: Final = render_journal(JournalState(claims=CLAIMS)) + b"".join(render_entry(e) for e in JOURNAL_TAIL)
V3_STATES: Final = [fold_entries(JournalState(claims=CLAIMS), JOURNAL_TAIL[:n]) for n in range(len(JOURNAL_TAIL) + 1)]
"""What a journal cut short after its compacted part may hold: the folded state after each of the later lines."""

FILES: Final = st.one_of(
    mutated(V2),
    mutated(V1),
    st.binary(max_size=512),
    json_values().map(lambda doc: json.dumps(doc).encode()),
    repeated(st.sampled_from([b"[", b"{", b'{"claims":', b'{"version":"fakedev.dra/checkpoint-v2","claims":['])),
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    return Checkpoint(path=tmp_path_factory.mktemp("checkpoint") / "checkpoint.json")


def test_the_unharmed_files_load_the_saved_claims(checkpoint: Checkpoint) -> None:
    for data in (V2, V1):
        checkpoint.path.write_bytes(data)
        assert checkpoint.load() == CLAIMS
    checkpoint.path.write_bytes(V3)
    assert checkpoint.read() == V3_STATES[-1]


@fuzz_settings(examples=300, deadline_seconds=2 * PURE_SECONDS)
@given(data=mutated(V3))
def test_a_damaged_journal_is_refused_clearly_or_loads_a_state_it_went_through(
    checkpoint: Checkpoint, figures: Figures, data: bytes
) -> None:
    """A bad tail is a batch a crash cut short (dropped); a bad line before good ones is corruption. A damaged
    line never loads as something else: every line carries its checksum."""
    checkpoint.path.write_bytes(data)
    with figures.example(max_seconds=PURE_SECONDS, max_heap_mb=64):
        try:
            state = checkpoint.read()
        except CheckpointError as exc:
            message = str(exc)
            assert message.startswith(f"{checkpoint.path}")
            assert "\n" not in message and len(message) < 400 + len(str(checkpoint.path))
            return
        prefixes = [fold_entries(JournalState(), [put_entry(r) for r in list(CLAIMS.values())[:n]]) for n in range(3)]
        assert state in (*V3_STATES, *prefixes), state


@fuzz_settings(examples=300, deadline_seconds=2 * PURE_SECONDS)
@given(data=FILES)
def test_a_damaged_checkpoint_is_refused_clearly_or_loads_what_was_saved(
    checkpoint: Checkpoint, figures: Figures, data: bytes
) -> None:
    checkpoint.path.write_bytes(data)
    with figures.example(max_seconds=PURE_SECONDS, max_heap_mb=64):
        try:
            loaded = checkpoint.load()
        except CheckpointError as exc:
            message = str(exc)
            assert message.startswith(f"{checkpoint.path}: ")
            assert "\n" not in message and len(message) < 400 + len(str(checkpoint.path))
            return
        assert loaded == CLAIMS
