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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
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


def _code(context: aio.ServicerContext[Any, Any] | grpc.ServicerContext, *, failed: bool) -> str:
    code = context.code()  # type: ignore[union-attr]  # the threaded server's context has it too (grpc 1.38+)
    if isinstance(code, grpc.StatusCode):
        return code.name
    return "UNKNOWN" if failed else "OK"


def _wrapped(handler: grpc.RpcMethodHandler[Any, Any] | None, *, recorder: _Recording, full_method: str) -> Any:
    if handler is None:
        return handler
    service, method = _split(full_method)
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            recorder.unary(handler.unary_unary, service=service, method=method),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            recorder.stream(handler.unary_stream, service=service, method=method),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return handler  # no client-streaming calls in the kubelet's APIs


class _Recording:
    """The records of one server's calls; :meth:`unary` and :meth:`stream` wrap a method's behaviour."""

    def __init__(self, *, log: CallLog) -> None:
        self._log = log

    def opened(self, request: Any, *, service: str, method: str, event: str) -> CallRecord:
        record: CallRecord = {"t": time.time(), "service": service, "method": method, "event": event}
        if event == "call" and (claims := _claims(request)) is not None:
            record["claims"] = claims
        if event == "opened":
            self._log.write(record)
        return record

    def ended(self, record: CallRecord, *, started: float, code: str) -> None:
        if record["event"] == "opened":
            record = {"t": time.time(), "service": record["service"], "method": record["method"], "event": "ended"}
        record["code"] = code
        record["ms"] = round((time.monotonic() - started) * 1e3, 3)
        self._log.write(record)

    def unary(self, behavior: Any, *, service: str, method: str) -> Any:
        raise NotImplementedError

    def stream(self, behavior: Any, *, service: str, method: str) -> Any:
        raise NotImplementedError


class _AsyncRecording(_Recording):
    def unary(self, behavior: Any, *, service: str, method: str) -> Any:
        async def recorded(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
            record = self.opened(request, service=service, method=method, event="call")
            started, failed = time.monotonic(), True
            try:
                response = await behavior(request, context)
                failed = False
                return response
            finally:
                self.ended(record, started=started, code=_code(context, failed=failed))

        return recorded

    def stream(self, behavior: Any, *, service: str, method: str) -> Any:
        async def recorded(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            record = self.opened(request, service=service, method=method, event="opened")
            started, code = time.monotonic(), None
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
                self.ended(record, started=started, code=code or _code(context, failed=False))

        return recorded


class _ThreadedRecording(_Recording):
    def unary(self, behavior: Any, *, service: str, method: str) -> Any:
        def recorded(request: Any, context: grpc.ServicerContext) -> Any:
            record = self.opened(request, service=service, method=method, event="call")
            started, failed = time.monotonic(), True
            try:
                response = behavior(request, context)
                failed = False
                return response
            finally:
                self.ended(record, started=started, code=_code(context, failed=failed))

        return recorded

    def stream(self, behavior: Any, *, service: str, method: str) -> Any:
        def recorded(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            record = self.opened(request, service=service, method=method, event="opened")
            started, code = time.monotonic(), None
            try:
                yield from behavior(request, context)
                if not context.is_active():
                    code = "CANCELLED"  # the kubelet went away or closed the stream
            except GeneratorExit:
                code = "CANCELLED"  # the server dropped the stream: the kubelet went away, or we stop
                raise
            except BaseException:
                code = _code(context, failed=True)
                raise
            finally:
                self.ended(record, started=started, code=code or _code(context, failed=False))

        return recorded


class CallRecorder(aio.ServerInterceptor):
    """For an asyncio server: wraps each unary and server-streaming handler so that its call is written to a
    :class:`CallLog`."""

    def __init__(self, *, log: CallLog) -> None:
        self._recording = _AsyncRecording(log=log)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        return _wrapped(handler, recorder=self._recording, full_method=handler_call_details.method)  # type: ignore[no-any-return]


class ThreadedCallRecorder(grpc.ServerInterceptor):
    """The same for a threaded server (the DRA socket's)."""

    def __init__(self, *, log: CallLog) -> None:
        self._recording = _ThreadedRecording(log=log)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        return _wrapped(handler, recorder=self._recording, full_method=handler_call_details.method)  # type: ignore[no-any-return]
