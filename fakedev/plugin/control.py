"""The plugin's control socket: fault injection and status over ``<plugin dir>/control.sock`` (0600).

The requests and replies are those of :mod:`fakedev.plugin.protocol` (one JSON line each way); this module serves
them. Every line gets exactly one reply line: a malformed, over-long or refused request gets
``{"ok": false, "error": "..."}``, and none of them stops the plugin or drops the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Protocol

from fakedev.errors import FakedevError
from fakedev.faults import Faults
from fakedev.plugin.protocol import (
    MAX_REQUEST_LINE,
    AckReply,
    Call,
    ClearFaultsRequest,
    ErrorReply,
    FaultAckReply,
    Reply,
    Request,
    SetFaultRequest,
    SetHealthRequest,
    StatusBody,
    StatusReply,
    StatusRequest,
    op_of,
    parse_request_line,
    render_call_fault,
    render_reply_line,
)
from fakedev.render.types import DeviceTaint
from kubeclient.timestamps import render_time
from kubeclient.values import TaintEffect
from kubeletapi.types import Health

log = logging.getLogger("fakedev.plugin.control")

TAINT_KEY: Final = "fakedev.io/unhealthy"
_CHUNK: Final = 64 * 1024
_NOT_A_REQUEST: Final = "malformed"
_FAIR_SHARE: Final = 64
"""Lines answered before the server lets the event loop run other work (gRPC calls)."""


class SetHealth(Protocol):
    """Change a device's health (and its slice taint); raises :class:`FakedevError` for a device not published."""

    def __call__(self, *, device: str, health: Health, message: str = "", taint: DeviceTaint | None = None) -> None: ...


@dataclass(frozen=True, kw_only=True)
class ControlTarget:
    """What the control socket may touch; the app provides these."""

    status: Callable[[], StatusBody]
    set_health: SetHealth
    faults: Faults


def render_taint(effect: TaintEffect, message: str) -> DeviceTaint:
    stamp = render_time()
    # A taint value is a label value; the free-text message stays on the health stream.
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", message)[:63].strip("-_.") or "unhealthy"
    return {"key": TAINT_KEY, "value": value, "effect": effect.value, "timeAdded": stamp}


def handle(request: Request, target: ControlTarget) -> StatusReply | AckReply | FaultAckReply:
    """Do one request (raises :class:`FakedevError` when the target refuses it)."""
    match request:
        case StatusRequest():
            return {"ok": True, **target.status()}
        case SetHealthRequest():
            target.set_health(
                device=request.device,
                health=request.health.health,
                message=request.message,
                taint=None if request.taint is None else render_taint(request.taint, request.message),
            )
            return {"ok": True}
        case SetFaultRequest():
            # A copy: the installed fault counts its failures down, the request stays what was asked.
            fault = replace(request.fault)
            if request.call is Call.PREPARE:
                target.faults.prepare = fault
            else:
                target.faults.unprepare = fault
            return {"ok": True, "fault": render_call_fault(fault)}
        case ClearFaultsRequest():
            target.faults.clear()
            return {"ok": True}


@dataclass(frozen=True, kw_only=True)
class Answered:
    """One request line's reply, and what the log says about it (never the raw line: it is untrusted input)."""

    reply: Reply
    op: str
    """The request's op once parsed; ``malformed`` for a line that is not a request (or too long to be one)."""


def _log(answered: Answered) -> None:
    fields: dict[str, object] = {"op": answered.op, "ok": answered.reply["ok"]}
    if not answered.reply["ok"]:
        fields["error"] = answered.reply["error"]
    log.info("control", extra={"fields": fields})


def answer_line(line: bytes, target: ControlTarget) -> Answered:
    """The reply to one request line; every mistake in it, or refusal of it, is an error reply."""
    op = _NOT_A_REQUEST
    try:
        request = parse_request_line(line)
        op = op_of(request).value
        return Answered(reply=handle(request, target), op=op)
    except FakedevError as exc:  # ControlRequestError included
        error: ErrorReply = {"ok": False, "error": str(exc)}
        return Answered(reply=error, op=op)


def answer(line: bytes, target: ControlTarget) -> Reply:
    """The reply to one request line (see :func:`answer_line`)."""
    return answer_line(line, target).reply


def overlong_reply(size: int) -> ErrorReply:
    return {"ok": False, "error": f"the request line is longer than {MAX_REQUEST_LINE} bytes ({size} read); dropped"}


async def read_lines(reader: asyncio.StreamReader, *, limit: int = MAX_REQUEST_LINE) -> AsyncIterator[bytes | int]:
    """Each line the peer sends (a last one without newline included), or for a line longer than ``limit`` its size
    in bytes: such a line is dropped as it arrives, so it costs no more memory than ``limit``."""
    pending = bytearray()
    dropped = 0  # bytes of an over-long line already thrown away
    while chunk := await reader.read(_CHUNK):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start : end + 1]
            if dropped or len(pending) + len(piece) > limit:
                yield dropped + len(pending) + len(piece)
            else:
                yield bytes(pending + piece)
            pending.clear()
            dropped = 0
            start = end + 1
        rest = chunk[start:]
        if dropped or len(pending) + len(rest) > limit:
            dropped += len(pending) + len(rest)
            pending.clear()
        else:
            pending += rest
    if dropped:
        yield dropped
    elif pending:
        yield bytes(pending)


@dataclass(kw_only=True)
class ControlServer:
    path: Path
    target: ControlTarget
    _server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        self.path.chmod(0o600)

    def _answer(self, line: bytes | int) -> Answered:
        if isinstance(line, int):
            return Answered(reply=overlong_reply(line), op=_NOT_A_REQUEST)
        try:
            return answer_line(line, self.target)
        except Exception as exc:  # a bug of ours: the peer still gets its one line, the log the traceback
            log.exception("control request failed", extra={"fields": {"bytes": len(line)}})
            internal: ErrorReply = {"ok": False, "error": f"internal error: {type(exc).__name__}"}
            return Answered(reply=internal, op="failed")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Lines that are no request at all are logged once per connection and then only counted: whoever sends a
        # megabyte of garbage gets a megabyte of error replies, but the plugin's log gets two lines.
        garbage = answered = 0
        try:
            async for line in read_lines(reader):
                reply = self._answer(line)
                if reply.op != _NOT_A_REQUEST or not garbage:
                    _log(reply)
                garbage += reply.op == _NOT_A_REQUEST
                writer.write(render_reply_line(reply.reply))
                await writer.drain()
                answered += 1
                if answered % _FAIR_SHARE == 0:
                    await asyncio.sleep(0)  # a chunk holds thousands of lines; the kubelet's calls share this loop
        except ConnectionError:
            pass  # the peer left; nobody is waiting for an answer
        finally:
            if garbage > 1:
                log.info("control: more lines that were not requests", extra={"fields": {"lines": garbage - 1}})
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self.path.unlink(missing_ok=True)
