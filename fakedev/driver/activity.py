"""Whether the driver is serving calls: what its housekeeping waits out (:mod:`fakedev.driver.trash`)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(kw_only=True, eq=False)
class CallActivity:
    """Mutable on purpose: the calls in flight and when the last one ended (monotonic)."""

    _in_flight: int = 0
    _last_end: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        with self._lock:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1
                self._last_end = time.monotonic()

    def quiet_for(self) -> float:
        """Seconds since the last call ended; 0 while one is in flight."""
        with self._lock:
            return 0.0 if self._in_flight else time.monotonic() - self._last_end
