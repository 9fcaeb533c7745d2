"""Enumerated values of API fields that both the fake driver and the harness spell."""

from __future__ import annotations

import enum


class TaintEffect(enum.StrEnum):
    """The effect of a device taint (``resource.k8s.io/v1`` ``DeviceTaint.effect``)."""

    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"
    NONE = "None"
