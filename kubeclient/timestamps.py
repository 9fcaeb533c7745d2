"""Kubernetes time formats: ``metav1.Time`` (seconds) and ``metav1.MicroTime`` (Leases, events), always UTC."""

from __future__ import annotations

import datetime
import re
import time
from typing import Final

_METAV1_TIME: Final = "%Y-%m-%dT%H:%M:%SZ"
_RFC3339: Final = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})", re.ASCII)


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def render_time(t: datetime.datetime | None = None) -> str:
    """``2026-12-04T05:23:05Z``: a ``metav1.Time``, as in conditions, events and status fields (default: now)."""
    if t is None:  # every prepare stamps its record: from the clock, 3 µs where a datetime took 10
        return time.strftime(_METAV1_TIME, time.gmtime())
    return t.astimezone(datetime.UTC).strftime(_METAV1_TIME)


def render_micro_time(t: datetime.datetime | None = None) -> str:
    """``2026-12-04T05:23:05.123456Z``: a ``metav1.MicroTime`` (Lease renewals, new-style events)."""
    return (t or utc_now()).astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime.datetime:
    """An RFC 3339 time as the API's ``date-time`` format has it (``Z`` or an offset, up to nanoseconds), in UTC;
    ``ValueError`` for anything else (Python's own ISO parser accepts more than RFC 3339)."""
    if not _RFC3339.fullmatch(text):
        raise ValueError(f"not an RFC 3339 time (such as 2026-01-02T15:04:05Z): {text[:40]!r}")
    head, _, rest = text.partition(".")
    if rest:  # Python keeps microseconds: drop the digits beyond them, keep the zone
        digits = re.match(r"[0-9]+", rest)
        assert digits is not None
        text = f"{head}.{digits.group()[:6].ljust(6, '0')}{rest[digits.end() :]}"
    try:
        return datetime.datetime.fromisoformat(text.replace("z", "Z").replace("t", "T")).astimezone(datetime.UTC)
    except OverflowError:  # an offset that moves year 1 or 9999 out of range
        raise ValueError(f"a time out of range: {text[:40]!r}") from None
