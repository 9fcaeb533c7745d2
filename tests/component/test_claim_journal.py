"""The checkpoint journal on a real file system: group commit, torn tails, corruption, compaction, two instances."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fakedev.driver import journal as journal_mod
from fakedev.driver.checkpoint import (
    JOURNAL_HEADER,
    Checkpoint,
    ClaimRecord,
    JournalState,
    del_entry,
    put_entry,
    render_entry,
)
from fakedev.driver.journal import ClaimJournal
from fakedev.errors import CheckpointError
from harness.procs import wait_for
from tests.helpers import count_fdatasyncs, empty_record


def _record(uid: str) -> ClaimRecord:
    return empty_record(uid, name=f"claim-{uid}")


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
    # 101 commits, compacted along the way by the flusher thread, the last compaction maybe still under way.
    wait_for(lambda: path.read_bytes().count(b"\n") < 25, timeout=10, what="the journal compacted", interval=0.01)
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
    wait_for(lambda: path.stat().st_ino != before, timeout=10, what="the new instance's compaction", interval=0.01)
    old.commit([put_entry(_record("old-2"))])
    assert set(_reloaded(path).claims) == {"old-1", "old-2", "new-kept"}
    assert set(old.state.claims) == {"old-1", "old-2", "new-kept"}  # it folded the other's records on the way


def test_a_compaction_waits_on_no_committer_and_commits_during_it_wait_for_it(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit that makes the journal due for compaction returns once its own batch is synced; the flusher
    thread compacts. A commit that comes while the compaction writes waits for it, then appends to the new file."""
    monkeypatch.setattr(journal_mod, "COMPACT_MIN_LINES", 4)
    compacting, release = threading.Event(), threading.Event()

    def hold_compaction(_temp: Path) -> None:
        compacting.set()
        assert release.wait(timeout=10)

    journal = ClaimJournal(path=path)
    journal.open()  # writes the first journal: not a compaction to hold
    journal.before_compact_rename = hold_compaction
    before = path.stat().st_ino
    for entry in (put_entry(_record("t0")), del_entry("t0"), put_entry(_record("t1")), del_entry("t1")):
        journal.commit([entry])  # the fourth line makes it due
    assert compacting.wait(timeout=10)  # the flusher is mid-compaction, and every commit above has returned
    assert path.stat().st_ino == before  # not renamed yet

    during = threading.Thread(target=journal.commit, args=([put_entry(_record("during"))],))
    during.start()
    during.join(timeout=0.3)
    assert during.is_alive()  # waits for the compaction, as for another batch
    release.set()
    during.join(timeout=10)
    assert not during.is_alive()
    assert path.stat().st_ino != before
    assert path.read_bytes().count(b"\n") <= 3  # header, the compacted record, the one appended after
    assert _reloaded(path) == journal.state
    assert "during" in journal.state.claims
    journal.close()


def test_an_entry_queued_while_the_batch_that_makes_compaction_due_is_written_is_still_flushed(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compaction calls the flusher at once, before the queued entry is due: the flusher must come back for
    the entry when it is, not take the early call for its turn."""
    monkeypatch.setattr(journal_mod, "COMPACT_MIN_LINES", 2)
    journal = ClaimJournal(path=path, flush_after=0.2)
    journal.open()
    before = path.stat().st_ino
    journal.commit([put_entry(_record("a"))])

    def queue_one() -> None:
        journal.before_sync = None
        journal.commit_later(put_entry(_record("later")), replaces=None)

    journal.before_sync = queue_one  # runs while the second batch is written, the journal's lock released
    journal.commit([del_entry("a")])  # the second line: compaction due
    wait_for(lambda: path.stat().st_ino != before, timeout=10, what="the compaction", interval=0.01)
    wait_for(lambda: "later" in _reloaded(path).claims, timeout=10, what="the queued entry flushed", interval=0.01)
    assert set(journal.state.claims) == {"later"}
    journal.close()


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


def test_two_instances_appending_in_turn_keep_every_record(path: Path) -> None:
    """A rolling update's two instances, each appending under the lock: neither's lines are lost."""
    first, second = ClaimJournal(path=path), ClaimJournal(path=path)
    first.open()
    first.commit([put_entry(_record("f0"))])
    second.open()
    for i in range(1, 4):
        second.commit([put_entry(_record(f"s{i}"))])
        first.commit([put_entry(_record(f"f{i}"))])
    expected = {"f0", "f1", "f2", "f3", "s1", "s2", "s3"}
    assert set(_reloaded(path).claims) == expected


def test_close_waits_for_the_batch_being_written(path: Path) -> None:
    """A call the server's grace period left running is mid-batch when the plugin closes its journal."""
    writing, release = threading.Event(), threading.Event()

    def before_sync() -> None:
        writing.set()
        release.wait(timeout=10)

    journal = ClaimJournal(path=path, before_sync=before_sync)
    journal.open()
    committed: list[str] = []

    def late_call() -> None:
        journal.commit([put_entry(_record("late"))])
        committed.append("late")

    call = threading.Thread(target=late_call)
    call.start()
    assert writing.wait(timeout=10)
    closer = threading.Thread(target=journal.close)
    closer.start()
    closer.join(timeout=0.5)
    assert closer.is_alive()  # still waiting: the batch holds the descriptors
    release.set()
    call.join(timeout=10)
    closer.join(timeout=10)
    assert committed == ["late"] and not closer.is_alive()
    assert set(_reloaded(path).claims) == {"late"}


def test_a_compaction_that_cannot_read_the_file_leaves_the_durable_batch_acknowledged(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_mod, "COMPACT_MIN_LINES", 2)
    monkeypatch.setattr(journal_mod, "COMPACT_FACTOR", 1)  # the second line makes the leader compact
    journal = ClaimJournal(path=path)
    journal.open()
    journal.commit([put_entry(_record("a"))])
    garbage = path.with_name("garbage")

    def replace_with_garbage() -> None:  # another writer ruins the file between the sync and the compaction
        garbage.write_bytes(b"not a checkpoint")
        garbage.rename(path)

    journal.before_sync = replace_with_garbage
    journal.commit([put_entry(_record("b"))])  # synced, then the compaction fails to read: logged, not raised
    journal.before_sync = None
    with pytest.raises(CheckpointError):
        journal.commit([put_entry(_record("c"))])  # the next append re-reads the file and says it is unreadable


def test_entries_queued_for_later_ride_the_next_batch_or_are_written_on_close(path: Path) -> None:
    """``commit_later`` waits for nothing and syncs nothing of its own: the entry counts in ``claims`` at once, goes
    into the next commit's write and fdatasync, and what is still queued when the journal closes is written then."""
    syncs: list[int] = []
    journal = ClaimJournal(path=path, before_sync=lambda: syncs.append(1), flush_after=3600)
    journal.open()
    unconfirmed = _record("a")
    unconfirmed["unconfirmed"] = True
    journal.commit([put_entry(unconfirmed)])
    journal.commit_later(put_entry(_record("a")), replaces=unconfirmed)
    assert len(syncs) == 1 and _reloaded(path).claims["a"].get("unconfirmed") is True  # nothing written yet
    assert journal.claims == {"a": _record("a")} and journal.state.claims == {"a": unconfirmed}
    journal.commit([put_entry(_record("b"))])
    assert len(syncs) == 2  # one batch carried both
    assert _reloaded(path).claims == {"a": _record("a"), "b": _record("b")} == journal.state.claims == journal.claims

    journal.commit_later(del_entry("b"), replaces=journal.claims["b"])
    assert dict(journal.claims) == {"a": _record("a")} and "b" not in journal.claims and len(journal.claims) == 1
    assert "b" in _reloaded(path).claims
    journal.close()
    assert len(syncs) == 3 and _reloaded(path).claims == {"a": _record("a")}


def _wait_for(predicate: Callable[[], bool], *, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "the condition did not come true"
        time.sleep(0.005)


def test_the_flusher_writes_a_queued_entry_no_commit_takes_along(path: Path) -> None:
    syncs: list[int] = []
    journal = ClaimJournal(path=path, before_sync=lambda: syncs.append(1), flush_after=0.01)
    journal.open()
    journal.commit([put_entry(_record("a")), put_entry(_record("b"))])
    journal.commit_later(del_entry("a"), replaces=journal.claims["a"])
    journal.commit_later(del_entry("b"), replaces=journal.claims["b"])
    _wait_for(lambda: not journal.state.claims)  # set once the batch is synced
    assert len(syncs) in (2, 3)  # one batch of their own for both (two if the test thread was held up between)
    assert _reloaded(path).claims == {} == dict(journal.claims)
    journal.close()
    assert len(syncs) == 2 and _reloaded(path).claims == {}


def test_a_written_commit_is_in_the_file_at_once_and_synced_by_the_next_batch_or_the_flusher(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``commit_written`` waits for the write (a killed process leaves it in the file), not the sync: the next
    ``commit``'s sync covers it, and without one the flusher syncs it after ``flush_after`` — or a stop does."""
    journal = ClaimJournal(path=path, flush_after=3600)
    journal.open()
    synced = count_fdatasyncs(monkeypatch)
    journal.commit_written([put_entry(_record("a"))])
    journal.commit_written([put_entry(_record("b"))])
    assert set(_reloaded(path).claims) == {"a", "b"} and synced == []
    journal.commit([put_entry(_record("c"))])
    assert len(synced) == 1  # one sync for all three lines
    journal.flush_after = 0.01
    journal.commit_written([del_entry("a")])
    wait_for(lambda: len(synced) == 2, timeout=10, what="the flusher's sync", interval=0.01)
    journal.flush_after = 3600
    journal.commit_written([del_entry("b")])
    journal.close()
    assert len(synced) == 3 and set(_reloaded(path).claims) == {"c"}


def test_the_flusher_waiting_for_a_late_journal_is_woken_for_one_due_sooner_and_serves_both(tmp_path: Path) -> None:
    """One flusher thread serves every journal of the process (a fleet's); it sleeps until the soonest due time
    and is woken only for a sooner one — which must then be written on time, and the later one not before its time
    (a stop writes it)."""
    late = ClaimJournal(path=tmp_path / "late.json", flush_after=5)
    soon = ClaimJournal(path=tmp_path / "soon.json", flush_after=0.01)
    for journal in (late, soon):
        journal.open()
        journal.commit([put_entry(_record("a"))])
    started = time.monotonic()
    late.commit_later(del_entry("a"), replaces=late.claims["a"])  # the flusher now sleeps until about +5 s
    soon.commit_later(del_entry("a"), replaces=soon.claims["a"])
    wait_for(lambda: not _reloaded(tmp_path / "soon.json").claims, timeout=10, what="the soon entry", interval=0.01)
    assert time.monotonic() - started < 2.5  # woken for it, not written when the late one was due
    assert set(_reloaded(tmp_path / "late.json").claims) == {"a"}  # not due yet
    for journal in (late, soon):
        journal.close()
    assert not _reloaded(tmp_path / "late.json").claims


def test_a_queued_deletion_never_undoes_what_another_instance_recorded_since(path: Path) -> None:
    """Two instances of a rolling update: the old one forgot claim x (queued), the new one prepared x again before
    the old one's deletion reached the file — the deletion is dropped, not written over the newer record. A queued
    deletion of a claim the other instance left alone is written as usual."""
    old = ClaimJournal(path=path, flush_after=3600)
    old.open()
    old.commit([put_entry(_record("x")), put_entry(_record("y"))])
    old.commit_later(del_entry("x"), replaces=old.claims["x"])
    old.commit_later(del_entry("y"), replaces=old.claims["y"])

    new = ClaimJournal(path=path, flush_after=3600)
    assert set(new.open().claims) == {"x", "y"}  # the old instance's deletions are not on disk yet
    again = _record("x")
    again["metadataGeneration"] = 2
    new.commit([put_entry(again)])

    old.close()
    assert _reloaded(path).claims == {"x": again}
    new.commit([put_entry(_record("z"))])  # the new instance folds the old one's appends before its own
    assert _reloaded(path).claims == {"x": again, "z": _record("z")} == new.state.claims
    new.close()


def test_nothing_is_written_after_close_and_the_file_is_not_opened_again(path: Path) -> None:
    """A call the server's grace period left running, or a status writer that outlived its stop, gets an error."""
    journal = ClaimJournal(path=path)
    journal.open()
    journal.commit([put_entry(_record("a"))])
    journal.close()
    before = path.read_bytes()
    with pytest.raises(CheckpointError, match="closed"):
        journal.commit([put_entry(_record("b"))])
    assert path.read_bytes() == before and journal._fd < 0 and journal._lock_fd < 0
