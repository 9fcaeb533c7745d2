"""Reading py-spy's folded stacks: where a profiled driver spent its samples (pure)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Entry:
    frame: str
    total: float
    """Share of samples with this frame anywhere on the stack."""
    own: float
    """Share of samples with this frame on top."""


def top_entries(folded: str, *, count: int = 15) -> list[Entry]:
    """The frames with the largest inclusive share, from ``frame;frame;...;frame <samples>`` lines."""
    total: Counter[str] = Counter()
    own: Counter[str] = Counter()
    samples = 0
    for line in folded.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")
        k = int(n)
        samples += k
        for frame in set(frames):
            total[frame] += k
        own[frames[-1]] += k
    if samples == 0:
        return []
    return [
        Entry(frame=f, total=round(t / samples, 3), own=round(own[f] / samples, 3)) for f, t in total.most_common(count)
    ]
