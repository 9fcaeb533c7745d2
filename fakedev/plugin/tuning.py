"""Interpreter settings for a process that serves plugins (``fakedev plugin``, the benchmark's fleet)."""

from __future__ import annotations

import gc
import sys
from typing import Final

GIL_SWITCH_SECONDS: Final = 0.0005
GC_THRESHOLDS: Final = (50_000, 20, 100)
"""Young-generation collections every 50 000 allocations (CPython: 700), and full ones rarely."""


def tune_for_serving() -> None:
    """A plugin's threads (event loop, gRPC poller, the prepare worker, the status writer) mostly wait on I/O; with
    CPython's default 5 ms switch interval a thread whose I/O is done can wait that long for the GIL behind a busy
    one, which doubled prepare latency (make bench). 0.5 ms hands the GIL over sooner.

    The cyclic garbage collector's default thresholds make it traverse every live object again and again while a
    process builds up a large heap: rendering 500 dgx-h100 nodes that stay alive (a fleet does) took 9.3 ms per node
    with them and 5.8 ms without. What these processes allocate is freed by reference counting; cycles are rare."""
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    gc.set_threshold(*GC_THRESHOLDS)
