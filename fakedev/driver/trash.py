"""Directories an unprepare removes, taken off its critical path: renamed into a trash directory, deleted behind.

A claim's metadata directory lives on the node's disk, where each ``rmdir`` costs about 60 µs (ext4, idle) and an
unprepare made two; a rename into the trash costs one tenth of that and takes the directory out of the metadata
tree at once (containers mount it by path; none runs any more when unprepare is called). A thread deletes what the
trash holds, woken once per :data:`BATCH` directories: waking it on every unprepare cost that unprepare about 70 µs
(the wake-up, then the thread's Python competing for the GIL while the call finished). What a stop leaves there
is deleted by :meth:`Trash.close`, what a crash leaves when the state is loaded again. The trash sits in
the plugin's own data directory, next to the metadata tree, so the rename never crosses file systems; when it fails
anyway the directory is removed in place. A directory comes with the files its record names, so that deleting it
takes an unlink and an rmdir each instead of a walk (:func:`~fakedev.driver.fsutil.remove_known_tree`): walking
was most of the thread's CPU, about 0.1 ms per claim, on a machine whose other core serves the next call.

A claim directory and its one request directory, emptied, are not deleted but kept (at most :data:`SPARES_MAX`)
for the next claims prepared: :meth:`Trash.reuse` renames one into place instead of two ``mkdir`` and ``chmod``.
Making an inode costs far more than renaming one where many were deleted lately — ext4 without a journal, as on
this project's CI machines, skips every recently freed inode one by one: the two ``mkdir`` of a prepare took
0.2–0.6 ms in a loop that deleted 64 claims at a time, the renames 0.05 ms, and the deletes they spare were 0.1 ms
more. Only a pair exactly as a prepare makes it becomes a spare: real directories (no symlink), mode 0755, nothing
left inside once the recorded files are unlinked.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import queue
import shutil
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cdi.files import unique_part
from fakedev.driver.fsutil import DIR_MODE, PRIVATE_DIR_MODE, make_dirs, remove_known_tree

log = logging.getLogger("fakedev.driver.trash")

TRASH_DIR_NAME: Final = "trash"
BATCH: Final = 64
"""Directories the trash collects before its thread is woken to delete them."""
SPARES_MAX: Final = 2 * BATCH
"""Emptied claim directories kept for new claims at most; the trash deletes the others."""


@dataclass(frozen=True, kw_only=True)
class _Spare:
    """An emptied claim directory in the trash whose only entry is an empty request directory, ``inner``."""

    path: Path
    inner: str

    def delete(self) -> None:
        try:
            (self.path / self.inner).rmdir()
            self.path.rmdir()
        except OSError:
            shutil.rmtree(self.path, ignore_errors=True)


@dataclass(frozen=True, kw_only=True)
class _Discarded:
    """A directory in the trash and the files it is known to hold (relative to it; anything else makes a walk)."""

    path: Path
    files: tuple[str, ...]

    def delete(self) -> None:
        remove_known_tree(self.path, files=tuple(self.path / f for f in self.files))

    def empty_out(self) -> _Spare | None:
        """Unlink the recorded files and keep the directories as a spare when they are a claim directory holding
        one request directory, as a prepare makes them, and nothing else is left; otherwise delete them (None)."""
        inner = {f.partition("/")[0] for f in self.files}
        if len(inner) == 1 and all(f.count("/") == 1 for f in self.files):
            (name,) = inner
            below = self.path / name
            try:
                for f in self.files:
                    (self.path / f).unlink(missing_ok=True)
                if (
                    _is_prepared_dir(self.path)
                    and _is_prepared_dir(below)
                    and [p.name for p in self.path.iterdir()] == [name]
                    and next(below.iterdir(), None) is None
                ):
                    return _Spare(path=self.path, inner=name)
            except OSError:
                pass
        self.delete()
        return None


def _is_prepared_dir(path: Path) -> bool:
    """A real directory (not a link to one) with the mode a prepare gives it."""
    mode = path.lstat().st_mode
    return stat.S_ISDIR(mode) and stat.S_IMODE(mode) == DIR_MODE


@dataclass(kw_only=True)
class Trash:
    """Mutable on purpose: the trash directory, its deleting thread and what waits for it."""

    root: Path
    _queue: queue.SimpleQueue[list[_Discarded] | None] = field(default_factory=queue.SimpleQueue)
    """Batches for the deleting thread; None ends it."""
    _collected: list[_Discarded] = field(default_factory=list)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _spares: list[_Spare] = field(default_factory=list)

    def empty(self) -> int:
        """Delete everything in the trash now (start-up: what a stopped or killed plugin left); returns how many."""
        try:
            entries = list(self.root.iterdir())
        except FileNotFoundError:
            return 0
        for entry in entries:
            _delete(entry)
        return len(entries)

    def discard(self, directory: Path, *, files: tuple[Path, ...] = ()) -> None:
        """Take ``directory`` away now and delete it later; a directory that is not there is no error. ``files``:
        what it is known to hold (paths inside it), deleted without a walk; it is removed in place, the same way,
        when the rename fails (the trash cannot be made, another file system)."""
        target = self.root / f"{directory.name}.{unique_part()}"  # no getrandom per call
        try:
            try:
                directory.rename(target)
            except FileNotFoundError:
                if not directory.exists():
                    return  # removed already (an unprepare again, after a crash)
                make_dirs(self.root, mode=PRIVATE_DIR_MODE)  # the trash is made on first use
                directory.rename(target)
        except OSError as exc:
            log.debug("trash: removing in place", extra={"fields": {"dir": str(directory), "error": str(exc)}})
            remove_known_tree(directory, files=files)
            return
        prefix = f"{directory}/"  # strings, not PurePath.relative_to: this runs in the call
        inside = tuple(name[len(prefix) :] for f in files if (name := str(f)).startswith(prefix))
        with self._lock:
            self._collected.append(_Discarded(path=target, files=inside))
            if len(self._collected) < BATCH:
                return
            batch, self._collected = self._collected, []
        self._queue.put(batch)
        self._ensure_thread()

    def reuse(self, request_dir: Path) -> bool:
        """Put a spare in place as ``request_dir`` and the claim directory above it (which must not hold anything);
        False when there is no spare or it cannot be moved there: then the caller makes the directories."""
        with self._lock:
            if not self._spares:
                return False
            spare = self._spares.pop()
        claim_dir = request_dir.parent
        try:
            spare.path.rename(claim_dir)  # over nothing, or over an empty directory
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                with self._lock:
                    self._spares.append(spare)  # the claim has a directory already: the spare stays good
            else:
                _delete(spare.path)
            return False
        if spare.inner != request_dir.name:
            try:
                (claim_dir / spare.inner).rename(request_dir)
            except OSError:
                with contextlib.suppress(OSError):
                    (claim_dir / spare.inner).rmdir()
                return False
        return True

    def spares(self) -> int:
        with self._lock:
            return len(self._spares)

    def close(self) -> None:
        """Delete what was collected, end the deleting thread once it has deleted what was queued before, and
        delete the spares."""
        with self._lock:
            thread, self._thread = self._thread, None
            batch, self._collected = self._collected, []
        for entry in batch:
            entry.delete()
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=5)
        with self._lock:
            spares, self._spares = self._spares, []
        for spare in spares:
            spare.delete()

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="trash", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while (batch := self._queue.get()) is not None:
            for entry in batch:
                if self.spares() >= SPARES_MAX:
                    entry.delete()
                elif (spare := entry.empty_out()) is not None:
                    with self._lock:
                        self._spares.append(spare)


def _delete(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            entry.unlink()
