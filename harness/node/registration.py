"""The kubelet's side of plugin registration: the handshake and the rules it applies (contract §2).

dial the registration socket (10 s) → ``GetInfo`` (1 s) → validate → register → ``NotifyRegistrationStatus`` (5 s,
``plugin_registered=false`` plus the reason on failure). Any failure ends the attempt; the watcher starts again
from scratch on its next round.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc
from grpc import aio

from harness.errors import HandshakeError
from kubeletapi import (
    DRA_PLUGIN_TYPE,
    DRA_V1_VERSION,
    DRA_V1BETA1_VERSION,
    HEALTH_V1_VERSION,
    HEALTH_V1ALPHA1_VERSION,
)
from kubeletapi import pluginregistration_v1_pb2 as reg_pb
from kubeletapi import pluginregistration_v1_pb2_grpc as reg_grpc

DIAL_TIMEOUT: Final = 10.0
GET_INFO_TIMEOUT: Final = 1.0
NOTIFY_TIMEOUT: Final = 5.0
KNOWN_DRA_VERSIONS: Final = (DRA_V1_VERSION, DRA_V1BETA1_VERSION)
KNOWN_HEALTH_VERSIONS: Final = (HEALTH_V1_VERSION, HEALTH_V1ALPHA1_VERSION)
"""The 1.37 kubelet prefers health v1 and falls back to v1alpha1."""


@dataclass(frozen=True, kw_only=True)
class PluginInfo:
    plugin_type: str
    name: str
    endpoint: str
    supported_versions: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Registration:
    """A registered plugin instance as the kubelet records it."""

    driver: str
    endpoint: Path
    registration_socket: Path
    dra_version: str
    health_version: str | None
    advertised: tuple[str, ...]
    registered_at: float


def compute_dra_version(advertised: Sequence[str]) -> str | None:
    """Walk the plugin's list in order and take the first DRA version the kubelet knows."""
    return next((v for v in advertised if v in KNOWN_DRA_VERSIONS), None)


def compute_health_version(advertised: Sequence[str]) -> str | None:
    """1.37 subscribes only to what is advertised, preferring v1 over v1alpha1 whatever the plugin's order."""
    return next((v for v in KNOWN_HEALTH_VERSIONS if v in advertised), None)


def compute_registration_problem(
    info: PluginInfo, *, registered: Sequence[tuple[str, Path]], endpoint: Path
) -> str | None:
    """Why the kubelet would refuse this registration, or None."""
    if info.plugin_type != DRA_PLUGIN_TYPE:
        return f"plugin type {info.plugin_type!r} is not {DRA_PLUGIN_TYPE!r}"
    if not info.name:
        return "plugin name (the driver name) is empty"
    if not info.supported_versions:
        return "the plugin advertises no supported versions"
    if compute_dra_version(info.supported_versions) is None:
        return (
            f"none of the advertised versions {list(info.supported_versions)} is supported "
            f"(the kubelet knows {list(KNOWN_DRA_VERSIONS)})"
        )
    if (info.name, endpoint) in registered:
        return f"driver {info.name} is already registered with endpoint {endpoint}"
    return None


async def handshake(
    registration_socket: Path, *, registered: Sequence[tuple[str, Path]], notify: bool = True
) -> Registration:
    """Register one plugin the way the kubelet does, or raise HandshakeError saying why not.

    ``notify=False`` only reads: GetInfo and the kubelet's rules, no NotifyRegistrationStatus — for an observer
    beside a real kubelet, which has told the plugin already."""
    async with aio.insecure_channel(f"unix:{registration_socket}") as channel:
        try:
            await asyncio.wait_for(channel.channel_ready(), DIAL_TIMEOUT)
        except TimeoutError as exc:
            raise HandshakeError(
                f"dial {registration_socket}: not ready within {DIAL_TIMEOUT:.0f}s", notified=False
            ) from exc
        stub = reg_grpc.RegistrationStub(channel)
        try:
            reply = await stub.GetInfo(reg_pb.InfoRequest(), timeout=GET_INFO_TIMEOUT)
        except grpc.RpcError as exc:
            raise HandshakeError(f"GetInfo on {registration_socket} failed: {_rpc_text(exc)}", notified=False) from exc
        info = PluginInfo(
            plugin_type=reply.type,
            name=reply.name,
            endpoint=reply.endpoint,
            supported_versions=tuple(reply.supported_versions),
        )
        # An empty endpoint means the plugin serves DRA on its registration socket.
        endpoint = Path(info.endpoint) if info.endpoint else registration_socket
        problem = compute_registration_problem(info, registered=registered, endpoint=endpoint)
        if problem is not None:
            notified = False
            if notify:
                with contextlib.suppress(grpc.RpcError):
                    await _notify(stub, registered_ok=False, error=problem)
                    notified = True
            raise HandshakeError(f"registration of {registration_socket} refused: {problem}", notified=notified)
        dra_version = compute_dra_version(info.supported_versions)
        assert dra_version is not None
        registration = Registration(
            driver=info.name,
            endpoint=endpoint,
            registration_socket=registration_socket,
            dra_version=dra_version,
            health_version=compute_health_version(info.supported_versions),
            advertised=info.supported_versions,
            registered_at=time.monotonic(),
        )
        try:
            if notify:
                await _notify(stub, registered_ok=True, error="")
        except grpc.RpcError as exc:
            raise HandshakeError(f"NotifyRegistrationStatus failed: {_rpc_text(exc)}", notified=False) from exc
        return registration


async def _notify(stub: reg_grpc.RegistrationAsyncStub, *, registered_ok: bool, error: str) -> None:
    await stub.NotifyRegistrationStatus(
        reg_pb.RegistrationStatus(plugin_registered=registered_ok, error=error), timeout=NOTIFY_TIMEOUT
    )


def _rpc_text(exc: grpc.RpcError) -> str:
    # Sync and asyncio RPC errors both carry code() and details(); plain RpcErrors may not.
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    return f"{code.name if code else 'error'}: {details}"
