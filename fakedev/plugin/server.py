"""Serve the plugin: DRA + health on the DRA socket first, then registration on the registry socket.

The DRA socket's server is gRPC's threaded one: a prepare blocks (its claim's GET, the journal's fsync), and a
worker thread that runs it directly answers sooner than the asyncio server with a hop to a thread and back
(:mod:`fakedev.plugin.dra`). Registration, two calls per plugin start, stays on the asyncio server.

Serving DRA before registering means the kubelet never learns of an endpoint that cannot answer yet. Sockets are
0600 in 0750 directories; a stale socket from a previous run is replaced; sockets are removed on stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import grpc
from grpc import aio

from fakedev.driver.fsutil import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, make_dirs
from fakedev.errors import FakedevError
from fakedev.plugin.calls import CallLog, CallRecorder, ThreadedCallRecorder
from fakedev.plugin.dra import AsyncDraV1beta1Servicer, AsyncDraV1Servicer, DraV1beta1Servicer, DraV1Servicer
from fakedev.plugin.guard import RequestGuard, ThreadedRequestGuard
from fakedev.plugin.health import (
    AsyncHealthV1alpha1Servicer,
    AsyncHealthV1Servicer,
    HealthBoard,
    HealthV1alpha1Servicer,
    HealthV1Servicer,
)
from fakedev.plugin.paths import PluginPaths
from fakedev.plugin.registration import RegistrationServicer, RegistrationState
from fakedev.plugin.types import DriverCore
from kubeletapi import (
    SUPPORTED_VERSIONS,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2_grpc,
)
from kubeletapi import pluginregistration_v1_pb2_grpc as reg_grpc

log = logging.getLogger("fakedev.plugin.server")

SOCKET_DIR_MODE: Final = PRIVATE_DIR_MODE
SOCKET_MODE: Final = PRIVATE_FILE_MODE
DRA_WORKERS: Final = 64
"""Threads serving the DRA socket: calls in flight plus the kubelet's health stream (a thread for as long as it
lasts). More calls wait in gRPC's queue; a kubelet sends one call per pod at a time."""


def _prepare_socket_path(path: Path) -> None:
    make_dirs(path.parent, mode=SOCKET_DIR_MODE)  # missing parents too, whatever the umask
    path.parent.chmod(SOCKET_DIR_MODE)
    if path.is_socket() or path.exists():
        if not path.is_socket():
            raise FakedevError(f"{path} exists and is not a socket; refusing to replace it")
        path.unlink()  # stale socket of a previous instance


@dataclass(kw_only=True)
class PluginServer:
    paths: PluginPaths
    core: DriverCore
    health: HealthBoard
    versions: Sequence[str] = SUPPORTED_VERSIONS
    registration: RegistrationState = field(default_factory=RegistrationState)
    record_calls: Path | None = None
    """Record every call served (a JSON line each) to this file; None: no recorder on the hot path."""
    workers: int = DRA_WORKERS
    threaded: bool = True
    """False: the DRA socket on an asyncio server too — for many nodes in one process (a fleet), where a threaded
    server per node would add a polling thread each (1000 of them cost 0.09 CPU-seconds per second, idle)."""
    _dra: grpc.Server | aio.Server | None = None
    _reg: aio.Server | None = None

    async def start(self) -> None:
        self.paths.check()
        dra_sock, reg_sock = self.paths.dra_socket, self.paths.registration_socket
        _prepare_socket_path(dra_sock)
        calls = CallLog(path=self.record_calls) if self.record_calls else None
        # The guard goes last, so that the recorder sees a request refused as undecodable as a call like any other.
        asynchronous: list[aio.ServerInterceptor] = [*([CallRecorder(log=calls)] if calls else []), RequestGuard()]
        if self.threaded:
            threaded: list[grpc.ServerInterceptor] = [ThreadedCallRecorder(log=calls)] if calls else []
            dra = grpc.server(
                futures.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="dra"),
                interceptors=[*threaded, ThreadedRequestGuard()],
            )
            self._add_threaded_services(dra)
            self._bind(dra, dra_sock)
            dra.start()
            self._dra = dra
        else:
            loop_served = aio.server(interceptors=asynchronous)
            self._add_async_services(loop_served)
            self._bind(loop_served, dra_sock)
            await loop_served.start()
            self._dra = loop_served
        dra_sock.chmod(SOCKET_MODE)

        _prepare_socket_path(reg_sock)
        self._reg = aio.server(interceptors=asynchronous)
        reg_grpc.add_RegistrationServicer_to_server(
            RegistrationServicer(
                driver=self.paths.driver, endpoint=str(dra_sock), versions=self.versions, state=self.registration
            ),
            self._reg,
        )
        self._bind(self._reg, reg_sock)
        await self._reg.start()
        reg_sock.chmod(SOCKET_MODE)
        log.info("serving", extra={"fields": {"dra": str(dra_sock), "registration": str(reg_sock)}})

    def _add_threaded_services(self, server: grpc.Server) -> None:
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(DraV1Servicer(core=self.core), server)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(DraV1beta1Servicer(core=self.core), server)
        health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(HealthV1Servicer(board=self.health), server)
        health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(
            HealthV1alpha1Servicer(board=self.health), server
        )

    def _add_async_services(self, server: aio.Server) -> None:
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(AsyncDraV1Servicer(core=self.core), server)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(AsyncDraV1beta1Servicer(core=self.core), server)
        health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(AsyncHealthV1Servicer(board=self.health), server)
        health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(
            AsyncHealthV1alpha1Servicer(board=self.health), server
        )

    @staticmethod
    def _bind(server: aio.Server | grpc.Server, path: Path) -> None:
        if server.add_insecure_port(f"unix:{path}") == 0:
            raise FakedevError(f"cannot listen on {path}")

    async def stop(self, *, grace: float = 1.0) -> None:
        # Registration goes first so the kubelet stops routing new calls before the DRA socket closes.
        if self._reg is not None:
            await self._reg.stop(grace)
        with contextlib.suppress(FileNotFoundError):
            self.paths.registration_socket.unlink()
        if isinstance(self._dra, aio.Server):
            await self._dra.stop(grace)
        elif self._dra is not None:
            # Calls in progress get ``grace`` to finish; health streams are cancelled, which wakes their threads.
            await asyncio.to_thread(self._dra.stop(grace).wait)
        with contextlib.suppress(FileNotFoundError):
            self.paths.dra_socket.unlink()
        self._reg = self._dra = None
