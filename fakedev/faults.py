"""Faults a running plugin can be told to inject into its own calls (through its control socket).

Process-level faults (SIGKILL, SIGSTOP, a removed socket, a restart) are done from outside by the drill runner; the
ones here need the plugin's cooperation: slow or failing prepare/unprepare.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, TypedDict


class CallFaultJson(TypedDict, total=False):
    delaySeconds: float
    failTimes: int
    """How many calls still fail; -1 fails every call until cleared."""
    error: str


@dataclass(kw_only=True)
class CallFault:
    delay_seconds: float = 0.0
    fail_times: int = 0
    error: str = "injected fault"

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> CallFault:
        unknown = set(doc) - {"delaySeconds", "failTimes", "error"}
        if unknown:
            raise ValueError(f"unknown fault field(s): {', '.join(sorted(unknown))}")
        delay = float(doc.get("delaySeconds", 0.0))
        times = int(doc.get("failTimes", 0))
        if delay < 0 or times < -1:
            raise ValueError("delaySeconds must be >= 0 and failTimes >= -1")
        return cls(delay_seconds=delay, fail_times=times, error=str(doc.get("error", "injected fault")))

    def to_json(self) -> CallFaultJson:
        return {"delaySeconds": self.delay_seconds, "failTimes": self.fail_times, "error": self.error}

    def apply(self) -> str | None:
        """Sleep if asked (this is the injected slowness), then return an error if this call must fail."""
        if self.delay_seconds:
            time.sleep(self.delay_seconds)
        if self.fail_times == 0:
            return None
        if self.fail_times > 0:
            self.fail_times -= 1
        return self.error


@dataclass(kw_only=True)
class Faults:
    prepare: CallFault = field(default_factory=CallFault)
    unprepare: CallFault = field(default_factory=CallFault)

    def clear(self) -> None:
        self.prepare = CallFault()
        self.unprepare = CallFault()
