"""One real node per host: kubelets share ``/sys/fs/cgroup/kubepods`` (and a stopping node removes it), so a second
node on the same host waits for, or refuses, the first instead of breaking it."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TextIO

from harness.errors import HostBusyError, NotReadyError
from harness.procs import wait_for

DEFAULT_LOCK: Final = Path("/run/fakedev/realnode.lock")


@dataclass(kw_only=True)
class HostLock:
    path: Path = DEFAULT_LOCK
    _file: TextIO | None = field(default=None, init=False, repr=False)

    def holder(self) -> str:
        """What the lock file says about its holder (pid and run), for error messages."""
        with contextlib.suppress(OSError):
            return self.path.read_text().strip() or "unknown"
        return "unknown"

    def _try(self, *, owner: str) -> bool:
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} {owner}\n")
        handle.flush()
        self._file = handle
        return True

    def acquire(self, *, owner: str, timeout: float, on_wait: Callable[[str], None] = lambda _m: None) -> None:
        """Take the lock, waiting up to ``timeout`` seconds (0: do not wait). The kernel drops it if we die."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._try(owner=owner):
            return
        if timeout > 0:
            on_wait(f"waiting up to {timeout:.0f}s for another real node on this host ({self.holder()}) to stop")
            with contextlib.suppress(NotReadyError):
                wait_for(lambda: self._try(owner=owner), timeout=timeout, what="the real-node host lock", interval=0.5)
                return
        raise HostBusyError(
            f"another real node runs on this host ({self.holder()}, lock {self.path}): two kubelets would share "
            "/sys/fs/cgroup/kubepods; stop it first"
        )

    def release(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.seek(0)
                self._file.truncate()
            self._file.close()  # closing the descriptor releases the flock
            self._file = None
