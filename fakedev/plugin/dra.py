"""DRA v1 and v1beta1 services: translate protobuf to the driver core's types and back.

Whole-call problems (empty or duplicate claim UIDs, an oversized batch) are INVALID_ARGUMENT; anything about one
claim goes into that claim's entry, so one bad claim never fails its neighbours.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Final, Protocol

import grpc
from grpc import aio

from fakedev.plugin.types import DriverCore
from kubeletapi import dra_v1_pb2 as v1
from kubeletapi import dra_v1_pb2_grpc as v1_grpc
from kubeletapi import dra_v1beta1_pb2 as v1beta1
from kubeletapi import dra_v1beta1_pb2_grpc as v1beta1_grpc
from kubeletapi.types import ClaimRef, PrepareResult

log = logging.getLogger("fakedev.plugin.dra")

MAX_CLAIMS_PER_CALL: Final = 1000
"""A pod has at most a few dozen claims; a batch far beyond that is a broken caller, not a workload."""


class _WireClaim(Protocol):
    namespace: str
    uid: str
    name: str


def compute_claim_refs(claims: Sequence[_WireClaim]) -> tuple[list[ClaimRef], str]:
    """The claims of a request, or an error message that makes the whole call INVALID_ARGUMENT."""
    if len(claims) > MAX_CLAIMS_PER_CALL:
        return [], f"{len(claims)} claims in one call; at most {MAX_CLAIMS_PER_CALL} are accepted"
    refs, seen = [], set()
    for index, claim in enumerate(claims):
        if not claim.uid:
            return [], f"claims[{index}] has an empty uid"
        if claim.uid in seen:
            return [], f"claims[{index}] repeats uid {claim.uid}"
        seen.add(claim.uid)
        refs.append(ClaimRef(uid=claim.uid, namespace=claim.namespace, name=claim.name))
    return refs, ""


async def _refs_or_abort(claims: Sequence[_WireClaim], context: aio.ServicerContext[object, object]) -> list[ClaimRef]:
    refs, problem = compute_claim_refs(claims)
    if problem:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
    return refs


def _log_call(method: str, refs: Sequence[ClaimRef], started: float, errors: int) -> None:
    log.info(
        method,
        extra={"fields": {"claims": len(refs), "failed": errors, "ms": round((time.monotonic() - started) * 1e3, 2)}},
    )


class DraV1Servicer(v1_grpc.DRAPluginServicer):
    def __init__(self, *, core: DriverCore) -> None:
        self._core = core

    async def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: aio.ServicerContext[object, object]
    ) -> v1.NodePrepareResourcesResponse:
        started = time.monotonic()
        refs = await _refs_or_abort(request.claims, context)
        results = await self._core.prepare(refs)
        response = v1.NodePrepareResourcesResponse()
        for uid, result in results.items():
            response.claims[uid].CopyFrom(_v1_result(result))
        _log_call("NodePrepareResources", refs, started, sum(bool(r.error) for r in results.values()))
        return response

    async def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: aio.ServicerContext[object, object]
    ) -> v1.NodeUnprepareResourcesResponse:
        started = time.monotonic()
        refs = await _refs_or_abort(request.claims, context)
        errors = await self._core.unprepare(refs)
        response = v1.NodeUnprepareResourcesResponse()
        for uid, error in errors.items():
            response.claims[uid].error = error
        _log_call("NodeUnprepareResources", refs, started, sum(bool(e) for e in errors.values()))
        return response


def _v1_result(result: PrepareResult) -> v1.NodePrepareResourceResponse:
    if result.error:
        return v1.NodePrepareResourceResponse(error=result.error)
    devices = []
    for d in result.devices:
        device = v1.Device(
            request_names=list(d.request_names),
            pool_name=d.pool,
            device_name=d.device,
            cdi_device_ids=list(d.cdi_device_ids),
        )
        if d.share_id is not None:
            device.share_id = d.share_id
        devices.append(device)
    return v1.NodePrepareResourceResponse(devices=devices)


class DraV1beta1Servicer(v1beta1_grpc.DRAPluginServicer):
    """The same calls for kubelets that only speak v1beta1 (no share IDs on the wire)."""

    def __init__(self, *, core: DriverCore) -> None:
        self._core = core

    async def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: aio.ServicerContext[object, object]
    ) -> v1beta1.NodePrepareResourcesResponse:
        started = time.monotonic()
        refs = await _refs_or_abort(request.claims, context)
        results = await self._core.prepare(refs)
        response = v1beta1.NodePrepareResourcesResponse()
        for uid, result in results.items():
            entry = response.claims[uid]
            if result.error:
                entry.error = result.error
                continue
            for d in result.devices:
                entry.devices.add(
                    request_names=list(d.request_names),
                    pool_name=d.pool,
                    device_name=d.device,
                    cdi_device_ids=list(d.cdi_device_ids),
                )
        _log_call("NodePrepareResources/v1beta1", refs, started, sum(bool(r.error) for r in results.values()))
        return response

    async def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: aio.ServicerContext[object, object]
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        started = time.monotonic()
        refs = await _refs_or_abort(request.claims, context)
        errors = await self._core.unprepare(refs)
        response = v1beta1.NodeUnprepareResourcesResponse()
        for uid, error in errors.items():
            response.claims[uid].error = error
        _log_call("NodeUnprepareResources/v1beta1", refs, started, sum(bool(e) for e in errors.values()))
        return response
