"""Serve the plugin: DRA, health and registration on their two Unix sockets.

The plugin serves everything from one gRPC threaded server listening on both sockets: a prepare blocks (its
claim's GET, the journal's fsync), and a worker thread that runs it directly answers sooner than the asyncio
server with a hop to a thread and back (:mod:`fakedev.plugin.dra`). One server, because each further gRPC server
in the process adds a thread polling its own completion queue, and with the gRPC core the ``fakedev plugin``
command chooses (:func:`fakedev.plugin.tuning.grpc_environment`) that costs every DRA call a wake-up. A fleet of
nodes in one process (``threaded=False``) serves both sockets of each node from asyncio servers instead.

Both sockets open together, so the kubelet never learns of an endpoint that cannot answer yet. Sockets are 0600 in
0750 directories; a stale socket from a previous run is replaced; sockets are removed on stop, the registration
socket first, so the kubelet stops routing new calls before the DRA socket closes.
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
from fakedev.plugin.registration import AsyncRegistrationServicer, RegistrationServicer, RegistrationState
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
        _prepare_socket_path(reg_sock)
        calls = CallLog(path=self.record_calls) if self.record_calls else None
        if self.threaded:
            # The guard goes last, so that the recorder sees a request refused as undecodable as a call like any
            # other.
            threaded: list[grpc.ServerInterceptor] = [ThreadedCallRecorder(log=calls)] if calls else []
            server = grpc.server(
                futures.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="dra"),
                interceptors=[*threaded, ThreadedRequestGuard()],
            )
            self._add_threaded_services(server)
            reg_grpc.add_RegistrationServicer_to_server(self._registration(RegistrationServicer), server)
            self._bind(server, dra_sock)
            self._bind(server, reg_sock)
            server.start()
            self._dra = server
        else:
            asynchronous: list[aio.ServerInterceptor] = [*([CallRecorder(log=calls)] if calls else []), RequestGuard()]
            loop_served = aio.server(interceptors=asynchronous)
            self._add_async_services(loop_served)
            self._bind(loop_served, dra_sock)
            await loop_served.start()
            self._dra = loop_served
            self._reg = aio.server(interceptors=asynchronous)
            reg_grpc.add_RegistrationServicer_to_server(self._registration(AsyncRegistrationServicer), self._reg)
            self._bind(self._reg, reg_sock)
            await self._reg.start()
        dra_sock.chmod(SOCKET_MODE)
        reg_sock.chmod(SOCKET_MODE)
        log.info("serving", extra={"fields": {"dra": str(dra_sock), "registration": str(reg_sock)}})

    def _registration(self, kind: type[RegistrationServicer]) -> RegistrationServicer:
        return kind(
            driver=self.paths.driver,
            endpoint=str(self.paths.dra_socket),
            versions=self.versions,
            state=self.registration,
        )

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
        # Registration goes first so the kubelet stops routing new calls before the DRA socket closes (on the threaded
        # server, its socket's name goes; the server then stops serving both).
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
