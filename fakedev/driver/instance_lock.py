"""The lock the instances of a rolling update share: calls hold it shared, loading the state holds it exclusive.

``flock`` belongs to an open file, not to a thread, so the process keeps one descriptor and counts its holders:
the first call in takes the shared lock, the last one out drops it. A call then costs two ``flock`` at most, where
opening the lock file per call cost an ``open``, ``fchmod`` and ``close`` as well. Closing waits for the last
holder: a call the server's grace period left running keeps the other instance's start-up out until it is done.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fakedev.driver.fsutil import PRIVATE_DIR_MODE, make_dirs, open_lock_file


@dataclass(kw_only=True)
class InstanceLock:
    """Mutable on purpose: the open lock file and the count of this process's calls holding it shared."""

    path: Path
    _fd: int = -1
    _holders: int = 0
    _closed: bool = False
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def _descriptor(self) -> int:
        if self._fd < 0:
            make_dirs(self.path.parent, mode=PRIVATE_DIR_MODE)
            self._fd = open_lock_file(self.path)
        return self._fd

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._guard:
            if not self._holders:
                # Blocks (the guard held, so this process's other calls wait too) while another instance loads.
                fcntl.flock(self._descriptor(), fcntl.LOCK_SH)
            self._holders += 1
        try:
            yield
        finally:
            with self._guard:
                self._holders -= 1
                if not self._holders:
                    if self._closed:
                        self._close_descriptor()  # the last call of a stopped plugin releases the lock
                    else:
                        fcntl.flock(self._fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """For loading the state, before this process serves any call (so no shared holder of its own)."""
        with self._guard:
            if self._holders:
                raise RuntimeError("the instances' lock is held shared by this process's own calls")
            fd = self._descriptor()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def holders(self) -> int:
        with self._guard:
            return self._holders

    def close(self) -> None:
        """Release the lock now, or when the last call holding it ends."""
        with self._guard:
            self._closed = True
            if not self._holders:
                self._close_descriptor()

    def _close_descriptor(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # releases whatever this process held
            self._fd = -1
