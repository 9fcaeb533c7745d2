"""Run conformance checks against a driver and collect results (prerequisites first, artifacts on failure)."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence

from harness.conformance.checks import Check, CheckFailed, CheckSkipped
from harness.conformance.context import ConformanceContext
from harness.reports import CaseResult

Progress = Callable[[str], None]


def run_check(ctx: ConformanceContext, check: Check, *, done: dict[str, str]) -> CaseResult:
    """Run one check; a failed prerequisite makes it ``blocked`` instead of failing it too."""
    blockers = [n for n in check.needs if done.get(n) not in (None, "passed")]
    if blockers:
        return CaseResult(
            id=check.id,
            title=check.title,
            clause=check.clause,
            required=check.required,
            outcome="blocked",
            message=f"prerequisite failed: {', '.join(blockers)}",
        )
    started = time.monotonic()
    outcome, message, details = "passed", "", {}
    try:
        check.run(ctx)
    except CheckSkipped as exc:
        outcome, message = "skipped", str(exc)
    except CheckFailed as exc:
        outcome, message = "failed", str(exc)
    except Exception as exc:
        outcome, message = "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
    if outcome in ("failed", "error"):
        try:
            details = ctx.artifacts()
        except Exception as exc:  # artifacts are a courtesy; never hide the real failure
            details = {"artifacts": f"could not collect: {exc}"}
    try:
        ctx.reset()
    except Exception as exc:
        if outcome == "passed":
            outcome, message = "error", f"cleaning up after the check failed: {exc}"
    return CaseResult(
        id=check.id,
        title=check.title,
        clause=check.clause,
        required=check.required,
        outcome=outcome,
        message=message,
        seconds=round(time.monotonic() - started, 2),
        details=details,
    )


def run_checks(ctx: ConformanceContext, checks: Sequence[Check], *, progress: Progress) -> list[CaseResult]:
    done: dict[str, str] = {}
    results = []
    for check in checks:
        progress(f"{check.id} …")
        result = run_check(ctx, check, done=done)
        done[check.id] = result.outcome
        results.append(result)
        progress(f"{check.id}: {result.outcome} ({result.seconds:.1f}s)")
    return results
