"""The checkpoint as an append-only journal with group commit (format ``fakedev.dra/checkpoint-v3``).

Rewriting the whole checkpoint on every prepare made each call cost O(claims held) and serialized every call on one
fsync. Here a call appends one line and waits for it to be durable; calls that arrive while a batch is being
synced go together into the next one, so N concurrent prepares share one ``fdatasync`` (group commit). When the
journal holds many more lines than live records it is compacted: the folded state is written as a fresh journal
(temp file, fsync, rename, directory fsync), so its size stays proportional to the claims held. The compaction runs
on the flusher thread after the batch that made it due has been acknowledged: inline, about one commit in 130 of a
prepare-then-unprepare loop waited 1.6–2.5 ms for it instead of 0.27. Batches that come while it writes wait for it;
a crash during it loses nothing (the batches it folds are durable already).

Layout: line 1 is the header ``{"version":"fakedev.dra/checkpoint-v3"}``; every later line is
``<crc32 of the JSON, 8 hex digits> <entry JSON>``. Entries (:mod:`fakedev.driver.checkpoint` folds them):
``put`` records a prepared claim (replacing an earlier record of its UID), ``del`` forgets one, ``status`` says the
claim's ``status.devices`` is written as recorded. A batch cut short by a crash leaves a torn or garbled tail after
the last good line; that batch was never acknowledged (its callers were still waiting for the fsync), so the tail
is dropped, and truncated before the next append. A bad line with good lines after it is corruption: the plugin
stops, the file kept for inspection.

Across processes (the two instances of a rolling update) appends and compactions take ``flock`` on a lock file
next to the journal (its descriptor kept open); an instance that finds the journal replaced by another's compaction
— the file it has open has no name left — re-reads it first.

Some entries need no wait: :meth:`ClaimJournal.commit_later` queues one (an unprepare's ``del``, a confirmation)
for the next batch, or for the flusher thread's after ``FLUSH_AFTER_SECONDS``; a crash may lose it, and the
driver's start-up redoes what was lost (:meth:`fakedev.driver.state.ClaimState.load`). Such an entry names the
record it was queued against: if another instance has recorded that claim anew meanwhile, the entry is dropped, not
written over the newer word.

Some need no sync of their own: :meth:`ClaimJournal.commit_written` returns once its entries are written — in the
page cache, which a killed process leaves behind — and leaves their ``fdatasync`` to the next batch that syncs, or
to the flusher after ``FLUSH_AFTER_SECONDS``. Only a power cut can lose them, and only for what a power cut makes
worthless anyway: the record of a claim whose files were written unsynced in this boot (the files' own rule,
:attr:`~fakedev.driver.plan.PrepareDirs.synced`). That sync was a quarter of a millisecond of each such prepare's
answer, waited for after its files were written.

Appends grow the file: writing ahead free space to overwrite in place would save the size commit of each
``fdatasync`` (197 → 135 µs here), but a power cut may then keep a batch's later page and lose an earlier one —
good lines after a hole, which reads as corruption — where a growing file on ext4 only ever loses its tail.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from fakedev.driver.checkpoint import (
    ClaimRecord,
    DelEntry,
    JournalEntry,
    JournalState,
    ParsedFile,
    PutEntry,
    entry_claim,
    fold_entry,
    parse_checkpoint_file,
    render_entry,
    render_journal,
)
from fakedev.driver.fsutil import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, BeforeRename, atomic_write, open_lock_file
from fakedev.errors import CheckpointError

log = logging.getLogger("fakedev.driver.journal")

COMPACT_MIN_LINES: Final = 256
"""Never compact a journal shorter than this: a rewrite would cost more than the lines it saves."""
COMPACT_FACTOR: Final = 4
"""Compact once the journal has this many lines per live record (and at least COMPACT_MIN_LINES)."""
FLUSH_AFTER_SECONDS: Final = 0.1
"""How long an entry queued by ``commit_later`` waits for a caller's batch to take it along before the flusher
writes it: readers of the file (a soak's rest check, KubeVirt verification) see it settle within this."""


@dataclass(frozen=True, kw_only=True)
class _Queued:
    entry: JournalEntry
    later: bool = False
    """Queued by ``commit_later``: no caller waits for it."""
    replaces: ClaimRecord | None = None
    """A later entry's condition: the record of its claim it was queued against (None: no record)."""
    synced: bool = True
    """False: nobody waits for its sync — written by ``commit_written`` (which waits for the write only) or queued by
    ``commit_later``; a batch of such entries alone is not synced."""


@dataclass(frozen=True, kw_only=True, eq=False)
class RecordedClaims(Mapping[str, ClaimRecord]):
    """The durable records with the later entries still queued laid over them (None: forgotten)."""

    durable: Mapping[str, ClaimRecord]
    queued: Mapping[str, ClaimRecord | None]

    def __getitem__(self, uid: str) -> ClaimRecord:
        if uid in self.queued:
            record = self.queued[uid]
            if record is None:
                raise KeyError(uid)
            return record
        return self.durable[uid]

    def __iter__(self) -> Iterator[str]:
        yield from (uid for uid in self.durable if uid not in self.queued)
        yield from (uid for uid, record in self.queued.items() if record is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def lock_path_for(journal: Path) -> Path:
    return journal.with_name(journal.name + ".lock")


@dataclass(kw_only=True)
class ClaimJournal:
    """Mutable on purpose: the open journal, the folded state and the group-commit bookkeeping.

    ``state`` is what this process knows is durable, ``claims`` what it has recorded (durable or queued by
    :meth:`commit_later`). Both are replaced, never changed in place, so a reader holding one is never disturbed.
    """

    path: Path
    state: JournalState = field(default_factory=JournalState)
    before_compact_rename: BeforeRename | None = None
    """A crash point's hook: the compacted journal is written, not renamed yet."""
    before_sync: Callable[[], None] | None = None
    """A crash point's hook: a batch is written, not synced yet."""
    flush_after: float = FLUSH_AFTER_SECONDS
    _fd: int = -1
    _lock_fd: int = -1
    """The lock file, kept open: only the leader of a batch (or start-up) takes it, so one descriptor serves."""
    _lines: int = 0
    """Entry lines in the file this process has open (the header not counted)."""
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _size: int = 0
    """The size of the file after this process's last write: another size means another instance wrote."""
    _pending: list[_Queued] = field(default_factory=list)
    _in_flight: list[_Queued] = field(default_factory=list)
    """The batch being written."""
    _claims: Mapping[str, ClaimRecord] = field(default_factory=dict)
    _queued: int = 0
    """Commits queued so far (a commit's number is its place in this count)."""
    _settled: int = 0
    """Commits whose batch has been written and synced, or has failed."""
    _writing: bool = False
    _failures: deque[tuple[int, int, BaseException]] = field(default_factory=lambda: deque(maxlen=64))
    """Recent failed batches: (first commit, last commit, error)."""
    _later_since: float | None = None
    """When the oldest later entry still pending was queued (monotonic); None: none is."""
    _closing: bool = False
    _compact_wanted: bool = False
    """A batch made the journal due for compaction; the flusher thread does it."""
    _unsynced: bool = False
    """Lines written by ``commit_written`` are not synced yet (a later batch's sync, or the flusher's, does it)."""

    @property
    def claims(self) -> Mapping[str, ClaimRecord]:
        """The claims as this process has recorded them: ``state`` with what :meth:`commit_later` queued."""
        return self._claims

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """``flock`` on the lock file against the other instance (never taken by two threads of this process)."""
        if self._lock_fd < 0:
            self._lock_fd = open_lock_file(lock_path_for(self.path))
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # -- start-up ------------------------------------------------------------------------------------------------

    def open(self) -> JournalState:
        """Load the journal (or a v1/v2 checkpoint, rewritten as a journal); a corrupt one raises CheckpointError
        and is left as it is. Creates an empty journal when there is none. Returns the folded state."""
        with self._locked():
            self._reload_locked()
        with self._cond:
            self._claims = self._lay_queued()
        return self.state

    def _reload_locked(self) -> None:
        """Read the file at ``path`` (the lock held), fold it, and keep it open for appends."""
        try:
            parsed = parse_checkpoint_file(self.path.read_bytes(), source=str(self.path))
        except FileNotFoundError:
            parsed = ParsedFile(state=JournalState(), lines=0, needs_rewrite=True)
        self.state = parsed.state
        if parsed.needs_rewrite:
            # An old format, no file, or a torn tail to drop: start from a clean journal of the folded state.
            self._write_compacted_locked(parsed.state)
        else:
            self._reopen(lines=parsed.lines)

    def _reopen(self, *, lines: int) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1  # should the open fail, never keep a number the process may hand to another file
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        self._lines = lines
        self._size = os.fstat(self._fd).st_size

    def close(self) -> None:
        """Write what is still queued and close the files once no batch is being written (a call the server's grace
        period left running may be mid-batch: its descriptors must stay valid until it has synced and unlocked)."""
        with self._cond:
            self._closing = True
            _FLUSHER.cancel(self)
            while self._writing or (self._pending and self._fd >= 0):
                if self._writing:
                    self._cond.wait()
                else:
                    self._lead()  # entries queued by commit_later; a failure is logged, not raised, by their nature
            if self._unsynced and self._fd >= 0:
                with contextlib.suppress(OSError):  # a stop loses nothing by it: the lines are written
                    os.fdatasync(self._fd)
                self._unsynced = False
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1

    # -- appends -------------------------------------------------------------------------------------------------

    def commit(self, entries: Sequence[JournalEntry]) -> None:
        """Append ``entries`` and return once they are on disk, folded into ``state``; raise if their batch failed
        (then none of them counts: the caller answers with an error, the kubelet retries).

        Entries of concurrent callers go into one ``write`` and one ``fdatasync`` (group commit)."""
        self._commit(entries, synced=True)

    def _commit(self, entries: Sequence[JournalEntry], *, synced: bool) -> None:
        with self._cond:
            self._pending.extend(_Queued(entry=e, synced=synced) for e in entries)
            self._queued += 1
            self._settle(self._queued)

    def _settle(self, mine: int) -> None:
        """With ``_cond`` held: lead or wait for batches until commit ``mine`` is settled; raise its failure."""
        while self._settled < mine:
            if self._writing:
                self._cond.wait()
            else:
                self._lead()
        for first, last, error in self._failures:
            if first <= mine <= last:
                raise error

    def commit_written(self, entries: Sequence[JournalEntry]) -> None:
        """Like :meth:`commit`, but return once ``entries`` are written, not synced: they outlive this process (a
        kill), not a power cut — only for records that a power cut makes worthless anyway (see the module's
        notes). The next batch's ``fdatasync`` covers them, or the flusher's after ``flush_after`` seconds."""
        self._commit(entries, synced=False)

    def commit_later(self, entry: PutEntry | DelEntry, *, replaces: ClaimRecord | None) -> None:
        """Record ``entry`` in ``claims`` at once and queue it for the next batch, without waiting for it: for what a
        crash may lose because start-up redoes it, never for what an answer depends on. ``replaces`` is the
        record of its claim it was decided on; :meth:`close` writes what is still queued."""
        with self._cond:
            self._pending.append(_Queued(entry=entry, later=True, replaces=replaces, synced=False))
            self._claims = self._lay_queued()
            if self._later_since is None and not self._closing:
                self._later_since = time.monotonic()
                _FLUSHER.schedule(self, due=self._later_since + self.flush_after)

    def flush_due(self) -> None:
        """The flusher's call: compact the journal if a batch made that due, and write what ``commit_later`` queued
        once it has waited ``flush_after`` seconds for a caller's batch to take it along (while calls keep coming,
        one always does: no write of its own)."""
        with self._cond:
            if self._unsynced:
                self._sync_as_writer()
            if self._compact_wanted:
                self._compact_as_writer()
            since = self._later_since
            if since is None or self._closing:
                return  # a batch took the entries along (a newer one that sets ``_later_since`` schedules anew)
            if since + self.flush_after > time.monotonic():
                _FLUSHER.schedule(self, due=since + self.flush_after)  # called early, for a compaction
                return
            while self._pending and self._later_since == since and self._fd >= 0:
                if self._writing:
                    self._cond.wait()
                else:
                    self._lead()

    def _lay_queued(self) -> Mapping[str, ClaimRecord]:
        """With ``_cond`` held: ``state``'s claims with the later entries not written yet laid over them."""
        queued: dict[str, ClaimRecord | None] = {}
        for q in (*self._in_flight, *self._pending):
            if q.later and (q.entry["op"] == "put" or q.entry["op"] == "del"):
                queued[entry_claim(q.entry)] = q.entry["record"] if q.entry["op"] == "put" else None
        return RecordedClaims(durable=self.state.claims, queued=queued) if queued else self.state.claims

    def _lead(self) -> None:
        """With ``_cond`` held: write every pending entry as one batch, the condition released meanwhile."""
        queued, first, last = self._pending, self._settled + 1, self._queued
        self._pending, self._in_flight, self._later_since = [], queued, None
        self._writing = True
        self._cond.release()
        failure: BaseException | None = None
        try:
            self.state = self._append(queued)
        except BaseException as exc:  # every commit of the batch gets the error; none is acknowledged
            failure = exc
        finally:
            self._cond.acquire()
            self._writing = False
            self._in_flight = []
        if failure is None and not self._closing and self._compaction_due():
            self._compact_wanted = True
            _FLUSHER.schedule(self, due=time.monotonic())
        if self._unsynced and not self._closing:
            _FLUSHER.schedule(self, due=time.monotonic() + self.flush_after)
        if failure is not None:
            self._failures.append((first, last, failure))
            if any(q.later for q in queued):  # no caller waits for these: nobody to tell but the log
                log.warning("queued journal entries not written", extra={"fields": {"error": str(failure)}})
        self._settled = last
        self._claims = self._lay_queued()
        self._cond.notify_all()

    def _append(self, queued: Sequence[_Queued]) -> JournalState:
        """Write and sync a batch; returns the state with it folded in."""
        if self._closing and self._fd < 0:
            raise CheckpointError(f"{self.path}: the journal is closed; nothing more is written to it")
        with self._locked():
            opened = os.fstat(self._fd) if self._fd >= 0 else None
            if opened is None or not opened.st_nlink or opened.st_size != self._size:
                # Another instance wrote: appended (another size) or compacted (renamed a new file over this one,
                # which has no name left). Fold what the file holds before appending to it.
                self._reload_locked()
                opened = os.fstat(self._fd)
            state, entries = _fold_admitted(self.state, queued)
            if not entries:
                return state
            batch = b"".join(render_entry(e) for e in entries)
            size = opened.st_size
            sync = any(q.synced for q in queued)
            try:
                _write_all(self._fd, batch)
                if self.before_sync is not None:
                    self.before_sync()
                if sync:
                    os.fdatasync(self._fd)  # every line before this batch's too
            except OSError:
                # A short write (a full disk) must not leave half a line for good lines to follow.
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, size)
                raise
            self._lines += len(entries)
            self._size = size + len(batch)
            self._unsynced = not sync
            return state

    def _sync_as_writer(self) -> None:
        """With ``_cond`` held: sync what ``commit_written`` left unsynced, as the writer (batches wait meanwhile)."""
        while self._writing:
            self._cond.wait()
        if not self._unsynced or self._fd < 0:
            return
        self._writing = True
        self._cond.release()
        try:
            os.fdatasync(self._fd)
            synced = True
        except OSError as exc:  # the next batch syncs again, and fails its callers if the disk is gone
            log.warning("journal sync failed", extra={"fields": {"path": str(self.path), "error": str(exc)}})
            synced = False
        finally:
            self._cond.acquire()
            self._writing = False
            self._cond.notify_all()
        if synced:
            self._unsynced = False

    # -- compaction ----------------------------------------------------------------------------------------------

    def _compaction_due(self) -> bool:
        live = len(self.state.claims) + len(self.state.owed)
        return self._lines >= max(COMPACT_MIN_LINES, COMPACT_FACTOR * live)

    def _compact_as_writer(self) -> None:
        """With ``_cond`` held: wait for the batch being written, then compact as the writer — batches that come
        meanwhile wait for it, as they wait for another batch."""
        while self._writing:
            self._cond.wait()
        if not self._compact_wanted or self._closing or self._fd < 0:
            return
        self._compact_wanted = False
        if not self._compaction_due():
            return
        self._writing = True
        self._cond.release()
        try:
            self._compact()
        finally:
            self._cond.acquire()
            self._writing = False
            self._claims = self._lay_queued()
            self._cond.notify_all()

    def _compact(self) -> None:
        """Rewrite the journal as its folded state (the writer, ``_cond`` released)."""
        try:
            with self._locked():
                opened = os.fstat(self._fd)
                if not opened.st_nlink or opened.st_size != self._size:
                    self._reload_locked()  # another instance's appends belong in the compacted file too
                self._write_compacted_locked(self.state)
        except Exception as exc:
            # The batches it folds are durable whatever happens here; the next append re-reads the file and fails
            # if it is unreadable. Nothing may escape to the flusher: later entries it is to write come after this.
            log.warning("journal compaction failed", extra={"fields": {"path": str(self.path), "error": str(exc)}})

    def _write_compacted_locked(self, state: JournalState) -> None:
        atomic_write(
            self.path,
            render_journal(state),
            mode=PRIVATE_FILE_MODE,
            dir_mode=PRIVATE_DIR_MODE,
            before_rename=self.before_compact_rename,
        )
        self._reopen(lines=len(state.claims) + len(state.owed))
        self._unsynced = False  # the new file holds every line, synced


@dataclass(kw_only=True, eq=False)
class _Flusher:
    """One thread for the whole process that writes the journals' later entries when they are due (a fleet runs a
    thousand plugins in one process: a thread each would be a thousand threads doing nothing)."""

    _cond: threading.Condition = field(default_factory=threading.Condition)
    _due: dict[int, tuple[float, ClaimJournal]] = field(default_factory=dict)
    _thread: threading.Thread | None = None
    _wakes_at: float = math.inf
    """When the thread, should it be waiting, wakes by itself: a call due no sooner needs no wake-up (each cost a
    prepare a futex wake and a thread switch; a prepare-then-unprepare loop scheduled one per claim)."""

    def schedule(self, journal: ClaimJournal, *, due: float) -> None:
        """Call ``journal.flush_due`` at ``due``, or sooner if it is already due sooner (it reschedules itself when
        called before its later entries are due)."""
        with self._cond:
            if (current := self._due.get(id(journal))) is not None:
                due = min(due, current[0])
            self._due[id(journal)] = (due, journal)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="journal-flush", daemon=True)
                self._thread.start()
            if due < self._wakes_at:  # a thread not waiting looks at ``_due`` again before it waits
                self._cond.notify()

    def cancel(self, journal: ClaimJournal) -> None:
        with self._cond:
            self._due.pop(id(journal), None)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due:
                    self._wakes_at = math.inf
                    self._cond.wait()
                key, (due, journal) = min(self._due.items(), key=lambda item: item[1][0])
                wait = due - time.monotonic()
                if wait > 0:
                    self._wakes_at = due
                    self._cond.wait(wait)
                    continue
                del self._due[key]
            try:
                journal.flush_due()  # its own lock, never this one's: a journal calls schedule() holding its own
            except Exception as exc:  # a batch's failure is logged by the journal; nothing may stop this thread
                log.warning("flushing a journal failed", extra={"fields": {"error": repr(exc)}})


_FLUSHER: Final = _Flusher()


def _fold_admitted(state: JournalState, queued: Sequence[_Queued]) -> tuple[JournalState, list[JournalEntry]]:
    """The state after a batch, and the batch's entries to write: a later entry whose claim is no longer recorded
    as it was when the entry was queued — another instance has recorded it since — is left out (and logged)."""
    claims, owed = dict(state.claims), dict(state.owed)
    admitted: list[JournalEntry] = []
    for q in queued:
        if q.later and (q.entry["op"] == "put" or q.entry["op"] == "del"):
            current = claims.get(entry_claim(q.entry))
            if current is not q.replaces and current != q.replaces:
                log.info(
                    "queued journal entry dropped: the claim was recorded anew",
                    extra={"fields": {"entry": q.entry["op"], "claim": entry_claim(q.entry)}},
                )
                continue
        fold_entry(q.entry, claims=claims, owed=owed)
        admitted.append(q.entry)
    return JournalState(claims=claims, owed=owed), admitted


def _write_all(fd: int, data: bytes) -> None:
    """All of ``data``; a short write (a full disk) raises like a failed one, so the caller truncates it away."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, "short write to the checkpoint journal")
        view = view[written:]
