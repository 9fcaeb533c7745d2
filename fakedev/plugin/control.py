"""The plugin's control socket: JSON lines over ``<plugin dir>/control.sock`` (0600) for fault injection and status.

Requests (one JSON object per line, one answer line each):

    {"op": "status"}
    {"op": "set-health", "device": "gpu-0", "health": "Unhealthy", "message": "...", "taint": "NoExecute"}
    {"op": "set-fault", "call": "prepare" | "unprepare", "fault": {"delaySeconds": 1, "failTimes": 2, "error": "..."}}
    {"op": "clear-faults"}

Answers are ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``; a malformed request never stops the plugin.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from fakedev.errors import FakedevError
from fakedev.faults import CallFault, Faults
from fakedev.render.types import DeviceTaint
from kubeclient.timestamps import render_time
from kubeletapi.types import Health

log = logging.getLogger("fakedev.plugin.control")

TAINT_KEY: Final = "fakedev.io/unhealthy"
EFFECTS: Final = ("NoSchedule", "NoExecute", "None")
MAX_REQUEST: Final = 64 * 1024


@dataclass(kw_only=True)
class ControlTarget:
    """What the control socket may touch; the app provides these callbacks."""

    status: Callable[[], dict[str, Any]]
    set_health: Callable[..., None]
    faults: Faults


def render_taint(effect: str, message: str) -> DeviceTaint:
    if effect not in EFFECTS:
        raise FakedevError(f"taint effect must be one of {', '.join(EFFECTS)}, not {effect!r}")
    stamp = render_time()
    # A taint value is a label value; the free-text message stays on the health stream.
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", message)[:63].strip("-_.") or "unhealthy"
    return {"key": TAINT_KEY, "value": value, "effect": effect, "timeAdded": stamp}


def handle(request: Any, target: ControlTarget) -> dict[str, Any]:
    """Answer one request (pure dispatch; errors become ``ok: false``)."""
    if not isinstance(request, dict) or not isinstance(request.get("op"), str):
        return {"ok": False, "error": "a request is a JSON object with a string 'op'"}
    op = request["op"]
    try:
        if op == "status":
            return {"ok": True, **target.status()}
        if op == "set-health":
            health = Health[str(request.get("health", "")).upper()]
            taint = request.get("taint")
            message = str(request.get("message", ""))
            target.set_health(
                device=str(request.get("device", "")),
                health=health,
                message=message,
                taint=render_taint(str(taint), message) if taint else None,
            )
            return {"ok": True}
        if op == "set-fault":
            call = request.get("call")
            if call not in ("prepare", "unprepare"):
                return {"ok": False, "error": "call must be 'prepare' or 'unprepare'"}
            fault = CallFault.from_json(dict(request.get("fault") or {}))
            setattr(target.faults, call, fault)
            return {"ok": True, "fault": fault.to_json()}
        if op == "clear-faults":
            target.faults.clear()
            return {"ok": True}
    except KeyError:
        return {"ok": False, "error": f"health must be one of {', '.join(h.name.title() for h in Health)}"}
    except (FakedevError, ValueError, TypeError) as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": False, "error": f"unknown op {op!r} (status, set-health, set-fault, clear-faults)"}


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
                try:
                    answer = handle(json.loads(line), self.target)
                except ValueError as exc:
                    answer = {"ok": False, "error": f"not JSON: {exc}"}
                log.info(
                    "control",
                    extra={"fields": {"request": line.decode(errors="replace").strip()[:200], "ok": answer.get("ok")}},
                )
                writer.write(json.dumps(answer).encode() + b"\n")
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


def call_control(path: Path, request: Mapping[str, Any], *, timeout: float = 10.0) -> dict[str, Any]:
    """One JSON-lines request to a plugin's control socket, and its answer (OSError when it cannot be reached)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    answer: dict[str, Any] = json.loads(data)
    return answer
