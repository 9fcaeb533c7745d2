"""Kubernetes time formats: ``metav1.Time`` (seconds) and ``metav1.MicroTime`` (Leases, events), always UTC."""

from __future__ import annotations

import datetime


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def render_time(t: datetime.datetime | None = None) -> str:
    """``2026-12-04T05:23:05Z``: a ``metav1.Time``, as in conditions, events and status fields (default: now)."""
    return (t or utc_now()).astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_micro_time(t: datetime.datetime | None = None) -> str:
    """``2026-12-04T05:23:05.123456Z``: a ``metav1.MicroTime`` (Lease renewals, new-style events)."""
    return (t or utc_now()).astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
