"""``status.devices`` written off the prepare reply's critical path, and never lost.

A prepare records the claim and the status write it owes in one journal commit (:mod:`fakedev.driver.journal`),
answers the kubelet, and hands the write to this outbox. Worker threads send it (server-side apply), retrying with
backoff while the API server is unreachable, and journal a ``sent`` entry once it is through. A plugin killed in
between finds the write still owed in the journal at start-up and sends it then. An unprepare withdraws a write
that was never sent (no API call at all) or owes a clear when ours may already be there.

One claim's writes are never in flight twice, so a clear cannot overtake the write it undoes. A claim deleted or
replaced meanwhile (404, or its UID no longer matching) settles the write: there is nothing left to write it to.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Final, Protocol

from fakedev.driver.checkpoint import StatusOwed, sent_entry
from fakedev.driver.crash import CrashPoint, CrashSwitch
from fakedev.driver.journal import ClaimJournal
from fakedev.errors import KubeApiError
from kubeclient import JsonObj

log = logging.getLogger("fakedev.driver.status_outbox")

WORKERS: Final = 4
IDLE_SECONDS: Final = 10.0
"""A worker with nothing to send for this long ends; the next write starts one again (a fleet of a thousand nodes
in one process must not keep four idle threads each)."""
FIRST_BACKOFF: Final = 0.2
MAX_BACKOFF: Final = 5.0
GONE: Final = frozenset({404, 409})
"""The claim is gone (404) or is another claim now (409: the UID precondition failed): the write is settled."""


class StatusApi(Protocol):
    def apply_claim_status(self, *, namespace: str, name: str, uid: str, devices: list[JsonObj]) -> None: ...


def new_token() -> str:
    return uuid.uuid4().hex[:16]


def owed_status(*, uid: str, namespace: str, name: str, devices: list[JsonObj]) -> StatusOwed:
    return {"uid": uid, "namespace": namespace, "name": name, "devices": devices, "token": new_token()}


@dataclass(kw_only=True)
class StatusOutbox:
    """Mutable on purpose: the writes waiting, those in flight, the workers."""

    journal: ClaimJournal
    api: StatusApi
    crash: CrashSwitch = field(default_factory=CrashSwitch)
    workers: int = WORKERS
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _waiting: dict[str, StatusOwed] = field(default_factory=dict)
    """By claim UID, oldest first: the latest write owed to each claim not in flight."""
    _not_before: dict[str, float] = field(default_factory=dict)
    _attempts: dict[str, int] = field(default_factory=dict)
    _in_flight: set[str] = field(default_factory=set)
    _may_hold_ours: set[str] = field(default_factory=set)
    """Claims whose status may carry devices of ours: a write went out (or a process that died may have sent it), or
    a clear is owed — until a clear is through. A write owed to one of these is never withdrawn as harmless: it may
    have replaced the clear of an earlier one."""
    _threads: list[threading.Thread] = field(default_factory=list)
    _started: bool = False
    _stopping: bool = False

    def start(self) -> None:
        """Send every write the journal still owes (a previous process died before sending them), then serve."""
        with self._cond:
            self._started = True
            for owed in self.journal.state.owed.values():
                self._waiting.setdefault(owed["uid"], owed)
                self._may_hold_ours.add(owed["uid"])
            # A recorded claim's write may have gone out in an earlier process (``sent``, so no longer owed).
            self._may_hold_ours.update(self.journal.state.claims)
            self._add_workers()

    def _add_workers(self) -> None:
        """With ``_cond`` held: a worker per waiting write, up to ``workers`` (they end when idle)."""
        self._threads = [t for t in self._threads if t.is_alive()]
        while self._started and not self._stopping and len(self._threads) < min(self.workers, len(self._waiting)):
            thread = threading.Thread(target=self._work, name=f"claim-status-{len(self._threads)}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, *, timeout: float = 2.0) -> None:
        """Stop the workers (a write in flight gets ``timeout`` seconds in all); what is still owed stays in the
        journal for the next start."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._threads.clear()

    def owe(self, status: StatusOwed) -> None:
        """Queue a write the journal already records as owed (it replaces an older one of the same claim)."""
        with self._cond:
            uid = status["uid"]
            if not status["devices"]:
                self._may_hold_ours.add(uid)
            self._waiting.pop(uid, None)
            self._waiting[uid] = status
            self._attempts.pop(uid, None)
            self._not_before.pop(uid, None)
            self._add_workers()
            self._cond.notify()

    def withdraw(self, uid: str) -> bool:
        """Forget the write owed to ``uid`` if it has not been sent: True means nothing of ours can be in the
        claim's status. False: it is in flight or was sent (or none was owed), or it replaced a clear not sent yet
        (an earlier write of ours may be there), so a clear may be needed."""
        with self._cond:
            if uid in self._in_flight:
                return False
            return self._waiting.pop(uid, None) is not None and uid not in self._may_hold_ours

    def pending(self) -> int:
        """Writes owed and not yet through (waiting or in flight)."""
        with self._cond:
            return len(self._waiting) + len(self._in_flight)

    def wait_idle(self, *, timeout: float) -> bool:
        """Block until nothing is owed (tests, benchmarks, a clean stop); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._waiting or self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(timeout=min(left, 0.1))
        return True

    # -- workers -------------------------------------------------------------------------------------------------

    def _take(self) -> StatusOwed | None:
        """The next write to send, or None when stopping or idle for :data:`IDLE_SECONDS` (the worker ends)."""
        idle_until = time.monotonic() + IDLE_SECONDS
        with self._cond:
            while not self._stopping:
                now = time.monotonic()
                ready = [
                    uid for uid in self._waiting if uid not in self._in_flight and self._not_before.get(uid, 0.0) <= now
                ]
                if ready:
                    owed = self._waiting.pop(ready[0])
                    self._in_flight.add(owed["uid"])
                    if owed["devices"]:
                        self._may_hold_ours.add(owed["uid"])
                    return owed
                if not self._waiting and now >= idle_until:
                    self._threads = [t for t in self._threads if t is not threading.current_thread()]
                    return None
                later = [t for uid, t in self._not_before.items() if uid in self._waiting]
                wake = min(later) if later else idle_until
                self._cond.wait(timeout=max(0.01, wake - now))
            return None

    def _work(self) -> None:
        while (owed := self._take()) is not None:
            settled = False
            try:
                settled = self._send(owed)
            except Exception:  # a bug must not kill the worker: the write stays owed and is retried
                log.exception("claim status write failed", extra={"fields": {"claim": owed["uid"]}})
            finally:
                self._finish(owed, settled=settled)

    def _send(self, owed: StatusOwed) -> bool:
        """One attempt; True when the write is settled (through, or nothing left to write it to)."""
        clear = not owed["devices"]
        before, after = (
            (CrashPoint.UNPREPARE_BEFORE_STATUS, CrashPoint.UNPREPARE_AFTER_STATUS)
            if clear
            else (CrashPoint.PREPARE_BEFORE_STATUS, CrashPoint.PREPARE_AFTER_STATUS)
        )
        self.crash.reached(before)
        try:
            self.api.apply_claim_status(
                namespace=owed["namespace"], name=owed["name"], uid=owed["uid"], devices=owed["devices"]
            )
        except KubeApiError as exc:
            if exc.status in GONE:
                log.info("claim status not written: the claim is gone", extra={"fields": {"claim": owed["uid"]}})
            else:
                log.warning(
                    "claim status write failed; retrying",
                    extra={"fields": {"claim": owed["uid"], "error": str(exc)}},
                )
                return False
        self.crash.reached(after)
        self.journal.commit([sent_entry(uid=owed["uid"], token=owed["token"])])
        return True

    def _finish(self, owed: StatusOwed, *, settled: bool) -> None:
        with self._cond:
            uid = owed["uid"]
            self._in_flight.discard(uid)
            if settled:
                self._attempts.pop(uid, None)
                self._not_before.pop(uid, None)
                if not owed["devices"]:  # a clear is through (or the claim is gone): nothing of ours is left
                    self._may_hold_ours.discard(uid)
            elif uid not in self._waiting:  # a newer write replaces a failed one; else this one is tried again
                attempts = self._attempts.get(uid, 0) + 1
                self._attempts[uid] = attempts
                self._not_before[uid] = time.monotonic() + min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** (attempts - 1))
                self._waiting[uid] = owed
            self._cond.notify_all()
