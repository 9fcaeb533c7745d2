"""Calls from the kubelet to a registered driver over its one long-lived connection (contract §2)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import grpc
from grpc import aio

from harness.errors import DraCallError
from kubeletapi import DRA_V1_VERSION, HEALTH_V1_VERSION
from kubeletapi import dra_v1_pb2 as v1
from kubeletapi import dra_v1_pb2_grpc as v1_grpc
from kubeletapi import dra_v1beta1_pb2 as v1beta1
from kubeletapi import dra_v1beta1_pb2_grpc as v1beta1_grpc
from kubeletapi import health_v1_pb2 as h1
from kubeletapi import health_v1_pb2_grpc as h1_grpc
from kubeletapi import health_v1alpha1_pb2 as h1a1
from kubeletapi import health_v1alpha1_pb2_grpc as h1a1_grpc
from kubeletapi.types import ClaimRef, DeviceHealth, Health, PreparedDevice, PrepareResult

CALL_TIMEOUT: Final = 45.0


def _call_error(method: str, exc: grpc.RpcError) -> DraCallError:
    # Sync and asyncio RPC errors both carry code() and details(); plain RpcErrors may not.
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    return DraCallError(f"{method}: {code.name if code else 'error'}: {details}", code=code)


@dataclass(kw_only=True)
class DraConnection:
    """One channel per endpoint, shared by prepare, unprepare and health (upstream asserts a single accept)."""

    endpoint: Path
    channel: aio.Channel = field(init=False)

    def __post_init__(self) -> None:
        # A private subchannel pool: gRPC would otherwise share one socket among channels to the same target, and
        # "one connection per endpoint" must mean this object's connection, as in the kubelet.
        self.channel = aio.insecure_channel(f"unix:{self.endpoint}", options=[("grpc.use_local_subchannel_pool", 1)])

    def state(self) -> grpc.ChannelConnectivity:
        return self.channel.get_state(try_to_connect=False)

    async def prepare(
        self, claims: Sequence[ClaimRef], *, version: str, timeout: float = CALL_TIMEOUT
    ) -> dict[str, PrepareResult]:
        wire = [{"namespace": c.namespace, "uid": c.uid, "name": c.name} for c in claims]
        try:
            if version == DRA_V1_VERSION:
                r1 = await v1_grpc.DRAPluginStub(self.channel).NodePrepareResources(
                    v1.NodePrepareResourcesRequest(claims=[v1.Claim(**c) for c in wire]), timeout=timeout
                )
                return {uid: _result_v1(a) for uid, a in r1.claims.items()}
            rb = await v1beta1_grpc.DRAPluginStub(self.channel).NodePrepareResources(
                v1beta1.NodePrepareResourcesRequest(claims=[v1beta1.Claim(**c) for c in wire]), timeout=timeout
            )
            return {uid: _result_v1beta1(a) for uid, a in rb.claims.items()}
        except grpc.RpcError as exc:
            raise _call_error("NodePrepareResources", exc) from exc

    async def unprepare(
        self, claims: Sequence[ClaimRef], *, version: str, timeout: float = CALL_TIMEOUT
    ) -> dict[str, str]:
        wire = [{"namespace": c.namespace, "uid": c.uid, "name": c.name} for c in claims]
        try:
            if version == DRA_V1_VERSION:
                r1 = await v1_grpc.DRAPluginStub(self.channel).NodeUnprepareResources(
                    v1.NodeUnprepareResourcesRequest(claims=[v1.Claim(**c) for c in wire]), timeout=timeout
                )
                return {uid: a.error for uid, a in r1.claims.items()}
            rb = await v1beta1_grpc.DRAPluginStub(self.channel).NodeUnprepareResources(
                v1beta1.NodeUnprepareResourcesRequest(claims=[v1beta1.Claim(**c) for c in wire]), timeout=timeout
            )
            return {uid: a.error for uid, a in rb.claims.items()}
        except grpc.RpcError as exc:
            raise _call_error("NodeUnprepareResources", exc) from exc

    async def watch_health(self, *, version: str) -> AsyncGenerator[list[DeviceHealth], None]:
        """Yield each health report until the stream ends; RPC errors (Unimplemented included) raise."""
        try:
            if version == HEALTH_V1_VERSION:
                stream1 = h1_grpc.DRAResourceHealthStub(self.channel).NodeWatchResources(h1.NodeWatchResourcesRequest())
                async for r1 in stream1:
                    yield [_health(d) for d in r1.devices]
            else:
                stream2 = h1a1_grpc.DRAResourceHealthStub(self.channel).NodeWatchResources(
                    h1a1.NodeWatchResourcesRequest()
                )
                async for r2 in stream2:
                    yield [_health(d) for d in r2.devices]
        except grpc.RpcError as exc:
            raise _call_error("NodeWatchResources", exc) from exc

    async def close(self) -> None:
        await self.channel.close()


def _result_v1(answer: v1.NodePrepareResourceResponse) -> PrepareResult:
    if answer.error:
        return PrepareResult(error=answer.error)
    return PrepareResult(
        devices=tuple(
            PreparedDevice(
                request_names=tuple(d.request_names),
                pool=d.pool_name,
                device=d.device_name,
                cdi_device_ids=tuple(d.cdi_device_ids),
                share_id=d.share_id if d.HasField("share_id") else None,
            )
            for d in answer.devices
        )
    )


def _result_v1beta1(answer: v1beta1.NodePrepareResourceResponse) -> PrepareResult:
    if answer.error:
        return PrepareResult(error=answer.error)
    return PrepareResult(
        devices=tuple(
            PreparedDevice(
                request_names=tuple(d.request_names),
                pool=d.pool_name,
                device=d.device_name,
                cdi_device_ids=tuple(d.cdi_device_ids),
            )
            for d in answer.devices
        )
    )


def _health(d: h1.DeviceHealth | h1a1.DeviceHealth) -> DeviceHealth:
    return DeviceHealth(
        pool=d.device.pool_name,
        device=d.device.device_name,
        health=Health(int(d.health)),
        last_updated=d.last_updated_time,
        timeout_seconds=d.health_check_timeout_seconds,
        message=d.message,
    )
