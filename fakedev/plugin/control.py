"""The plugin's control socket: fault injection and status over ``<plugin dir>/control.sock`` (0600).

The requests and replies are those of :mod:`fakedev.plugin.protocol` (one JSON line each way); this module serves
them. A malformed or refused request gets ``{"ok": false, "error": "..."}`` and never stops the plugin.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Protocol

from fakedev.errors import FakedevError
from fakedev.faults import Faults
from fakedev.plugin.protocol import (
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
MAX_REQUEST: Final = 64 * 1024


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


def answer(line: bytes, target: ControlTarget) -> Reply:
    """The reply to one request line; every mistake in it, or refusal of it, is an error reply."""
    try:
        return handle(parse_request_line(line), target)
    except FakedevError as exc:  # ControlRequestError included
        error: ErrorReply = {"ok": False, "error": str(exc)}
        return error


@dataclass(kw_only=True)
class ControlServer:
    path: Path
    target: ControlTarget
    _server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=MAX_REQUEST)
        self.path.chmod(0o600)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                reply = answer(line, self.target)
                log.info(
                    "control",
                    extra={"fields": {"request": line.decode(errors="replace").strip()[:200], "ok": reply["ok"]}},
                )
                writer.write(render_reply_line(reply))
                await writer.drain()
        except (ConnectionError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self.path.unlink(missing_ok=True)
