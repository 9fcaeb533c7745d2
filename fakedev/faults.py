"""Faults a running plugin can be told to inject into its own calls (through its control socket).

Process-level faults (SIGKILL, SIGSTOP, a removed socket, a restart) are done from outside by the drill runner; the
ones here need the plugin's cooperation: slow or failing prepare/unprepare. Their JSON form is in
:mod:`fakedev.plugin.protocol`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass(kw_only=True)
class CallFault:
    """Mutable on purpose: an installed fault counts the failures it still owes down to zero."""

    delay_seconds: float = 0.0
    fail_times: int = 0
    """How many calls still fail; -1 fails every call until cleared."""
    error: str = "injected fault"
    _count: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    """Calls answered from the checkpoint apply faults outside the driver's lock: the count must not skip."""

    def apply(self) -> str | None:
        """Sleep if asked (this is the injected slowness), then return an error if this call must fail."""
        if self.delay_seconds:
            time.sleep(self.delay_seconds)
        with self._count:
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
