"""Summaries of measured samples (pure)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in [0, 1]; the samples need not be sorted."""
    if not values:
        raise ValueError("percentile of no samples")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass(frozen=True, kw_only=True)
class Latency:
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, samples_ms: Sequence[float]) -> Latency:
        return cls(
            count=len(samples_ms),
            p50_ms=round(statistics.median(samples_ms), 3),
            p99_ms=round(percentile(samples_ms, 0.99), 3),
            max_ms=round(max(samples_ms), 3),
        )


@dataclass(frozen=True, kw_only=True)
class Ratio:
    """The ratio of two sets of runs: median of ``a`` over median of ``b``, with the extremes of all pairings."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, a: Sequence[float], b: Sequence[float]) -> Ratio:
        if not a or not b or min(b) <= 0:
            raise ValueError("a ratio needs runs on both sides and a positive denominator")
        return cls(
            median=round(statistics.median(a) / statistics.median(b), 3),
            low=round(min(a) / max(b), 3),
            high=round(max(a) / min(b), 3),
        )


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b > 0 else None
