"""Why a pod cannot start, read from its status and events the way `kubectl describe pod` shows it (pure).

Both an emulated node and a real kubelet put a container that could not be created into ``state.waiting`` with a
reason (``CreateContainerError``, ``RunContainerError``, …) and the runtime's message, and a prepare that failed into
a warning event (``FailedPrepareDynamicResources``). Conformance verdicts and drill reports quote that message: it is
where the CDI spec, the device ID and runc's own words are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from kubeclient import JsonObj

STILL_STARTING: Final = frozenset({"ContainerCreating", "PodInitializing", ""})
"""Waiting reasons that mean "not yet", not "cannot"."""
START_FAILED_EVENTS: Final = frozenset(
    {"FailedPrepareDynamicResources", "FailedCreatePodSandBox", "Failed", "FailedMount"}
)


@dataclass(frozen=True, kw_only=True)
class StartFailure:
    container: str
    """The container that cannot start; empty when the pod as a whole cannot (prepare, sandbox, scheduling)."""
    reason: str
    message: str
    from_events: bool = False
    """Read from an event: history, which a later retry may have overcome (a status is the current state)."""
    attempts: int = 1
    """How many times the node reported this reason (events count repeats): two or more means a retry failed too."""

    def describe(self) -> str:
        who = f"container {self.container}" if self.container else "the pod"
        return f"{who}: {self.reason}: {self.message}" if self.message else f"{who}: {self.reason}"


def _event_count(event: JsonObj) -> int:
    """A kubelet aggregates repeats of one event (``count``, or ``series.count`` in events.k8s.io)."""
    count = event.get("count") or (event.get("series") or {}).get("count") or 1
    return int(count) if isinstance(count, int) and count > 0 else 1


def compute_start_failure(pod: JsonObj, *, events: Sequence[JsonObj] = ()) -> StartFailure | None:
    """The first reason the pod's containers cannot start, or None while nothing says so."""
    status = pod.get("status") or {}
    for entry in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        state = entry.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting and waiting.get("reason", "") not in STILL_STARTING:
            return StartFailure(
                container=str(entry.get("name", "")),
                reason=str(waiting.get("reason")),
                message=str(waiting.get("message", "")),
            )
        terminated = state.get("terminated") or {}
        if terminated and terminated.get("reason") in ("StartError", "ContainerCannotRun"):
            return StartFailure(
                container=str(entry.get("name", "")),
                reason=str(terminated.get("reason")),
                message=str(terminated.get("message", "")),
            )
    if status.get("reason") and status.get("phase") == "Pending":
        return StartFailure(container="", reason=str(status["reason"]), message=str(status.get("message", "")))
    warnings = [e for e in events if e.get("type") == "Warning" and e.get("reason") in START_FAILED_EVENTS]
    if warnings:
        last = sorted(warnings, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))[-1]
        attempts = sum(_event_count(e) for e in warnings if e.get("reason") == last.get("reason"))
        return StartFailure(
            container="",
            reason=str(last.get("reason")),
            message=str(last.get("message", "")),
            from_events=True,
            attempts=attempts,
        )
    return None
