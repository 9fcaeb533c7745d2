"""What the torture tool does next, drawn from its seeded random source (pure apart from the draws).

The kubelet's habits decide the candidates: a claim whose prepare was cut short is prepared again (its pod still
waits) or unprepared (its pod went away); one whose unprepare was cut short is only ever unprepared again; a held
claim may be prepared again (a second pod, a kubelet restart: the answer must not change); a claim the run deleted
and re-created under the same name gets late repeats of its old unprepare (a kubelet retrying after a restart).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from fakedev.cli.torture.ledger import Belief, ClaimBelief, Ledger
from fakedev.driver.crash import CrashAt, CrashPoint

MAX_BATCH: Final = 3
ARMED_SHARE: Final = 0.6
"""How many plugin processes get a crash point armed; the rest are killed at a random moment."""
MAX_NTH: Final = 3


class OpKind(StrEnum):
    PREPARE = "prepare"
    UNPREPARE = "unprepare"
    PREPARE_AGAIN = "prepare again"
    LATE_UNPREPARE = "late unprepare"
    RECREATE = "re-create"


WEIGHTS: Final = {
    OpKind.PREPARE: 4,
    OpKind.UNPREPARE: 4,
    OpKind.PREPARE_AGAIN: 1,
    OpKind.LATE_UNPREPARE: 1,
    OpKind.RECREATE: 1,
}


@dataclass(frozen=True, kw_only=True)
class Op:
    kind: OpKind
    claims: tuple[ClaimBelief, ...]

    @property
    def unprepares(self) -> bool:
        return self.kind in (OpKind.UNPREPARE, OpKind.LATE_UNPREPARE)


def compute_candidates(ledger: Ledger) -> dict[OpKind, list[ClaimBelief]]:
    """Which claims each kind of call may be about now."""
    return {
        OpKind.PREPARE: ledger.with_belief(Belief.RELEASED, Belief.DOUBT_PREPARE, current=True),
        OpKind.UNPREPARE: ledger.with_belief(Belief.HELD, Belief.DOUBT_PREPARE, Belief.DOUBT_UNPREPARE),
        OpKind.PREPARE_AGAIN: ledger.with_belief(Belief.HELD, current=True),
        OpKind.LATE_UNPREPARE: ledger.with_belief(Belief.RELEASED, current=False),
        OpKind.RECREATE: ledger.with_belief(Belief.RELEASED, current=True),
    }


def choose_op(ledger: Ledger, *, rng: random.Random, settle_doubt: bool) -> Op:
    """The next call (or claim re-creation). ``settle_doubt``: the first turn of a restarted plugin, which the
    kubelet spends on the claims whose calls were cut short, if any, and which is always a call."""
    doubt = [c for c in ledger if c.belief.in_doubt]
    if settle_doubt and doubt:
        unprepare = [c for c in doubt if c.belief is Belief.DOUBT_UNPREPARE or rng.random() < 0.4]
        chosen = unprepare or doubt
        kind = OpKind.UNPREPARE if unprepare else OpKind.PREPARE
        return Op(kind=kind, claims=tuple(chosen[:MAX_BATCH]))
    # A restarted plugin's first turn is a call, so its recovery is measured to its first answer.
    candidates = {
        k: v for k, v in compute_candidates(ledger).items() if v and not (settle_doubt and k is OpKind.RECREATE)
    }
    kinds = sorted(candidates)
    kind = rng.choices(kinds, weights=[WEIGHTS[k] for k in kinds])[0]
    pool = candidates[kind]
    size = 1 if kind is OpKind.RECREATE else rng.randint(1, min(MAX_BATCH, len(pool)))
    return Op(kind=kind, claims=tuple(rng.sample(pool, size)))


def choose_crash(rng: random.Random) -> CrashAt | None:
    """The crash point armed in the next plugin process, or None (it is killed at a random moment instead)."""
    if rng.random() >= ARMED_SHARE:
        return None
    return CrashAt(point=rng.choice(list(CrashPoint)), nth=rng.randint(1, MAX_NTH))
