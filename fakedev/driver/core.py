"""The asynchronous face of the driver: serializes prepare/unprepare and runs the blocking work off the event loop.

Calls are serialized within the process (an asyncio lock) and across processes (``flock`` on ``serialize.lock``) so
two instances during a rolling update never prepare at the same time — except a prepare of claims already held with
their files in place, which only reads and is answered at once. Loading the state at start-up takes the same
lock: it collects the temp files of writes a crash cut short, and must not take those of a live instance's write.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fakedev.driver.fsutil import PRIVATE_DIR_MODE, make_dirs, open_lock_file
from fakedev.driver.state import ClaimState
from fakedev.faults import Faults
from kubeletapi.types import ClaimRef, PrepareResult


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    make_dirs(path.parent, mode=PRIVATE_DIR_MODE)
    fd = open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@dataclass(kw_only=True)
class SerializedDriver:
    state: ClaimState
    lock_path: Path
    faults: Faults = field(default_factory=Faults)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def load(self) -> list[Path]:
        """Load the state under the instances' lock (blocking); returns the temp files collected."""
        with _file_lock(self.lock_path):
            return self.state.load()

    def _prepare_all(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        with _file_lock(self.lock_path):
            if (error := self.faults.prepare.apply()) is not None:
                return {c.uid: PrepareResult(error=error) for c in claims}
            return {c.uid: self.state.prepare(c) for c in claims}

    def _unprepare_all(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        with _file_lock(self.lock_path):
            if (error := self.faults.unprepare.apply()) is not None:
                return {c.uid: error for c in claims}
            return {c.uid: self.state.unprepare(c) for c in claims}

    def _answer_held(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult] | None:
        """Every claim of the call answered from the checkpoint, or None when one of them needs a real prepare."""
        answers = {c.uid: self.state.held(c) for c in claims}
        if not answers or any(a is None for a in answers.values()):
            return None
        if (error := self.faults.prepare.apply()) is not None:
            return {c.uid: PrepareResult(error=error) for c in claims}
        return {uid: a for uid, a in answers.items() if a is not None}

    async def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        # Claims already held are answered without waiting for the lock: a prepare that needs the API — which hangs
        # for as long as etcd is down — must not hold up the answers a restarted kubelet asks for, which need
        # neither the API nor a write.
        if (held := await asyncio.to_thread(self._answer_held, claims)) is not None:
            return held
        async with self._lock:
            return await asyncio.to_thread(self._prepare_all, claims)

    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        async with self._lock:
            return await asyncio.to_thread(self._unprepare_all, claims)
