"""Record every gRPC call the plugin serves, as a server interceptor (opt-in: ``fakedev plugin --record-calls FILE``).

One JSON line per call, in the order the calls arrive: what the kubelet asked (service, method), how many claims a
prepare/unprepare batch carried, how it ended (gRPC status code) and how long it took; a health stream gives an
``opened`` line and, when it ends, an ``ended`` line (written when the server notices the end, so possibly after
calls that came later). This sits beneath the servicers, so it sees calls the plugin's
own code would not log (a GetInfo, a stream the kubelet opens) — the differential tests compare these records between
the real kubelet and the node emulator.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypedDict

import grpc
from grpc import aio

RECORD_FILE_MODE: Final = 0o644


class CallRecord(TypedDict, total=False):
    t: float
    """Unix time the call arrived."""
    service: str
    method: str
    claims: int
    """Claims in a NodePrepareResources/NodeUnprepareResources request."""
    event: str
    """``call`` (a unary call, recorded when it ends), ``opened`` or ``ended`` (a stream)."""
    code: str
    ms: float


@dataclass(kw_only=True)
class CallLog:
    """The JSON-lines file the records go to (appended; one write per record, so lines never interleave)."""

    path: Path
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def write(self, record: CallRecord) -> None:
        line = json.dumps(record, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            # A new file gets 0644 whatever the umask; one that already has records keeps the mode it has.
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, RECORD_FILE_MODE)
            try:
                if os.fstat(fd).st_size == 0:
                    os.fchmod(fd, RECORD_FILE_MODE)
                os.write(fd, line)
            finally:
                os.close(fd)


def read_calls(path: Path) -> list[CallRecord]:
    """The records in ``path`` (none when the file does not exist yet); a torn last line is skipped."""
    if not path.exists():
        return []
    records: list[CallRecord] = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def _split(full_method: str) -> tuple[str, str]:
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service, method


def _claims(request: Any) -> int | None:
    claims = getattr(request, "claims", None)
    return None if claims is None else len(claims)


def _code(context: aio.ServicerContext[Any, Any], *, failed: bool) -> str:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    return "UNKNOWN" if failed else "OK"


class CallRecorder(aio.ServerInterceptor):
    """Wraps each unary and server-streaming handler so that its call is written to a :class:`CallLog`."""

    def __init__(self, *, log: CallLog) -> None:
        self._log = log

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        service, method = _split(handler_call_details.method)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, service=service, method=method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(handler.unary_stream, service=service, method=method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # no client-streaming calls in the kubelet's APIs

    def _unary(self, behavior: Any, *, service: str, method: str) -> Any:
        async def recorded(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
            record: CallRecord = {"t": time.time(), "service": service, "method": method, "event": "call"}
            if (claims := _claims(request)) is not None:
                record["claims"] = claims
            started = time.monotonic()
            failed = True
            try:
                response = await behavior(request, context)
                failed = False
                return response
            finally:
                record["code"] = _code(context, failed=failed)
                record["ms"] = round((time.monotonic() - started) * 1e3, 3)
                self._log.write(record)

        return recorded

    def _stream(self, behavior: Any, *, service: str, method: str) -> Any:
        async def recorded(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            started = time.monotonic()
            self._log.write({"t": time.time(), "service": service, "method": method, "event": "opened"})
            code = None
            try:
                async for item in behavior(request, context):
                    yield item
            except asyncio.CancelledError:
                code = "CANCELLED"  # the kubelet went away or closed the stream
                raise
            except BaseException:
                code = _code(context, failed=True)
                raise
            finally:
                self._log.write(
                    {
                        "t": time.time(),
                        "service": service,
                        "method": method,
                        "event": "ended",
                        "code": code or _code(context, failed=False),
                        "ms": round((time.monotonic() - started) * 1e3, 3),
                    }
                )

        return recorded
