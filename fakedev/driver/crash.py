"""Crash points: a hidden switch that makes the plugin SIGKILL itself at a named step of prepare or unprepare.

``FAKEDEV_CRASH_AT=<point>[:<nth>]`` in the plugin's environment arms one point; the ``nth`` time the plugin passes
it (default the first), it logs the point and kills itself with SIGKILL — no clean-up, no flush, exactly what a
``kill -9`` or a power cut at that instant leaves. ``fakedev torture`` arms them to prove that every such instant is
recovered from. The points sit between the steps whose order matters for crash safety: each file written (and each
temp file written but not yet renamed), the checkpoint journal's append, the status write after the answer.
Unset, the switch costs a comparison.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Final

from fakedev.driver.fsutil import BeforeRename
from fakedev.errors import CrashPointError

log = logging.getLogger("fakedev.driver.crash")

CRASH_ENV: Final = "FAKEDEV_CRASH_AT"
CRASH_LOGGED: Final = "crash point reached: killing the plugin"
"""What the plugin logs just before it kills itself at an armed point (tools read it in the log)."""


class CrashPoint(StrEnum):
    """Where the plugin can be told to die, in the order a prepare or unprepare passes them."""

    PREPARE_AFTER_NICS = "prepare-after-nics"
    PREPARE_AFTER_DEVICE_NODES = "prepare-after-device-nodes"
    PREPARE_CLAIM_SPEC_TEMP = "prepare-claim-spec-temp"
    """The claim's CDI spec is in its temp file, not renamed yet."""
    PREPARE_AFTER_CLAIM_SPEC = "prepare-after-claim-spec"
    PREPARE_METADATA_TEMP = "prepare-metadata-temp"
    PREPARE_AFTER_METADATA_FILE = "prepare-after-metadata-file"
    """Passed once per request (each has its metadata file)."""
    PREPARE_METADATA_SPEC_TEMP = "prepare-metadata-spec-temp"
    PREPARE_AFTER_METADATA_SPEC = "prepare-after-metadata-spec"
    PREPARE_AFTER_SYNC = "prepare-after-sync"
    PREPARE_BEFORE_STATUS = "prepare-before-status"
    PREPARE_AFTER_STATUS = "prepare-after-status"
    PREPARE_BEFORE_CHECKPOINT = "prepare-before-checkpoint"
    CHECKPOINT_APPEND = "checkpoint-append"
    """A batch of journal lines is written, not synced yet (prepares, unprepares and status writes pass it)."""
    CHECKPOINT_TEMP = "checkpoint-temp"
    """The compacted journal is in its temp file, not renamed yet (passed only when a commit compacts)."""
    PREPARE_BEFORE_CONFIRM = "prepare-before-confirm"
    """A claim planned from the watch cache is recorded (unconfirmed), the API server's answer not read yet (drivers
    that write no claim status)."""
    PREPARE_AFTER_CHECKPOINT = "prepare-after-checkpoint"
    UNPREPARE_AFTER_CLAIM_SPEC = "unprepare-after-claim-spec"
    UNPREPARE_AFTER_METADATA_SPECS = "unprepare-after-metadata-specs"
    UNPREPARE_AFTER_METADATA_DIR = "unprepare-after-metadata-dir"
    UNPREPARE_AFTER_NICS = "unprepare-after-nics"
    UNPREPARE_BEFORE_STATUS = "unprepare-before-status"
    UNPREPARE_AFTER_STATUS = "unprepare-after-status"
    UNPREPARE_BEFORE_CHECKPOINT = "unprepare-before-checkpoint"
    UNPREPARE_AFTER_CHECKPOINT = "unprepare-after-checkpoint"


@dataclass(frozen=True, kw_only=True)
class CrashAt:
    point: CrashPoint
    nth: int = 1
    """Die on the nth passage (counted from the process start)."""

    def render(self) -> str:
        return f"{self.point.value}:{self.nth}"


def parse_crash_at(text: str) -> CrashAt:
    """``<point>[:<nth>]``; anything else is a :class:`CrashPointError` listing the points."""
    name, _, nth_text = text.partition(":")
    try:
        point = CrashPoint(name)
    except ValueError:
        known = ", ".join(p.value for p in CrashPoint)
        raise CrashPointError(f"{CRASH_ENV}={text!r}: unknown crash point {name!r} (known: {known})") from None
    if not nth_text:
        return CrashAt(point=point)
    if not nth_text.isdigit() or int(nth_text) < 1:
        raise CrashPointError(f"{CRASH_ENV}={text!r}: the count after ':' must be a whole number of at least 1")
    return CrashAt(point=point, nth=int(nth_text))


@dataclass(kw_only=True)
class CrashSwitch:
    """Mutable on purpose: counts the passages of its armed point (from the request threads and the status
    writers, hence the lock)."""

    armed: CrashAt | None = None
    _passed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reached(self, point: CrashPoint) -> None:
        if self.armed is None or point is not self.armed.point:
            return
        with self._lock:
            self._passed += 1
            due = self._passed == self.armed.nth
        if due:
            log.warning(CRASH_LOGGED, extra={"fields": {"point": self.armed.render()}})
            os.kill(os.getpid(), signal.SIGKILL)

    def before_rename(self, point: CrashPoint) -> BeforeRename:
        """A hook for the atomic writers: the temp file is complete, the rename has not happened."""

        def hook(_temp: Path) -> None:
            self.reached(point)

        return hook


def crash_at_from_env(environ: Mapping[str, str] | None = None) -> CrashAt | None:
    """The crash point ``FAKEDEV_CRASH_AT`` arms (None when unset or empty)."""
    text = (os.environ if environ is None else environ).get(CRASH_ENV, "")
    return parse_crash_at(text) if text else None
