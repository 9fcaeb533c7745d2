"""What the gRPC layer and the driver core exchange (no protobuf types leak past the adapters)."""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


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


@dataclass(frozen=True, kw_only=True)
class DeviceHealth:
    pool: str
    device: str
    health: Health
    last_updated: int
    """Unix seconds."""
    timeout_seconds: int
    message: str = ""


class DriverCore(Protocol):
    """The driver behind the sockets; errors are per claim, never exceptions."""

    async def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]: ...

    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        """Claim UID → error ("" for success)."""
        ...


class HealthSource(Protocol):
    def snapshot(self) -> Sequence[DeviceHealth]: ...

    def changes(self) -> AsyncIterator[Sequence[DeviceHealth]]:
        """Each yielded batch lists the devices whose health changed."""
        ...
