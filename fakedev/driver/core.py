"""The driver as the DRA server's worker threads call it: one claim's calls in order, different claims' at once.

Each claim has its own lock while a call works on it (a call naming several claims takes theirs in UID order, so
two calls never wait on each other in a circle); calls on different claims run side by side, each in the server
thread that received it (no hop to another thread and back: each cost a wake-up), and their checkpoint records
share one fsync (:mod:`fakedev.driver.journal`). A claim's calls take its lock in the order they arrive. A prepare
of claims already held with their files in place only reads: it needs no lock but its claims'.

Across processes — the two instances of a rolling update — only two things must stay serialized, and only they
are: appends to the checkpoint journal (its own ``flock``), and start-up, which collects the temp files of writes a
crash cut short and must not take those of a live instance's write in progress. Calls hold ``serialize.lock``
shared; loading the state holds it exclusive.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fakedev.driver.instance_lock import InstanceLock
from fakedev.driver.state import ClaimState
from fakedev.faults import Faults
from fakedev.kube import PendingClaim
from kubeletapi.types import ClaimRef, PrepareResult


@dataclass(kw_only=True)
class _TicketLock:
    """A lock that its waiters take in the order they came (``threading.Lock`` promises no order)."""

    _cond: threading.Condition = field(default_factory=threading.Condition)
    _issued: int = 0
    _serving: int = 0

    def acquire(self) -> None:
        with self._cond:
            ticket = self._issued
            self._issued += 1
            while self._serving != ticket:
                self._cond.wait()

    def release(self) -> None:
        with self._cond:
            self._serving += 1
            self._cond.notify_all()


@dataclass(kw_only=True)
class ClaimLocks:
    """Mutable on purpose: a first-come-first-served lock per claim UID while anyone holds or waits for it."""

    _locks: dict[str, _TicketLock] = field(default_factory=dict)
    _users: dict[str, int] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    @contextlib.contextmanager
    def hold(self, uids: Sequence[str]) -> Iterator[None]:
        ordered = sorted(set(uids))
        with self._guard:
            for uid in ordered:
                self._users[uid] = self._users.get(uid, 0) + 1
                self._locks.setdefault(uid, _TicketLock())
            locks = [self._locks[uid] for uid in ordered]
        taken: list[_TicketLock] = []
        try:
            for lock in locks:
                lock.acquire()
                taken.append(lock)
            yield
        finally:
            for lock in taken:
                lock.release()
            with self._guard:
                for uid in ordered:
                    self._users[uid] -= 1
                    if not self._users[uid]:  # nobody holds or waits: forget it, so the map stays as small as the work
                        del self._users[uid], self._locks[uid]

    def held(self) -> int:
        return len(self._locks)

    def users(self, uid: str) -> int:
        """Calls holding or waiting for ``uid``'s lock."""
        with self._guard:
            return self._users.get(uid, 0)


@dataclass(kw_only=True)
class ConcurrentDriver:
    state: ClaimState
    lock_path: Path
    faults: Faults = field(default_factory=Faults)
    locks: ClaimLocks = field(default_factory=ClaimLocks)
    instances: InstanceLock = field(init=False)

    def __post_init__(self) -> None:
        self.instances = InstanceLock(path=self.lock_path)

    def load(self) -> list[Path]:
        """Load the state with the instances' lock held exclusive (blocking); returns the temp files collected."""
        with self.instances.exclusive():
            return self.state.load()

    def close(self) -> None:
        self.state.close()
        self.instances.close()

    def _prepare_all(
        self, claims: Sequence[ClaimRef], *, ahead: Mapping[str, PendingClaim]
    ) -> dict[str, PrepareResult]:
        with self.instances.shared():
            if (error := self.faults.prepare.apply()) is not None:
                return {c.uid: PrepareResult(error=error) for c in claims}
            return {c.uid: self.state.prepare(c, ahead=ahead.get(c.uid)) for c in claims}

    def _unprepare_all(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        with self.instances.shared():
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

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        # Each unheld claim's GET goes out first, before the call waits for its claims' locks: it is needed in any
        # case, and the API server answers while the call waits.
        ahead = {c.uid: p for c in claims if (p := self.state.read_ahead(c)) is not None}
        try:
            with self.locks.hold([c.uid for c in claims]):
                # Claims already held are answered without the instances' lock: a start-up (another instance's)
                # must not hold up the answers a restarted kubelet asks for, which need neither the API nor a write.
                if (held := self._answer_held(claims)) is not None:
                    return held
                return self._prepare_all(claims, ahead=ahead)
        finally:
            for pending in ahead.values():
                pending.drain()  # a read no prepare needed (held meanwhile, a fault): its connection is kept

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        with self.locks.hold([c.uid for c in claims]):
            return self._unprepare_all(claims)
