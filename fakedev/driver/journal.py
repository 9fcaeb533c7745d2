"""The checkpoint as an append-only journal with group commit (format ``fakedev.dra/checkpoint-v3``).

Rewriting the whole checkpoint on every prepare made each call cost O(claims held) and serialized every call on one
fsync. Here a call appends one line and waits for it to be durable; calls that arrive while a batch is being
synced go together into the next one, so N concurrent prepares share one ``fdatasync`` (group commit). When the
journal holds many more lines than live records it is compacted: the folded state is written as a fresh journal
(temp file, fsync, rename, directory fsync), so its size stays proportional to the claims held.

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

Appends grow the file: writing ahead free space to overwrite in place would save the size commit of each
``fdatasync`` (197 → 135 µs here), but a power cut may then keep a batch's later page and lose an earlier one —
good lines after a hole, which reads as corruption — where a growing file on ext4 only ever loses its tail.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from fakedev.driver.checkpoint import (
    JournalEntry,
    JournalState,
    ParsedFile,
    fold_entries,
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


def lock_path_for(journal: Path) -> Path:
    return journal.with_name(journal.name + ".lock")


@dataclass(kw_only=True)
class ClaimJournal:
    """Mutable on purpose: the open journal, the folded state and the group-commit bookkeeping.

    ``state`` is what this process knows is durable. It is replaced, never changed in place, so a reader holding
    it is never disturbed; only :meth:`commit` replaces it.
    """

    path: Path
    state: JournalState = field(default_factory=JournalState)
    before_compact_rename: BeforeRename | None = None
    """A crash point's hook: the compacted journal is written, not renamed yet."""
    before_sync: Callable[[], None] | None = None
    """A crash point's hook: a batch is written, not synced yet."""
    _fd: int = -1
    _lock_fd: int = -1
    """The lock file, kept open: only the leader of a batch (or start-up) takes it, so one descriptor serves."""
    _lines: int = 0
    """Entry lines in the file this process has open (the header not counted)."""
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _pending: list[JournalEntry] = field(default_factory=list)
    _queued: int = 0
    """Commits queued so far (a commit's number is its place in this count)."""
    _settled: int = 0
    """Commits whose batch has been written and synced, or has failed."""
    _writing: bool = False
    _failures: deque[tuple[int, int, BaseException]] = field(default_factory=lambda: deque(maxlen=64))
    """Recent failed batches: (first commit, last commit, error)."""

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
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        self._lines = lines

    def close(self) -> None:
        """Close the files once no batch is being written (a call the server's grace period left running may be
        mid-batch: its descriptors must stay valid until it has synced and unlocked)."""
        with self._cond:
            while self._writing:
                self._cond.wait()
            if self._pending and self._fd >= 0:
                self._lead()  # entries queued by commit_later; a failure is logged, not raised, by their nature
                # Its batch holds no caller's commit, so its number range starts past the last one queued.
                if self._failures and (failed := self._failures[-1])[0] > self._queued:
                    log.warning("queued journal entries not written", extra={"fields": {"error": str(failed[2])}})
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
        with self._cond:
            self._pending.extend(entries)
            self._queued += 1
            mine = self._queued
            while self._settled < mine:
                if self._writing:
                    self._cond.wait()
                else:
                    self._lead()
            for first, last, error in self._failures:
                if first <= mine <= last:
                    raise error

    def commit_later(self, entries: Sequence[JournalEntry]) -> None:
        """Queue ``entries`` for the next batch, without waiting for it: for what may be lost (a confirmation a
        restart can redo), never for what an answer depends on. :meth:`close` writes what is still queued."""
        with self._cond:
            self._pending.extend(entries)

    def _lead(self) -> None:
        """With ``_cond`` held: write every pending entry as one batch, the condition released meanwhile."""
        entries, first, last = self._pending, self._settled + 1, self._queued
        self._pending = []
        self._writing = True
        self._cond.release()
        failure: BaseException | None = None
        try:
            try:
                self._append(b"".join(render_entry(e) for e in entries), count=len(entries))
                self.state = fold_entries(self.state, entries)
            except BaseException as exc:  # every commit of the batch gets the error; none is acknowledged
                failure = exc
            if failure is None:
                self._maybe_compact()
        finally:
            self._cond.acquire()
            self._writing = False
        if failure is not None:
            self._failures.append((first, last, failure))
        self._settled = last
        self._cond.notify_all()

    def _append(self, batch: bytes, *, count: int) -> None:
        with self._locked():
            opened = os.fstat(self._fd) if self._fd >= 0 else None
            if opened is None or not opened.st_nlink:
                # Another instance compacted the journal (renamed a new file over it, so the one open here has no
                # name left): fold what the new one holds before appending to it.
                self._reload_locked()
                opened = os.fstat(self._fd)
            size = opened.st_size
            try:
                _write_all(self._fd, batch)
                if self.before_sync is not None:
                    self.before_sync()
                os.fdatasync(self._fd)
            except OSError:
                # A short write (a full disk) must not leave half a line for good lines to follow.
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, size)
                raise
            self._lines += count

    # -- compaction ----------------------------------------------------------------------------------------------

    def _maybe_compact(self) -> None:
        """Rewrite the journal as its folded state once it is mostly dead lines (the leader, unlocked)."""
        live = len(self.state.claims) + len(self.state.owed)
        if self._lines < max(COMPACT_MIN_LINES, COMPACT_FACTOR * live):
            return
        try:
            with self._locked():
                self._reload_locked()  # another instance's appends belong in the compacted file too
                self._write_compacted_locked(self.state)
        except (OSError, CheckpointError) as exc:
            # The appended batch is durable whatever happens here, and its callers must hear so (an error escaping
            # would leave them waiting); the next append re-reads the file and fails if it is unreadable.
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


def _write_all(fd: int, data: bytes) -> None:
    """All of ``data``; a short write (a full disk) raises like a failed one, so the caller truncates it away."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, "short write to the checkpoint journal")
        view = view[written:]
