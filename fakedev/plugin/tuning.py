"""Interpreter settings for a process that serves plugins (``fakedev plugin``, the benchmark's fleet)."""

from __future__ import annotations

import gc
import sys
from collections.abc import Mapping
from typing import Final

GIL_SWITCH_SECONDS: Final = 0.0005
GRPC_EXPERIMENTS: Final = "GRPC_EXPERIMENTS"
SERVING_GRPC_EXPERIMENTS: Final = "-event_engine_listener"
"""gRPC core's listener and server connections on its older I/O path, where the thread that waits for the server's
next event reads the socket itself. On the EventEngine path (grpcio's default since 1.6x) an EventEngine thread
reads it and wakes that thread, which wakes a worker: an empty call on grpcio's threaded server took 0.55 ms and
0.35 ms of CPU here, 0.43 ms and 0.22 ms without it (``make bench``: ``grpc_floor_python_ms``). It holds only
while the process has one gRPC server: a second one's polling thread takes part of the gain back."""
GC_THRESHOLDS: Final = (50_000, 20, 100)
"""Young-generation collections every 50 000 allocations (CPython: 700), and full ones rarely."""


def grpc_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with gRPC core's settings for a plugin process, to be in place before ``grpc`` is imported (the
    core reads them once). A ``GRPC_EXPERIMENTS`` the user set is kept as it is."""
    return {GRPC_EXPERIMENTS: SERVING_GRPC_EXPERIMENTS, **environ}


def tune_for_serving() -> None:
    """A plugin's threads (event loop, gRPC poller, the prepare worker, the status writer) mostly wait on I/O; with
    CPython's default 5 ms switch interval a thread whose I/O is done can wait that long for the GIL behind a busy
    one, which doubled prepare latency (make bench). 0.5 ms hands the GIL over sooner.

    The cyclic garbage collector's default thresholds make it traverse every live object again and again while a
    process builds up a large heap: rendering 500 dgx-h100 nodes that stay alive (a fleet does) took 9.3 ms per node
    with them and 5.8 ms without. What these processes allocate is freed by reference counting; cycles are rare."""
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    gc.set_threshold(*GC_THRESHOLDS)
