"""Refuse a request whose bytes do not decode with INVALID_ARGUMENT: a server interceptor on every plugin server.

Left to itself, gRPC answers a body protobuf cannot parse (corrupt wire format, a string that is not UTF-8) with
UNKNOWN and the parser's words, which reads as "the plugin failed" rather than "your request is broken". The guard
wraps each method's deserializer so that such a body becomes an :class:`Undecodable` value, and the method's
handler so that an undecodable request is refused before any servicer sees it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import grpc
from google.protobuf.message import DecodeError
from grpc import aio

MAX_REASON: Final = 200
"""Characters of the parser's complaint passed on: status details travel in a header of at most 16 KiB."""


@dataclass(frozen=True, kw_only=True)
class Undecodable:
    """Stands in for a request body that did not parse."""

    method: str
    reason: str

    @property
    def details(self) -> str:
        return f"{self.method}: the request body is not a valid protobuf message: {self.reason[:MAX_REASON]}"


def _decoder(deserialize: Callable[[bytes], Any], *, method: str) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError as exc:
            return Undecodable(method=method, reason=str(exc))

    return decode


def _unary(behavior: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
    async def serve(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.details)
        return await behavior(request, context)

    return serve


def _stream(behavior: Any) -> Callable[[Any, Any], AsyncIterator[Any]]:
    """``behavior`` is an async generator function (grpc's types say Iterator, as for its synchronous server)."""

    async def serve(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.details)
        async for item in behavior(request, context):
            yield item

    return serve


def _unary_threaded(behavior: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def serve(request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.details)
        return behavior(request, context)

    return serve


def _stream_threaded(behavior: Callable[[Any, Any], Iterator[Any]]) -> Callable[[Any, Any], Iterator[Any]]:
    def serve(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        if isinstance(request, Undecodable):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.details)
        yield from behavior(request, context)

    return serve


Wrap = Callable[[Any], Any]


@dataclass(kw_only=True)
class _Guarded:
    """A method's guarded handler is made once and kept (every call used to build it again: CPU on the hot path)."""

    unary: Wrap
    stream: Wrap
    _kept: dict[str, tuple[grpc.RpcMethodHandler[Any, Any], grpc.RpcMethodHandler[Any, Any]]] = field(
        default_factory=dict
    )

    def guard(
        self, handler: grpc.RpcMethodHandler[Any, Any] | None, *, method: str
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        if handler is None or handler.request_deserializer is None:
            return handler
        kept = self._kept.get(method)
        if kept is not None and kept[0] is handler:
            return kept[1]
        decode = _decoder(handler.request_deserializer, method=method)
        guarded = handler
        if handler.unary_unary is not None:
            guarded = grpc.unary_unary_rpc_method_handler(
                self.unary(handler.unary_unary),
                request_deserializer=decode,
                response_serializer=handler.response_serializer,
            )
        elif handler.unary_stream is not None:
            guarded = grpc.unary_stream_rpc_method_handler(
                self.stream(handler.unary_stream),
                request_deserializer=decode,
                response_serializer=handler.response_serializer,
            )
        # (the kubelet's APIs have no client-streaming calls)
        self._kept[method] = (handler, guarded)
        return guarded


class RequestGuard(aio.ServerInterceptor):
    """For an asyncio server. Put innermost (last) in a server's interceptors, so that the ones before it see the
    refusal as a call."""

    def __init__(self) -> None:
        self._guarded = _Guarded(unary=_unary, stream=_stream)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        return self._guarded.guard(handler, method=handler_call_details.method)


class ThreadedRequestGuard(grpc.ServerInterceptor):
    """The same for a threaded server (the DRA socket's), innermost as well."""

    def __init__(self) -> None:
        self._guarded = _Guarded(unary=_unary_threaded, stream=_stream_threaded)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        return self._guarded.guard(continuation(handler_call_details), method=handler_call_details.method)
