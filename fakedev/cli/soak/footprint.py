"""How much a process holds over a long run — RSS, open files, threads — and whether it grew (drift is pure)."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from fakedev.cli.procfs import memory_mib, open_fds, threads

WINDOW: Final = 0.2
"""The share of the samples at each end whose means are compared."""
RSS_GROWTH_LIMIT: Final = 0.10
"""Relative RSS growth still called flat: allocators keep some slack, a leak keeps growing."""
COUNT_GROWTH_LIMIT: Final = 4
"""Open files and threads may wander by a few (a connection being redialled, a worker thread)."""


@dataclass(frozen=True, kw_only=True)
class Footprint:
    t: float
    """Seconds since sampling began."""
    rss_mib: float
    fds: int
    threads: int


@dataclass(frozen=True, kw_only=True)
class Drift:
    """First and last windows' means of one measure, and whether the growth between them stays within its limit."""

    measure: str
    first: float
    last: float
    limit: str

    @property
    def growth(self) -> float:
        return self.last - self.first

    @property
    def flat(self) -> bool:
        if self.measure == "rss_mib":
            return self.last <= self.first * (1 + RSS_GROWTH_LIMIT)
        return self.growth <= COUNT_GROWTH_LIMIT


def compute_drift(samples: Sequence[Footprint], *, since: float = 0.0, until: float = float("inf")) -> list[Drift]:
    """Compare the means of the first and last :data:`WINDOW` of the samples taken from ``since`` to ``until`` (at
    least one sample each). The window is the steady load: not the start, not an outage that filled a bounded
    thread pool to its cap (growth up to a bound is not a leak), not the final mass deletion."""
    samples = [s for s in samples if since <= s.t <= until]
    if not samples:
        return []
    n = max(1, int(len(samples) * WINDOW))
    head, tail = samples[:n], samples[-n:]
    return [
        Drift(
            measure=measure,
            first=round(statistics.fmean(getattr(s, measure) for s in head), 1),
            last=round(statistics.fmean(getattr(s, measure) for s in tail), 1),
            limit=f"+{RSS_GROWTH_LIMIT:.0%}" if measure == "rss_mib" else f"+{COUNT_GROWTH_LIMIT}",
        )
        for measure in ("rss_mib", "fds", "threads")
    ]


def read_footprint(pid: int, *, t: float) -> Footprint:
    return Footprint(t=t, rss_mib=round(memory_mib(pid)["VmRSS"], 1), fds=open_fds(pid), threads=threads(pid))


@dataclass(kw_only=True)
class FootprintSampler:
    """Samples named processes every ``every`` seconds in a thread; a process that is gone is skipped."""

    pids: Callable[[], Mapping[str, int]]
    """Who to sample, asked every time (a restarted plugin has a new pid)."""
    every: float
    samples: dict[str, list[Footprint]] = field(default_factory=dict)
    started: float = 0.0
    """``time.monotonic()`` when sampling began: a sample's ``t`` counts from it."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        t0 = self.started = time.monotonic()

        def loop() -> None:
            while not self._stop.wait(self.every):
                for name, pid in self.pids().items():
                    try:
                        sample = read_footprint(pid, t=round(time.monotonic() - t0, 1))
                    except (FileNotFoundError, ProcessLookupError):
                        continue
                    self.samples.setdefault(name, []).append(sample)

        self._thread = threading.Thread(target=loop, name="soak-footprint", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
