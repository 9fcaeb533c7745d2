"""The verdicts a check can raise, and what a check needs from the driver before it may wait on anything.

Contract (shared with the catalogue in ``docs/conformance.md``): PASSED; FAILED — the driver broke a rule of the
kubelet contract (one sentence: which rule, what it did); SKIPPED — the driver cannot give what the check needs
(one sentence naming the need); ERROR — the harness or the environment broke (one sentence saying what to check).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class CheckFailed(AssertionError):  # noqa: N818 - a verdict, not an error
    """The driver broke the contract clause the check verifies."""


class CheckSkipped(Exception):  # noqa: N818 - a verdict, not an error
    """The driver cannot give what the check needs (the message names the need)."""


class CheckError(Exception):
    """The harness or the environment broke; the message says what to check."""


class NeedKind(enum.Enum):
    DEVICES = "devices"
    """Allocatable devices the driver published in ResourceSlices for the node."""
    HEALTH_DEVICES = "health-devices"
    """A published device to compare health reports with — only when the driver advertises health."""
    RUNNABLE_POD = "runnable-pod"
    """A device for a pod's claim (the node's runtime is the harness's side: a broken one is an ERROR)."""


@dataclass(frozen=True, kw_only=True)
class Need:
    kind: NeedKind
    count: int = 1

    def describe(self) -> str:
        if self.kind is NeedKind.DEVICES:
            return f"{self.count} allocatable device{'s' if self.count != 1 else ''} on the node"
        if self.kind is NeedKind.HEALTH_DEVICES:
            return "a published device, when health is advertised"
        return "a device for a pod's claim"


@dataclass(frozen=True, kw_only=True)
class DriverOffer:
    """What the driver published and answered, as far as the checks' needs go (gathered once per run)."""

    devices: int
    health_advertised: bool


def compute_unmet(needs: tuple[Need, ...], *, offer: DriverOffer) -> str | None:
    """The one sentence a check is SKIPPED with when the offer does not meet one of its needs; None when all met."""
    for need in needs:
        if need.kind is NeedKind.DEVICES and offer.devices < need.count:
            return f"needs {need.describe()}; the driver published {offer.devices}"
        if need.kind is NeedKind.HEALTH_DEVICES and offer.health_advertised and offer.devices < 1:
            return "needs a published device to compare health reports with; the driver published none"
        if need.kind is NeedKind.RUNNABLE_POD and offer.devices < 1:
            return "needs a device for the pod's claim; the driver published none"
    return None
