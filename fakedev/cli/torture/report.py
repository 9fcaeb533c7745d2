"""The torture run's figures, its summary lines and its JSON (pure)."""

from __future__ import annotations

import shlex
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict


@dataclass(frozen=True, kw_only=True)
class TortureSettings:
    kills: int
    seed: int
    profile: str
    schema: str | None
    claims: int
    nics: bool
    kubeconfig: Path | None
    evidence_dir: Path = Path("build/torture")
    """Where a run that found a violation copies its logs and the plugin's files."""

    def command(self) -> str:
        """The command line that makes the same decisions again (timing aside)."""
        words = ["fakedev", "torture", "--kills", str(self.kills), "--seed", str(self.seed)]
        words += ["--profile", self.profile, "--claims", str(self.claims)]
        if self.schema is not None:
            words += ["--schema", self.schema]
        if self.nics:
            words.append("--nics")
        if self.kubeconfig is not None:
            words += ["--kubeconfig", str(self.kubeconfig)]
        return shlex.join(words)


@dataclass(kw_only=True)
class Tally:
    """Mutable on purpose: the run's counters, updated as it goes."""

    kills: int = 0
    crash_point_kills: int = 0
    prepares: int = 0
    """Claims sent in NodePrepareResources calls (a batch counts each of its claims)."""
    unprepares: int = 0
    late_unprepares: int = 0
    """Repeated unprepares of UIDs long released, whose claim was deleted and re-created under the same name."""
    recreated: int = 0
    call_failures: int = 0
    """Calls that got no answer (the plugin was killed during them, or died)."""
    claim_errors: int = 0
    """Per-claim errors in answers (a status write the API refused, …); the claim is in doubt and retried."""
    starts: int = 0
    """Plugin processes started (the one publishing the slices first, and the one unpreparing everything last)."""
    recoveries: list[float] = field(default_factory=list)
    """Seconds from each restart to the first successful call of that plugin process."""
    points: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def random_kills(self) -> int:
        return self.kills - self.crash_point_kills


class TortureSummary(TypedDict):
    command: str
    seed: int
    profile: str
    claims: int
    kills: int
    crashPointKills: int
    randomKills: int
    crashPoints: dict[str, int]
    prepares: int
    unprepares: int
    lateUnprepares: int
    recreatedClaims: int
    callFailures: int
    claimErrors: int
    pluginStarts: int
    longestRecoverySeconds: float
    medianRecoverySeconds: float
    violations: list[str]
    wallSeconds: float


def render_summary(settings: TortureSettings, tally: Tally) -> TortureSummary:
    return {
        "command": settings.command(),
        "seed": settings.seed,
        "profile": settings.profile,
        "claims": settings.claims,
        "kills": tally.kills,
        "crashPointKills": tally.crash_point_kills,
        "randomKills": tally.random_kills,
        "crashPoints": dict(sorted(tally.points.items())),
        "prepares": tally.prepares,
        "unprepares": tally.unprepares,
        "lateUnprepares": tally.late_unprepares,
        "recreatedClaims": tally.recreated,
        "callFailures": tally.call_failures,
        "claimErrors": tally.claim_errors,
        "pluginStarts": tally.starts,
        "longestRecoverySeconds": round(max(tally.recoveries, default=0.0), 3),
        "medianRecoverySeconds": round(statistics.median(tally.recoveries), 3) if tally.recoveries else 0.0,
        "violations": list(tally.violations),
        "wallSeconds": round(tally.wall_seconds, 1),
    }


def render_progress(tally: Tally, *, target: int) -> str:
    return (
        f"[{tally.kills:>{len(str(target))}}/{target}] kills (at crash points {tally.crash_point_kills}), "
        f"prepares {tally.prepares}, unprepares {tally.unprepares}, violations {len(tally.violations)}, "
        f"longest recovery {max(tally.recoveries, default=0.0):.2f}s"
    )


def render_summary_lines(summary: TortureSummary) -> list[str]:
    points = ", ".join(f"{k} {v}" for k, v in summary["crashPoints"].items()) or "none"
    lines = [
        f"kills: {summary['kills']} ({summary['crashPointKills']} at crash points, "
        f"{summary['randomKills']} at random moments); plugin processes started: {summary['pluginStarts']}",
        f"calls: {summary['prepares']} claim prepares, {summary['unprepares']} claim unprepares "
        f"({summary['lateUnprepares']} late repeats for re-created claims), {summary['recreatedClaims']} claims "
        f"re-created, {summary['callFailures']} calls cut short, {summary['claimErrors']} per-claim errors",
        f"crash points hit: {points}",
        f"longest recovery: {summary['longestRecoverySeconds']:.2f}s (restart to first successful call; median "
        f"{summary['medianRecoverySeconds']:.2f}s); wall time {summary['wallSeconds']:.0f}s",
        f"violations: {len(summary['violations'])}",
        *(f"  VIOLATION {v}" for v in summary["violations"]),
        f"seed: {summary['seed']}",
    ]
    if summary["violations"]:
        lines.append(f"reproduce with: {summary['command']}")
    return lines
