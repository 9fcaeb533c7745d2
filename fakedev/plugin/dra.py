"""DRA v1 and v1beta1 services: translate protobuf to the driver core's types and back.

The servicers are synchronous: gRPC's threaded server runs each call in a worker thread, which calls the driver
directly (an asyncio server answered about 0.17 ms later per call: its own wake-ups plus the hop to a thread for the
driver's blocking work and back).

Whole-call problems (empty or duplicate claim UIDs, an oversized batch) are INVALID_ARGUMENT; anything about one
claim goes into that claim's entry, so one bad claim never fails its neighbours. A claim whose UID, namespace or
name breaks Kubernetes' rules is answered here and never reaches the driver, so its text is neither used for a
path nor logged; what of a request an answer quotes is cut short (status details travel in a header of at most
16 KiB, per-claim errors end up in the kubelet's events).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

import grpc
from grpc import aio

from fakedev.driver.claims import check_claim_ref
from fakedev.errors import ClaimError
from fakedev.plugin.types import DriverCore
from kubeletapi import dra_v1_pb2 as v1
from kubeletapi import dra_v1_pb2_grpc as v1_grpc
from kubeletapi import dra_v1beta1_pb2 as v1beta1
from kubeletapi import dra_v1beta1_pb2_grpc as v1beta1_grpc
from kubeletapi.types import ClaimRef, PrepareResult

log = logging.getLogger("fakedev.plugin.dra")

MAX_CLAIMS_PER_CALL: Final = 1000
"""A pod has at most a few dozen claims; a batch far beyond that is a broken caller, not a workload."""
MAX_REF_CHARS: Final = 253
"""The longest object name Kubernetes allows; UIDs and namespaces are shorter still. A longer value is refused
before the driver's own rules see it, in an error that does not repeat it."""
_SHOWN: Final = 60


class _WireClaim(Protocol):
    namespace: str
    uid: str
    name: str


def shown(value: str) -> str:
    """A value from a request as an error quotes it: on one line (``repr``) and at most about 60 characters."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def compute_refusal(claim: _WireClaim) -> str:
    """Why this claim cannot be prepared or unprepared as named, or "" when its names are valid."""
    for key, value in (("uid", claim.uid), ("namespace", claim.namespace), ("name", claim.name)):
        if len(value) > MAX_REF_CHARS:
            return f"claim {key} {shown(value)} ({len(value)} characters) is too long to be valid"
    try:
        check_claim_ref(uid=claim.uid, namespace=claim.namespace, name=claim.name)
    except ClaimError as exc:
        return str(exc)
    return ""


@dataclass(frozen=True, kw_only=True)
class ClaimBatch:
    """A request's claims sorted out: those for the driver, those refused here, or a problem with the whole call."""

    refs: tuple[ClaimRef, ...] = ()
    refused: Mapping[str, str] = field(default_factory=dict)
    """UID → why, for claims whose names are not valid."""
    problem: str = ""
    """Non-empty: the whole call is INVALID_ARGUMENT, for this reason."""


def compute_claim_batch(claims: Sequence[_WireClaim]) -> ClaimBatch:
    """Sort out the claims of a request (pure)."""
    if len(claims) > MAX_CLAIMS_PER_CALL:
        return ClaimBatch(
            refused={}, problem=f"{len(claims)} claims in one call; at most {MAX_CLAIMS_PER_CALL} are accepted"
        )
    refs: list[ClaimRef] = []
    refused: dict[str, str] = {}
    seen: set[str] = set()
    for index, claim in enumerate(claims):
        if not claim.uid:
            return ClaimBatch(problem=f"claims[{index}] has an empty uid")
        if claim.uid in seen:
            return ClaimBatch(problem=f"claims[{index}] repeats uid {shown(claim.uid)}")
        seen.add(claim.uid)
        if refusal := compute_refusal(claim):
            refused[claim.uid] = refusal
        else:
            refs.append(ClaimRef(uid=claim.uid, namespace=claim.namespace, name=claim.name))
    return ClaimBatch(refs=tuple(refs), refused=refused)


def _batch_or_abort(claims: Sequence[_WireClaim], context: grpc.ServicerContext) -> ClaimBatch:
    batch = compute_claim_batch(claims)
    if batch.problem:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, batch.problem)  # raises: the call ends here
    return batch


def _prepare(core: DriverCore, batch: ClaimBatch) -> dict[str, PrepareResult]:
    results = {uid: PrepareResult(error=error) for uid, error in batch.refused.items()}
    if batch.refs:
        results.update(core.prepare(batch.refs))
    return results


def _unprepare(core: DriverCore, batch: ClaimBatch) -> dict[str, str]:
    errors = dict(batch.refused)
    if batch.refs:
        errors.update(core.unprepare(batch.refs))
    return errors


def _log_prepared(method: str, results: Mapping[str, PrepareResult], started: float) -> None:
    _log_call(method, len(results), started, sum(bool(r.error) for r in results.values()))


def _log_unprepared(method: str, errors: Mapping[str, str], started: float) -> None:
    _log_call(method, len(errors), started, sum(bool(e) for e in errors.values()))


def _log_call(method: str, claims: int, started: float, errors: int) -> None:
    log.info(
        method,
        extra={"fields": {"claims": claims, "failed": errors, "ms": round((time.monotonic() - started) * 1e3, 2)}},
    )


def _v1_prepared(results: Mapping[str, PrepareResult]) -> v1.NodePrepareResourcesResponse:
    response = v1.NodePrepareResourcesResponse()
    for uid, result in results.items():
        response.claims[uid].CopyFrom(_v1_result(result))
    return response


def _v1_unprepared(errors: Mapping[str, str]) -> v1.NodeUnprepareResourcesResponse:
    response = v1.NodeUnprepareResourcesResponse()
    for uid, error in errors.items():
        response.claims[uid].error = error
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


def _v1beta1_prepared(results: Mapping[str, PrepareResult]) -> v1beta1.NodePrepareResourcesResponse:
    """No share IDs on the v1beta1 wire."""
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
    return response


def _v1beta1_unprepared(errors: Mapping[str, str]) -> v1beta1.NodeUnprepareResourcesResponse:
    response = v1beta1.NodeUnprepareResourcesResponse()
    for uid, error in errors.items():
        response.claims[uid].error = error
    return response


class DraV1Servicer(v1_grpc.DRAPluginServicer):
    """For the threaded server: each call runs in the worker thread that received it."""

    def __init__(self, *, core: DriverCore) -> None:
        self._core = core

    def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1.NodePrepareResourcesResponse:
        started = time.monotonic()
        results = _prepare(self._core, _batch_or_abort(request.claims, context))
        _log_prepared("NodePrepareResources", results, started)
        return _v1_prepared(results)

    def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1.NodeUnprepareResourcesResponse:
        started = time.monotonic()
        errors = _unprepare(self._core, _batch_or_abort(request.claims, context))
        _log_unprepared("NodeUnprepareResources", errors, started)
        return _v1_unprepared(errors)


class DraV1beta1Servicer(v1beta1_grpc.DRAPluginServicer):
    """The same calls for kubelets that only speak v1beta1."""

    def __init__(self, *, core: DriverCore) -> None:
        self._core = core

    def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodePrepareResourcesResponse:
        started = time.monotonic()
        results = _prepare(self._core, _batch_or_abort(request.claims, context))
        _log_prepared("NodePrepareResources/v1beta1", results, started)
        return _v1beta1_prepared(results)

    def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        started = time.monotonic()
        errors = _unprepare(self._core, _batch_or_abort(request.claims, context))
        _log_unprepared("NodeUnprepareResources/v1beta1", errors, started)
        return _v1beta1_unprepared(errors)


async def _batch_or_abort_async(
    claims: Sequence[_WireClaim], context: aio.ServicerContext[object, object]
) -> ClaimBatch:
    batch = compute_claim_batch(claims)
    if batch.problem:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, batch.problem)
    return batch


class AsyncDraV1Servicer(v1_grpc.DRAPluginServicer):
    """For an asyncio server (a fleet's nodes, many in one process, where a threaded server each would cost a
    polling thread per node): the driver's blocking work goes to a thread."""

    def __init__(self, *, core: DriverCore) -> None:
        self._core = core

    async def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: aio.ServicerContext[object, object]
    ) -> v1.NodePrepareResourcesResponse:
        started, batch = time.monotonic(), await _batch_or_abort_async(request.claims, context)
        results = await asyncio.to_thread(_prepare, self._core, batch)
        _log_prepared("NodePrepareResources", results, started)
        return _v1_prepared(results)

    async def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: aio.ServicerContext[object, object]
    ) -> v1.NodeUnprepareResourcesResponse:
        started, batch = time.monotonic(), await _batch_or_abort_async(request.claims, context)
        errors = await asyncio.to_thread(_unprepare, self._core, batch)
        _log_unprepared("NodeUnprepareResources", errors, started)
        return _v1_unprepared(errors)


class AsyncDraV1beta1Servicer(v1beta1_grpc.DRAPluginServicer):
    def __init__(self, *, core: DriverCore) -> None:
        self._core = core

    async def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: aio.ServicerContext[object, object]
    ) -> v1beta1.NodePrepareResourcesResponse:
        started, batch = time.monotonic(), await _batch_or_abort_async(request.claims, context)
        results = await asyncio.to_thread(_prepare, self._core, batch)
        _log_prepared("NodePrepareResources/v1beta1", results, started)
        return _v1beta1_prepared(results)

    async def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: aio.ServicerContext[object, object]
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        started, batch = time.monotonic(), await _batch_or_abort_async(request.claims, context)
        errors = await asyncio.to_thread(_unprepare, self._core, batch)
        _log_unprepared("NodeUnprepareResources/v1beta1", errors, started)
        return _v1beta1_unprepared(errors)
