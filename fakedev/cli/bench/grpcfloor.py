"""The floor under every DRA call: a gRPC round trip whose handler does nothing, grpc-go's server against grpcio's.

A driver's prepare or unprepare latency is its own work plus what its gRPC server costs per call. That second part
differs by language, and no work in the plugin can win it back, so the bench measures it apart: grpc-go's standard
health service (``harness/cluster/gomod/grpc-floor``, built and cached like the other Go programs) and the same
method on grpcio's threaded server — the server fakedev's plugin serves DRA on, with the gRPC core settings
``fakedev plugin`` chooses (:func:`fakedev.plugin.tuning.grpc_environment`) — each in its own process, timed
from the node emulator's client library (grpc.aio over a Unix socket) as the DRA calls are.

``python -m fakedev.cli.bench.grpcfloor SOCKET`` is the grpcio side.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Final

import grpc
from grpc import aio

from fakedev.plugin.server import DRA_WORKERS
from fakedev.plugin.tuning import grpc_environment
from harness.cluster.build import build_group, default_cache_root, own_program
from harness.procs import Process, RunDir, start_process, wait_for

GRPC_FLOOR: Final = own_program("grpc-floor")
HEALTH_CHECK: Final = "/grpc.health.v1.Health/Check"
SERVING: Final = b"\x08\x01"
"""A serialized ``HealthCheckResponse{status: SERVING}``: the grpcio side answers what grpc-go's does."""
WARMUP: Final = 200
CALLS: Final = 2000
Say = Callable[[str], None]


def _same(data: bytes) -> bytes:
    return data


def _check(_request: bytes, _context: grpc.ServicerContext) -> bytes:
    return SERVING


class _Health(grpc.GenericRpcHandler):
    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        if handler_call_details.method != HEALTH_CHECK:
            return None
        return grpc.unary_unary_rpc_method_handler(_check, request_deserializer=_same, response_serializer=_same)


def serve(socket: Path) -> None:
    """The grpcio side, until killed."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=DRA_WORKERS))
    server.add_generic_rpc_handlers((_Health(),))
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    server.wait_for_termination()


async def time_calls(socket: Path, *, calls: int = CALLS) -> float:
    """The median round trip in ms over ``calls`` calls, one at a time, after a warm-up."""
    async with aio.insecure_channel(f"unix://{socket}") as channel:
        check = channel.unary_unary(HEALTH_CHECK, request_serializer=_same, response_deserializer=_same)
        for _ in range(WARMUP):
            if await check(b"", timeout=10) != SERVING:
                raise RuntimeError(f"{socket}: the health check did not answer SERVING")
        took = []
        for _ in range(calls):
            started = time.perf_counter()
            await check(b"", timeout=10)
            took.append(time.perf_counter() - started)
    return round(statistics.median(took) * 1e3, 3)


def _listening(socket: Path, process: Process) -> Callable[[], bool]:
    return lambda: socket.exists() or not process.alive()


def measure(*, run: RunDir, say: Say, calls: int = CALLS) -> dict[str, float]:
    """``grpc_floor_go_ms``, ``grpc_floor_python_ms`` and the difference, ``grpc_floor_gap_ms``."""
    binary = build_group(group=GRPC_FLOOR, cache_root=default_cache_root(), progress=say).path("grpc-floor")
    servers = {
        "go": ([str(binary)], None),
        "python": ([sys.executable, "-m", "fakedev.cli.bench.grpcfloor"], grpc_environment(os.environ)),
    }
    figures: dict[str, float] = {}
    for side, (argv, env) in servers.items():
        socket = run.path / f"grpc-floor-{side}.sock"
        process = start_process(name=f"grpc-floor-{side}", argv=[*argv, str(socket)], run=run, env=env)
        try:
            wait_for(_listening(socket, process), timeout=30, what=f"the {side} gRPC server")
            if not process.alive():
                raise process.failure(f"the {side} gRPC floor server")
            figures[f"grpc_floor_{side}_ms"] = asyncio.run(time_calls(socket, calls=calls))
        finally:
            process.stop()
        say(f"gRPC round trip, empty handler, {side} server: {figures[f'grpc_floor_{side}_ms']} ms (p50)")
    figures["grpc_floor_gap_ms"] = round(figures["grpc_floor_python_ms"] - figures["grpc_floor_go_ms"], 3)
    return figures


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
