"""The control-socket protocol, typed: requests, replies, their JSON lines, and the client everyone talks through.

A plugin serves JSON lines on ``<plugin dir>/control.sock`` (:mod:`fakedev.plugin.control`); `fakedev fault`, the
drill environment and tests send requests through :class:`ControlClient`. Requests are frozen values; rendering
and parsing are pure, and parsing is strict: anything that is not exactly one of the requests below is refused with
a one-line :class:`~fakedev.errors.ControlRequestError` naming the field.

    {"op": "status"}
    {"op": "set-health", "device": "gpu-0", "health": "Unhealthy", "message": "...", "taint": "NoExecute"}
    {"op": "set-fault", "call": "prepare", "fault": {"delaySeconds": 1.0, "failTimes": 2, "error": "..."}}
    {"op": "clear-faults"}

Replies: :class:`StatusReply`, :class:`AckReply` (:class:`FaultAckReply` for set-fault) or :class:`ErrorReply`.
Everything is bounded: a line (64 KiB), a delay (an hour), a device name (63 characters), free text (1024).
"""

from __future__ import annotations

import enum
import json
import math
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, NotRequired, TypedDict, cast

from fakedev.errors import ControlError, ControlRefusedError, ControlRequestError, ControlUnreachableError
from fakedev.faults import CallFault
from fakedev.render.types import DeviceTaint
from kubeclient.values import TaintEffect
from kubeletapi.types import HealthState

DEFAULT_TIMEOUT: Final = 10.0
MAX_REQUEST_LINE: Final = 64 * 1024
"""Bytes in one request line, newline included; the server answers a longer line with an error and reads on."""
MAX_DELAY_SECONDS: Final = 3600.0
"""An injected delay beyond an hour is a hang, which the drills do with SIGSTOP; longer ones also overflow sleep."""
MAX_DEVICE_NAME: Final = 63
"""A device name in a ResourceSlice is a DNS label."""
MAX_TEXT: Final = 1024
"""Characters in the free text a request carries (a fault's error, a health message): the error goes into every
failed claim's gRPC answer and the kubelet's events, the message onto the health stream and into pod status."""


class Op(enum.StrEnum):
    STATUS = "status"
    SET_HEALTH = "set-health"
    SET_FAULT = "set-fault"
    CLEAR_FAULTS = "clear-faults"


class Call(enum.StrEnum):
    """The gRPC call a fault slows down or fails."""

    PREPARE = "prepare"
    UNPREPARE = "unprepare"


# -- requests ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class StatusRequest:
    """Ask for devices, registration, prepared claims and faults."""


@dataclass(frozen=True, kw_only=True)
class SetHealthRequest:
    """Report a device's health on the health stream; ``taint`` also taints it in the slice (Healthy lifts it)."""

    device: str
    health: HealthState
    message: str = ""
    taint: TaintEffect | None = None


@dataclass(frozen=True, kw_only=True)
class SetFaultRequest:
    """Slow down and/or fail the next calls of one kind (replaces that call's fault)."""

    call: Call
    fault: CallFault


@dataclass(frozen=True, kw_only=True)
class ClearFaultsRequest:
    """Remove every call fault."""


Request = StatusRequest | SetHealthRequest | SetFaultRequest | ClearFaultsRequest


class CallFaultJson(TypedDict):
    delaySeconds: float
    failTimes: int
    """How many calls still fail; -1 fails every call until cleared."""
    error: str


class StatusRequestJson(TypedDict):
    op: Literal["status"]


class SetHealthRequestJson(TypedDict):
    op: Literal["set-health"]
    device: str
    health: str
    message: str
    taint: NotRequired[str]


class SetFaultRequestJson(TypedDict):
    op: Literal["set-fault"]
    call: str
    fault: CallFaultJson


class ClearFaultsRequestJson(TypedDict):
    op: Literal["clear-faults"]


RequestJson = StatusRequestJson | SetHealthRequestJson | SetFaultRequestJson | ClearFaultsRequestJson


def op_of(request: Request) -> Op:
    match request:
        case StatusRequest():
            return Op.STATUS
        case SetHealthRequest():
            return Op.SET_HEALTH
        case SetFaultRequest():
            return Op.SET_FAULT
        case ClearFaultsRequest():
            return Op.CLEAR_FAULTS


def render_call_fault(fault: CallFault) -> CallFaultJson:
    return {"delaySeconds": fault.delay_seconds, "failTimes": fault.fail_times, "error": fault.error}


def render_request(request: Request) -> RequestJson:
    match request:
        case StatusRequest():
            return {"op": "status"}
        case SetHealthRequest():
            doc: SetHealthRequestJson = {
                "op": "set-health",
                "device": request.device,
                "health": request.health.value,
                "message": request.message,
            }
            if request.taint is not None:
                doc["taint"] = request.taint.value
            return doc
        case SetFaultRequest():
            return {"op": "set-fault", "call": request.call.value, "fault": render_call_fault(request.fault)}
        case ClearFaultsRequest():
            return {"op": "clear-faults"}


def render_request_line(request: Request) -> bytes:
    return json.dumps(render_request(request)).encode() + b"\n"


_FIELDS: Final[Mapping[Op, frozenset[str]]] = {
    Op.STATUS: frozenset({"op"}),
    Op.SET_HEALTH: frozenset({"op", "device", "health", "message", "taint"}),
    Op.SET_FAULT: frozenset({"op", "call", "fault"}),
    Op.CLEAR_FAULTS: frozenset({"op"}),
}
_FAULT_FIELDS: Final = ("delaySeconds", "failTimes", "error")


def _choices(values: type[enum.StrEnum]) -> str:
    return ", ".join(v.value for v in values)


def _shown(value: object) -> str:
    """A value quoted in an error, short enough to keep the error on one readable line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _member(values: type[enum.StrEnum], value: object) -> bool:
    return isinstance(value, str) and value in {v.value for v in values}


def _unknown(doc: Mapping[str, object], *, allowed: frozenset[str] | tuple[str, ...], where: str) -> None:
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        names = ", ".join(map(_shown, unknown))
        raise ControlRequestError(f"{where}: unknown field(s) {names} (allowed: {', '.join(sorted(allowed))})")


def _string(doc: Mapping[str, object], key: str, *, where: str, default: str | None = None) -> str:
    value = doc.get(key, default)
    if not isinstance(value, str):
        raise ControlRequestError(f"{where}: {key} must be a string")
    return value


def _text(doc: Mapping[str, object], key: str, *, where: str, default: str) -> str:
    value = _string(doc, key, where=where, default=default)
    if len(value) > MAX_TEXT:
        raise ControlRequestError(f"{where}: {key} must be at most {MAX_TEXT} characters, not {len(value)}")
    return value


def _delay(value: object) -> float:
    limits = f">= 0 and <= {MAX_DELAY_SECONDS:g}"
    rule = f"set-fault: fault: delaySeconds must be a finite number {limits}, not {_shown(value)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ControlRequestError(rule)
    try:
        seconds = float(value)
    except OverflowError:  # an integer beyond any float
        raise ControlRequestError(rule) from None
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_DELAY_SECONDS:
        raise ControlRequestError(rule)
    return seconds


def parse_call_fault(doc: object) -> CallFault:
    """A fault as set-fault carries it; absent fields keep :class:`CallFault`'s defaults."""
    if not isinstance(doc, dict):
        raise ControlRequestError("set-fault: fault must be a JSON object")
    _unknown(doc, allowed=_FAULT_FIELDS, where="set-fault: fault")
    default = CallFault()
    times = doc.get("failTimes", default.fail_times)
    if isinstance(times, bool) or not isinstance(times, int) or times < -1:
        raise ControlRequestError(f"set-fault: fault: failTimes must be a whole number >= -1, not {_shown(times)}")
    error = _text(doc, "error", where="set-fault: fault", default=default.error)
    if not error:
        # An empty error is the kubelet's "prepared, no devices": the failing call would look like a success.
        raise ControlRequestError("set-fault: fault: error must be a non-empty string")
    return CallFault(
        delay_seconds=_delay(doc.get("delaySeconds", default.delay_seconds)), fail_times=times, error=error
    )


def parse_request(doc: object) -> Request:
    """One decoded JSON request, checked field by field (raises :class:`ControlRequestError`)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("op"), str):
        raise ControlRequestError("a request is a JSON object with a string 'op'")
    try:
        op = Op(doc["op"])
    except ValueError:
        raise ControlRequestError(f"unknown op {_shown(doc['op'])} ({_choices(Op)})") from None
    _unknown(doc, allowed=_FIELDS[op], where=op.value)
    match op:
        case Op.STATUS:
            return StatusRequest()
        case Op.CLEAR_FAULTS:
            return ClearFaultsRequest()
        case Op.SET_HEALTH:
            device = _string(doc, "device", where=op.value, default="")
            if not device:
                raise ControlRequestError("set-health: device must be a non-empty string")
            if len(device) > MAX_DEVICE_NAME:
                raise ControlRequestError(
                    f"set-health: device must be a device name of at most {MAX_DEVICE_NAME} characters, "
                    f"not {_shown(device)}"
                )
            # Case-insensitive as the plugin always accepted it; replies spell it Healthy/Unhealthy/Unknown.
            health = doc.get("health")
            spelled = health.lower() if isinstance(health, str) else None
            state = next((h for h in HealthState if h.value.lower() == spelled), None)
            if state is None:
                rule = f"health must be one of {_choices(HealthState)}, not {_shown(health)}"
                raise ControlRequestError(f"set-health: {rule}")
            taint = doc.get("taint")
            if taint is not None and not _member(TaintEffect, taint):
                raise ControlRequestError(
                    f"set-health: taint effect must be one of {_choices(TaintEffect)}, not {_shown(taint)}"
                )
            return SetHealthRequest(
                device=device,
                health=state,
                message=_text(doc, "message", where=op.value, default=""),
                taint=None if taint is None else TaintEffect(str(taint)),
            )
        case Op.SET_FAULT:
            call = doc.get("call")
            if not _member(Call, call):
                raise ControlRequestError(f"set-fault: call must be one of {_choices(Call)}, not {_shown(call)}")
            fault = doc.get("fault")
            # An absent (or null) fault is the default one: a call fault that does nothing.
            return SetFaultRequest(call=Call(str(call)), fault=parse_call_fault({} if fault is None else fault))


def parse_request_line(line: bytes) -> Request:
    """One request line as the server reads it (raises :class:`ControlRequestError`, never anything else)."""
    if len(line) > MAX_REQUEST_LINE:
        raise ControlRequestError(f"the request line is {len(line)} bytes; at most {MAX_REQUEST_LINE} are read")
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError) as exc:  # ValueError covers bad UTF-8 and bad JSON alike
        raise ControlRequestError(f"not JSON: {exc}") from None
    return parse_request(doc)


# -- replies -----------------------------------------------------------------------------------------------------


class DeviceStatusJson(TypedDict):
    pool: str
    device: str
    health: str
    message: str
    taints: list[DeviceTaint]


class RegistrationJson(TypedDict):
    registered: bool
    error: str
    notifications: int


class FaultsJson(TypedDict):
    prepare: CallFaultJson
    unprepare: CallFaultJson


class StatusBody(TypedDict):
    """What a plugin says about itself (the status reply without ``ok``)."""

    driver: str
    node: str
    devices: list[DeviceStatusJson]
    registration: RegistrationJson
    claims: list[str]
    faults: FaultsJson
    sliceGeneration: int
    healthSubscribers: int
    udevEvents: int
    statusOwed: int
    """``status.devices`` writes owed to claims and not yet through (the outbox's backlog)."""


class StatusReply(StatusBody):
    ok: Literal[True]


class AckReply(TypedDict):
    ok: Literal[True]


class FaultAckReply(AckReply):
    fault: CallFaultJson
    """The fault now in force, defaults filled in."""


class ErrorReply(TypedDict):
    ok: Literal[False]
    error: str


Reply = StatusReply | AckReply | FaultAckReply | ErrorReply


def render_reply_line(reply: Reply) -> bytes:
    return json.dumps(reply).encode() + b"\n"


# -- the client --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ControlClient:
    """One plugin's control socket; every method is one connection, one request, one reply."""

    path: Path
    timeout: float = DEFAULT_TIMEOUT

    def status(self) -> StatusReply:
        return cast(StatusReply, self._send(StatusRequest()))

    def set_health(
        self, *, device: str, health: HealthState, message: str = "", taint: TaintEffect | None = None
    ) -> AckReply:
        return cast(AckReply, self._send(SetHealthRequest(device=device, health=health, message=message, taint=taint)))

    def set_fault(self, *, call: Call, fault: CallFault) -> FaultAckReply:
        return cast(FaultAckReply, self._send(SetFaultRequest(call=call, fault=fault)))

    def clear_faults(self) -> AckReply:
        return cast(AckReply, self._send(ClearFaultsRequest()))

    def _send(self, request: Request) -> dict[str, object]:
        """The ``ok: true`` answer to one request; :class:`ControlRefusedError` for ``ok: false``,
        :class:`ControlUnreachableError` when nothing answers."""
        data = self._exchange(render_request_line(request))
        try:
            answer = json.loads(data)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
            raise ControlError(f"{self.path} answered with something that is not a reply: {data[:200]!r}")
        if not answer["ok"]:
            raise ControlRefusedError(op=op_of(request).value, reason=str(answer.get("error", "")))
        return answer

    def _exchange(self, line: bytes) -> bytes:
        data = b""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(self.timeout)
                s.connect(str(self.path))
                s.sendall(line)
                while not data.endswith(b"\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except OSError as exc:  # missing socket, nobody listening, a plugin stopped by SIGSTOP (timeout)
            raise ControlUnreachableError(f"cannot reach {self.path}: {exc.strerror or exc}") from exc
        if not data.endswith(b"\n"):
            raise ControlUnreachableError(f"{self.path} hung up without an answer")
        return data
