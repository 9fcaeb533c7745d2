"""The wire contract in plain Python: what drivers and kubelets exchange, free of protobuf types.

Both sides use these (the fake plugin behind its gRPC adapters, the node emulator in front of its stubs), so the
shapes of a prepare answer or a health report are written down once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ClaimRef:
    """A claim as the kubelet names it in a prepare/unprepare call."""

    uid: str
    namespace: str
    name: str


@dataclass(frozen=True, kw_only=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class PrepareResult:
    """One claim's answer: devices, or a non-empty error (then devices are ignored by the kubelet)."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class Health(enum.IntEnum):
    UNKNOWN = 0
    HEALTHY = 1
    UNHEALTHY = 2


class HealthState(enum.StrEnum):
    """A device's health as people and the API spell it (the kubelet's ``allocatedResourcesStatus``, drills, the
    plugin's control socket); :attr:`health` is the health stream's value."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"
    UNKNOWN = "Unknown"

    @property
    def health(self) -> Health:
        return Health[self.name]

    @classmethod
    def of(cls, health: Health) -> HealthState:
        return cls[health.name]


@dataclass(frozen=True, kw_only=True)
class DeviceHealth:
    pool: str
    device: str
    health: Health
    last_updated: int
    """Unix seconds."""
    timeout_seconds: int
    message: str = ""
