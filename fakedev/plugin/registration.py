"""The pluginregistration service the kubelet's plugin watcher calls on our registration socket.

:class:`RegistrationServicer` answers in the calling thread (the plugin's threaded server);
:class:`AsyncRegistrationServicer` is the same for an asyncio server (a fleet's nodes).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import grpc
from grpc import aio

from kubeletapi import DRA_PLUGIN_TYPE
from kubeletapi import pluginregistration_v1_pb2 as reg_pb
from kubeletapi import pluginregistration_v1_pb2_grpc as reg_grpc

log = logging.getLogger("fakedev.plugin.registration")

MAX_LOGGED_ERROR: Final = 300


@dataclass(kw_only=True)
class RegistrationState:
    """What the kubelet told us about our registration; a failure is logged and the plugin keeps serving."""

    registered: bool = False
    error: str = ""
    notifications: int = 0
    changed: threading.Event = field(default_factory=threading.Event)
    """Set on every notification (from whichever thread serves it)."""


class RegistrationServicer(reg_grpc.RegistrationServicer):
    def __init__(self, *, driver: str, endpoint: str, versions: Sequence[str], state: RegistrationState) -> None:
        self._info = reg_pb.PluginInfo(
            type=DRA_PLUGIN_TYPE, name=driver, endpoint=endpoint, supported_versions=list(versions)
        )
        self._state = state

    def GetInfo(self, request: reg_pb.InfoRequest, context: grpc.ServicerContext) -> reg_pb.PluginInfo:
        log.info("GetInfo", extra={"fields": {"endpoint": self._info.endpoint}})
        return self._info

    def NotifyRegistrationStatus(
        self, request: reg_pb.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg_pb.RegistrationStatusResponse:
        self._state.registered = request.plugin_registered
        self._state.error = request.error
        self._state.notifications += 1
        self._state.changed.set()
        if request.plugin_registered:
            log.info("registered with the kubelet", extra={"fields": {"driver": self._info.name}})
        else:
            log.error(
                "the kubelet refused the registration; still serving",
                # The kubelet's words, cut short: the full text stays in the status the control socket reports.
                extra={"fields": {"driver": self._info.name, "error": request.error[:MAX_LOGGED_ERROR]}},
            )
        return reg_pb.RegistrationStatusResponse()


class AsyncRegistrationServicer(RegistrationServicer):
    """The same answers on an asyncio server (they never block)."""

    async def GetInfo(  # type: ignore[override]
        self, request: reg_pb.InfoRequest, context: aio.ServicerContext[object, object]
    ) -> reg_pb.PluginInfo:
        return RegistrationServicer.GetInfo(self, request, context)  # type: ignore[arg-type]

    async def NotifyRegistrationStatus(  # type: ignore[override]
        self, request: reg_pb.RegistrationStatus, context: aio.ServicerContext[object, object]
    ) -> reg_pb.RegistrationStatusResponse:
        return RegistrationServicer.NotifyRegistrationStatus(self, request, context)  # type: ignore[arg-type]
