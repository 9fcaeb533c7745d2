"""The checkpoint journal on a real file system: group commit, torn tails, corruption, compaction, two instances."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fakedev.driver import journal as journal_mod
from fakedev.driver.checkpoint import (
    JOURNAL_HEADER,
    JOURNAL_HEADER_V3,
    Checkpoint,
    ClaimRecord,
    JournalState,
    del_entry,
    put_entry,
    render_entry,
)
from fakedev.driver.journal import ClaimJournal
from fakedev.errors import CheckpointError


def _record(uid: str) -> ClaimRecord:
    return {
        "uid": uid,
        "namespace": "ns",
        "name": f"claim-{uid}",
        "devices": [],
        "cdiSpecFiles": [],
        "metadataDir": "",
        "metadataGeneration": 1,
        "nics": [],
        "mdevs": [],
    }


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "checkpoint.json"


def _reloaded(path: Path) -> JournalState:
    return Checkpoint(path=path).read()


def test_concurrent_commits_share_fsyncs_and_all_survive(path: Path) -> None:
    syncs: list[int] = []
    gate = threading.Barrier(16)
    journal = ClaimJournal(path=path, before_sync=lambda: syncs.append(1))
    journal.open()

    def prepare(uid: str) -> None:
        gate.wait()
        journal.commit([put_entry(_record(uid))])

    threads = [threading.Thread(target=prepare, args=(f"u{i:02d}",)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(journal.state.claims) == [f"u{i:02d}" for i in range(16)]
    assert len(syncs) < 16  # commits that met went into one batch, one fdatasync
    assert _reloaded(path) == journal.state


def test_a_torn_tail_is_dropped_and_the_file_rewritten_before_the_next_append(path: Path) -> None:
    journal = ClaimJournal(path=path)
    journal.open()
    journal.commit([put_entry(_record("a"))])
    journal.close()
    whole = render_entry(put_entry(_record("b")))
    with path.open("ab") as f:
        f.write(whole[: len(whole) // 2])  # a batch the crash cut short: never acknowledged
    again = ClaimJournal(path=path)
    assert set(again.open().claims) == {"a"}
    again.commit([put_entry(_record("c"))])
    assert set(_reloaded(path).claims) == {"a", "c"}
    assert path.read_bytes().startswith(JOURNAL_HEADER) and path.read_bytes().count(b"\n") == 3


def test_a_damaged_line_before_good_ones_stops_the_plugin_and_is_kept(path: Path) -> None:
    journal = ClaimJournal(path=path)
    journal.open()
    journal.commit([put_entry(_record("a"))])
    journal.commit([put_entry(_record("b"))])
    journal.close()
    data = bytearray(path.read_bytes())
    second_line = data.index(b"\n") + 1
    data[second_line + 20] ^= 0x01  # one bit of record "a"
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"checkpoint.json:2: damaged journal line before good ones"):
        ClaimJournal(path=path).open()
    assert path.read_bytes() == bytes(data)


def test_compaction_keeps_the_file_as_small_as_the_live_claims(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_mod, "COMPACT_MIN_LINES", 20)
    journal = ClaimJournal(path=path)
    journal.open()
    for i in range(50):
        journal.commit([put_entry(_record(f"t{i}"))])
        journal.commit([del_entry(f"t{i}")])
    journal.commit([put_entry(_record("kept"))])
    lines = path.read_bytes().count(b"\n")
    assert lines < 25, lines  # 101 commits, compacted along the way
    assert set(_reloaded(path).claims) == {"kept"}


def test_two_instances_keep_each_others_records_across_a_compaction(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rolling update: the old instance appends after the new one compacted (replaced) the file."""
    monkeypatch.setattr(journal_mod, "COMPACT_MIN_LINES", 10)
    old, new = ClaimJournal(path=path), ClaimJournal(path=path)
    old.open()
    old.commit([put_entry(_record("old-1"))])
    new.open()
    before = path.stat().st_ino
    new.commit([put_entry(_record("new-kept"))])
    for i in range(12):  # churn enough to compact: the file the old instance has open is replaced
        new.commit([put_entry(_record(f"t{i}")), del_entry(f"t{i}")])
    assert path.stat().st_ino != before
    old.commit([put_entry(_record("old-2"))])
    assert set(_reloaded(path).claims) == {"old-1", "old-2", "new-kept"}
    assert set(old.state.claims) == {"old-1", "old-2", "new-kept"}  # it folded the other's records on the way


def test_a_failed_write_fails_its_commit_and_leaves_no_half_line(path: Path) -> None:
    failing = [True]

    def before_sync() -> None:
        if failing[0]:
            failing[0] = False
            raise OSError(28, "No space left on device")

    journal = ClaimJournal(path=path, before_sync=before_sync)
    journal.open()
    with pytest.raises(OSError, match="No space left"):
        journal.commit([put_entry(_record("lost"))])
    assert journal.state.claims == {}
    journal.commit([put_entry(_record("kept"))])
    assert set(_reloaded(path).claims) == {"kept"}


def test_a_missing_file_is_an_empty_journal_and_an_empty_file_is_refused(path: Path) -> None:
    assert ClaimJournal(path=path).open() == JournalState()
    assert path.read_bytes() == JOURNAL_HEADER
    path.write_bytes(b"")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        ClaimJournal(path=path).open()


def test_appends_overwrite_free_space_written_ahead(path: Path) -> None:
    journal = ClaimJournal(path=path)
    journal.open()
    journal.commit([put_entry(_record("a"))])
    size = path.stat().st_size
    data = path.read_bytes()
    lines = data.rstrip(b"\0")
    assert size >= len(lines) + journal_mod.FREE_SPACE  # the free space is on disk, all NUL bytes
    assert data[len(lines) :] == bytes(size - len(lines))
    for uid in ("b", "c", "d"):
        journal.commit([put_entry(_record(uid))])
    assert path.stat().st_size == size  # the file kept its size: each append overwrote free space
    assert path.read_bytes().rstrip(b"\0").count(b"\n") == 5  # the header and four lines
    journal.close()
    reopened = ClaimJournal(path=path)
    assert set(reopened.open().claims) == {"a", "b", "c", "d"}
    reopened.commit([del_entry("a")])  # goes after the last line, not after the free space
    assert set(_reloaded(path).claims) == {"b", "c", "d"}
    assert path.stat().st_size == size


def test_a_batch_larger_than_the_free_space_grows_the_file(path: Path) -> None:
    journal = ClaimJournal(path=path)
    journal.open()
    big = [put_entry(_record(f"u{i:04d}")) for i in range(journal_mod.FREE_SPACE // 150)]
    journal.commit(big)
    journal.commit(big[:3])
    assert len(_reloaded(path).claims) == len(big)
    assert path.stat().st_size > journal_mod.FREE_SPACE


def test_two_instances_append_into_the_same_free_space(path: Path) -> None:
    """Neither overwrites the other's lines: each finds the other's where its free space began, and re-reads."""
    first, second = ClaimJournal(path=path), ClaimJournal(path=path)
    first.open()
    first.commit([put_entry(_record("f0"))])  # writes the free space both now share
    second.open()
    for i in range(1, 4):
        second.commit([put_entry(_record(f"s{i}"))])
        first.commit([put_entry(_record(f"f{i}"))])
    expected = {"f0", "f1", "f2", "f3", "s1", "s2", "s3"}
    assert set(_reloaded(path).claims) == expected
    assert set(first.state.claims) == expected


def test_a_v3_journal_loads_and_is_rewritten_with_the_v4_header(path: Path) -> None:
    path.write_bytes(JOURNAL_HEADER_V3 + render_entry(put_entry(_record("old"))))
    journal = ClaimJournal(path=path)
    assert set(journal.open().claims) == {"old"}
    assert path.read_bytes().startswith(JOURNAL_HEADER)
    journal.commit([put_entry(_record("new"))])
    assert set(_reloaded(path).claims) == {"old", "new"}


def test_a_page_that_never_reached_the_disk_is_a_torn_tail(path: Path) -> None:
    """A power cut mid-batch: the first line landed, the rest of the batch reads as NUL bytes up to the free space."""
    journal = ClaimJournal(path=path)
    journal.open()
    journal.commit([put_entry(_record("synced"))])
    journal.close()
    data = path.read_bytes()
    end = len(data.rstrip(b"\0"))
    torn = render_entry(put_entry(_record("unsynced")))
    path.write_bytes(data[:end] + torn[:20] + bytes(len(data) - end - 20))
    reopened = ClaimJournal(path=path)
    assert set(reopened.open().claims) == {"synced"}
    assert b"unsynced" not in path.read_bytes() and path.read_bytes().count(b"\n") == 2  # rewritten without it
