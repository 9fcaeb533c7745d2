"""Run conformance checks against a driver and collect results: prerequisites and needs first, then the check;
artifacts, what was sent and received, and the traceback of an unexpected exception go into the result."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence

from harness.conformance.checks import Check
from harness.conformance.context import ConformanceContext
from harness.conformance.verdicts import CheckError, CheckFailed, CheckSkipped, compute_unmet
from harness.errors import DraCallError, NotReadyError
from harness.reports import CaseResult
from kubeclient import ApiError

Progress = Callable[[str], None]


def compute_error_sentence(exc: BaseException) -> str:
    """One sentence for an exception no check turned into a verdict: what broke, and what to check."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    if isinstance(exc, NotReadyError):
        return f"the harness gave up waiting ({first}); check the driver's log and the node's artifacts"
    if isinstance(exc, ApiError):
        return f"the API server refused a request ({first}); check the control plane (kube-apiserver's log)"
    if isinstance(exc, OSError):
        return f"the host refused an operation ({type(exc).__name__}: {first}); check permissions and free space"
    return (
        f"the harness hit {type(exc).__name__}: {first}; this is a harness bug or a broken environment "
        "(the traceback is in the JSON/JUnit report, or run with --verbose)"
    )


def _needs_text(check: Check) -> tuple[str, ...]:
    return tuple(n.describe() for n in check.needs)


def run_check(ctx: ConformanceContext, check: Check, *, done: dict[str, str]) -> CaseResult:
    """Run one check; a failed prerequisite makes it ``blocked``, an unmet need ``skipped``, neither runs it."""
    blockers = [n for n in check.after if done.get(n) not in (None, "passed")]
    if blockers:
        return CaseResult(
            id=check.id,
            title=check.title,
            clause=check.clause,
            required=check.required,
            outcome="blocked",
            message=f"prerequisite {', '.join(blockers)} did not pass",
            needs=_needs_text(check),
        )
    started = time.monotonic()
    ctx.transcript.clear()
    ctx.current = check.id
    outcome, message, trace = "passed", "", ""
    details: dict[str, str] = {}
    try:
        unmet = compute_unmet(check.needs, offer=ctx.offer()) if check.needs else None
        if unmet is not None:
            raise CheckSkipped(unmet)
        if check.calls_driver and ctx.unanswered:
            raise CheckSkipped(f"needs a driver that answers DRA calls; {ctx.unanswered}")
        check.run(ctx)
    except CheckSkipped as exc:
        outcome, message = "skipped", str(exc)
    except CheckFailed as exc:
        outcome, message = "failed", str(exc)
    except DraCallError as exc:
        # A call the contract says must succeed failed as an RPC: the driver's doing, not the harness's.
        outcome, message = "failed", f"a DRA call failed as an RPC ({str(exc).splitlines()[0][:300]})"
        trace = traceback.format_exc()
    except CheckError as exc:
        outcome, message, trace = "error", str(exc), traceback.format_exc()
    except Exception as exc:
        outcome, message, trace = "error", compute_error_sentence(exc), traceback.format_exc()
    if outcome in ("failed", "error"):
        try:
            details = ctx.artifacts()
        except Exception as exc:  # artifacts are a courtesy; never hide the real failure
            details = {"artifacts": f"could not collect: {exc}"}
    transcript = list(ctx.transcript)
    try:
        ctx.reset()
    except Exception as exc:
        if outcome == "passed":
            outcome, message = "error", f"cleaning up after the check failed: {compute_error_sentence(exc)}"
            trace = traceback.format_exc()
    return CaseResult(
        id=check.id,
        title=check.title,
        clause=check.clause,
        required=check.required,
        outcome=outcome,
        message=message,
        seconds=round(time.monotonic() - started, 2),
        details=details,
        needs=_needs_text(check),
        sent="\n".join(t for d, t in transcript if d == "sent"),
        received="\n".join(t for d, t in transcript if d == "received"),
        traceback=trace,
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
