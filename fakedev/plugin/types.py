"""The driver core's interfaces as the gRPC servicers see them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Protocol

from kubeletapi.types import ClaimRef, DeviceHealth, PrepareResult


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
