"""The driver core's interfaces as the gRPC servicers see them (called in the DRA server's worker threads)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from kubeletapi.types import ClaimRef, PrepareResult


class DriverCore(Protocol):
    """The driver behind the sockets; errors are per claim, never exceptions. Blocking, and safe to call from any
    number of threads at once."""

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]: ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        """Claim UID → error ("" for success)."""
        ...
