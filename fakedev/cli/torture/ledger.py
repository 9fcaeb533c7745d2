"""What the torture tool, playing the kubelet, believes about each claim UID (pure bookkeeping, no I/O).

A UID is *held* once a prepare of it succeeded and until an unprepare of it succeeds; *released* before its first
prepare and after a successful unprepare; *in doubt* when the last call about it failed or was cut short by a kill
(its files may or may not exist, and the kubelet's next call is the same one again). The answer to a held UID must
never change: a second prepare that answers other devices is a violation, reported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum

from kubeletapi.types import PreparedDevice


class Belief(StrEnum):
    RELEASED = "released"
    HELD = "held"
    DOUBT_PREPARE = "in doubt (prepare)"
    DOUBT_UNPREPARE = "in doubt (unprepare)"

    @property
    def in_doubt(self) -> bool:
        return self in (Belief.DOUBT_PREPARE, Belief.DOUBT_UNPREPARE)


@dataclass(frozen=True, kw_only=True)
class ClaimBelief:
    uid: str
    namespace: str
    name: str
    devices: tuple[str, ...]
    """The devices the scheduler allocated to it (their NICs, for a NIC profile)."""
    belief: Belief = Belief.RELEASED
    answer: tuple[PreparedDevice, ...] | None = None
    """What the plugin first answered since the UID was last released (kept while a later call is in doubt)."""
    current: bool = True
    """False once the claim was deleted (a successor of the same name may exist)."""


@dataclass(kw_only=True)
class Ledger:
    """Mutable on purpose: one entry per UID the run ever created, updated after every call."""

    claims: dict[str, ClaimBelief] = field(default_factory=dict)

    def add(self, claim: ClaimBelief) -> None:
        self.claims[claim.uid] = claim

    def __iter__(self) -> Iterator[ClaimBelief]:
        return iter(self.claims.values())

    def get(self, uid: str) -> ClaimBelief:
        return self.claims[uid]

    def with_belief(self, *beliefs: Belief, current: bool | None = None) -> list[ClaimBelief]:
        return [c for c in self if c.belief in beliefs and (current is None or c.current == current)]

    def prepared(self, uid: str, answer: Iterable[PreparedDevice]) -> str | None:
        """Record a successful prepare; returns a violation when a held UID got a different answer."""
        claim = self.claims[uid]
        got = tuple(answer)
        if claim.answer is not None and claim.answer != got:
            return (
                f"claim {claim.namespace}/{claim.name} ({uid}) was prepared twice with different devices while held: "
                f"first {_render(claim.answer)}, now {_render(got)}"
            )
        self.claims[uid] = replace(claim, belief=Belief.HELD, answer=claim.answer or got)
        return None

    def unprepared(self, uid: str) -> None:
        self.claims[uid] = replace(self.claims[uid], belief=Belief.RELEASED, answer=None)

    def doubted(self, uid: str, *, belief: Belief) -> None:
        """The call about ``uid`` failed or was killed; a held UID keeps its answer (a retried prepare must match)."""
        claim = self.claims[uid]
        self.claims[uid] = replace(claim, belief=belief)

    def retired(self, uid: str) -> None:
        """The claim object was deleted (it was released first, as the API requires of a reserved claim)."""
        self.claims[uid] = replace(self.claims[uid], current=False)


def _render(devices: tuple[PreparedDevice, ...]) -> str:
    return "[" + ", ".join(f"{d.pool}/{d.device} {list(d.cdi_device_ids)}" for d in devices) + "]"
