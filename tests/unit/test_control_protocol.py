"""The control-socket protocol: requests render to the wire format clients always sent, parse back to the same value,
and every malformed request is refused with one line naming the field."""

from __future__ import annotations

import json

import pytest

from fakedev.errors import ControlRequestError
from fakedev.faults import CallFault
from fakedev.plugin.protocol import (
    Call,
    ClearFaultsRequest,
    Request,
    SetFaultRequest,
    SetHealthRequest,
    StatusRequest,
    parse_request,
    parse_request_line,
    render_request,
    render_request_line,
)
from kubeclient.values import TaintEffect
from kubeletapi.types import Health, HealthState

ROUND_TRIPS: list[tuple[Request, object]] = [
    (StatusRequest(), {"op": "status"}),
    (ClearFaultsRequest(), {"op": "clear-faults"}),
    (
        SetHealthRequest(device="gpu-3", health=HealthState.UNHEALTHY),
        {"op": "set-health", "device": "gpu-3", "health": "Unhealthy", "message": ""},
    ),
    (
        SetHealthRequest(device="gpu-3", health=HealthState.UNHEALTHY, message="XID 79", taint=TaintEffect.NO_EXECUTE),
        {"op": "set-health", "device": "gpu-3", "health": "Unhealthy", "message": "XID 79", "taint": "NoExecute"},
    ),
    (
        SetHealthRequest(device="nic-0", health=HealthState.UNKNOWN, taint=TaintEffect.NONE),
        {"op": "set-health", "device": "nic-0", "health": "Unknown", "message": "", "taint": "None"},
    ),
    (
        SetFaultRequest(call=Call.PREPARE, fault=CallFault(delay_seconds=1.5, fail_times=2, error="off the bus")),
        {
            "op": "set-fault",
            "call": "prepare",
            "fault": {"delaySeconds": 1.5, "failTimes": 2, "error": "off the bus"},
        },
    ),
    (
        SetFaultRequest(call=Call.UNPREPARE, fault=CallFault(fail_times=-1)),
        {
            "op": "set-fault",
            "call": "unprepare",
            "fault": {"delaySeconds": 0.0, "failTimes": -1, "error": "injected fault"},
        },
    ),
]


@pytest.mark.parametrize(
    ("request_", "wire"),
    ROUND_TRIPS,
    ids=["status", "clear", "health", "health-tainted", "health-unknown", "prepare-fault", "unprepare-forever"],
)
def test_requests_render_to_the_wire_format_and_parse_back(request_: Request, wire: object) -> None:
    assert render_request(request_) == wire
    line = render_request_line(request_)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert parse_request_line(line) == request_


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (
            {"op": "set-health", "device": "gpu-0", "health": "unhealthy"},
            SetHealthRequest(device="gpu-0", health=HealthState.UNHEALTHY),
        ),
        (
            {"op": "set-health", "device": "gpu-0", "health": "Healthy", "taint": None},
            SetHealthRequest(device="gpu-0", health=HealthState.HEALTHY),
        ),
        (
            {"op": "set-fault", "call": "prepare", "fault": {"failTimes": 2}},
            SetFaultRequest(call=Call.PREPARE, fault=CallFault(fail_times=2)),
        ),
        ({"op": "set-fault", "call": "prepare"}, SetFaultRequest(call=Call.PREPARE, fault=CallFault())),
        ({"op": "set-fault", "call": "prepare", "fault": None}, SetFaultRequest(call=Call.PREPARE, fault=CallFault())),
        (
            {"op": "set-fault", "call": "prepare", "fault": {"delaySeconds": 2}},
            SetFaultRequest(call=Call.PREPARE, fault=CallFault(delay_seconds=2.0)),
        ),
    ],
    ids=["health-any-case", "null-taint", "partial-fault", "no-fault", "null-fault", "integer-delay"],
)
def test_requests_older_clients_sent_still_parse(doc: object, expected: Request) -> None:
    assert parse_request(doc) == expected


MALFORMED: list[tuple[bytes, str]] = [
    (b"{nope\n", "not JSON: "),
    (b"\xff\xfe\n", "not JSON: "),
    (b"[" * 65_000 + b"\n", "not JSON: "),
    (b'"status"\n', "a request is a JSON object with a string 'op'"),
    (b'{"device": "gpu-0"}\n', "a request is a JSON object with a string 'op'"),
    (b'{"op": 7}\n', "a request is a JSON object with a string 'op'"),
    (b'{"op": "dance"}\n', "unknown op 'dance' (status, set-health, set-fault, clear-faults)"),
    (b'{"op": "status", "verbose": true}\n', "status: unknown field(s) 'verbose' (allowed: op)"),
    (b'{"op": "clear-faults", "call": "prepare"}\n', "clear-faults: unknown field(s) 'call' (allowed: op)"),
    (b'{"op": "set-health", "health": "Unhealthy"}\n', "set-health: device must be a non-empty string"),
    (b'{"op": "set-health", "device": 3, "health": "Unhealthy"}\n', "set-health: device must be a string"),
    (b'{"op": "set-health", "device": "gpu-0"}\n', "set-health: health must be one of Healthy, Unhealthy, Unknown"),
    (b'{"op": "set-health", "device": "gpu-0", "health": "Sick"}\n', "not 'Sick'"),
    (b'{"op": "set-health", "device": "gpu-0", "health": 2}\n', "set-health: health must be one of"),
    (
        b'{"op": "set-health", "device": "gpu-0", "health": "Unhealthy", "message": ["x"]}\n',
        "set-health: message must be a string",
    ),
    (
        b'{"op": "set-health", "device": "gpu-0", "health": "Unhealthy", "taint": "NoWay"}\n',
        "set-health: taint effect must be one of NoSchedule, NoExecute, None, not 'NoWay'",
    ),
    (
        b'{"op": "set-health", "device": "gpu-0", "health": "Unhealthy", "taint": ["NoExecute"]}\n',
        "set-health: taint effect must be one of",
    ),
    (
        b'{"op": "set-health", "device": "gpu-0", "health": "Unhealthy", "effect": "NoExecute"}\n',
        "set-health: unknown field(s) 'effect' (allowed: device, health, message, op, taint)",
    ),
    (b'{"op": "set-fault"}\n', "set-fault: call must be one of prepare, unprepare, not None"),
    (b'{"op": "set-fault", "call": "attach"}\n', "set-fault: call must be one of prepare, unprepare, not 'attach'"),
    (b'{"op": "set-fault", "call": {"a": 1}}\n', "set-fault: call must be one of"),
    (b'{"op": "set-fault", "call": "prepare", "fault": 3}\n', "set-fault: fault must be a JSON object"),
    (
        b'{"op": "set-fault", "call": "prepare", "fault": {"bogus": 1}}\n',
        "set-fault: fault: unknown field(s) 'bogus' (allowed: delaySeconds, error, failTimes)",
    ),
    (
        b'{"op": "set-fault", "call": "prepare", "fault": {"delaySeconds": -1}}\n',
        "set-fault: fault: delaySeconds must be a finite number >= 0 and <= 3600, not -1",
    ),
    (b'{"op": "set-fault", "call": "prepare", "fault": {"delaySeconds": NaN}}\n', "not nan"),
    (b'{"op": "set-fault", "call": "prepare", "fault": {"delaySeconds": Infinity}}\n', "not inf"),
    (b'{"op": "set-fault", "call": "prepare", "fault": {"delaySeconds": "1"}}\n', "delaySeconds must be a finite"),
    (b'{"op": "set-fault", "call": "prepare", "fault": {"delaySeconds": true}}\n', "delaySeconds must be a finite"),
    (
        b'{"op": "set-fault", "call": "prepare", "fault": {"delaySeconds": 1' + b"0" * 400 + b"}}\n",
        "delaySeconds must be a finite",
    ),
    (
        b'{"op": "set-fault", "call": "prepare", "fault": {"failTimes": -2}}\n',
        "set-fault: fault: failTimes must be a whole number >= -1, not -2",
    ),
    (b'{"op": "set-fault", "call": "prepare", "fault": {"failTimes": 1.5}}\n', "failTimes must be a whole number"),
    (b'{"op": "set-fault", "call": "prepare", "fault": {"failTimes": false}}\n', "failTimes must be a whole number"),
    (b'{"op": "set-fault", "call": "prepare", "fault": {"error": 42}}\n', "set-fault: fault: error must be a string"),
    # Finite but beyond any sleep: every later prepare failed as a whole with OverflowError.
    (b'{"op": "set-fault", "call": "prepare", "fault": {"delaySeconds": 1e300}}\n', "<= 3600, not 1e+300"),
    (b'{"op": "set-fault", "call": "prepare", "fault": {"delaySeconds": 3600.5}}\n', "<= 3600, not 3600.5"),
    (b'{"op": "set-fault", "call": "prepare", "fault": {"failTimes": 1e400}}\n', "failTimes must be a whole number"),
    (
        b'{"op": "set-fault", "call": "prepare", "fault": {"error": "' + b"e" * 1025 + b'"}}\n',
        "set-fault: fault: error must be at most 1024 characters, not 1025",
    ),
    (
        b'{"op": "set-fault", "call": "prepare", "fault": {"error": ""}}\n',
        "set-fault: fault: error must be a non-empty string",
    ),
    (
        b'{"op": "set-health", "device": "gpu-0", "health": "Unhealthy", "message": "' + b"m" * 1025 + b'"}\n',
        "set-health: message must be at most 1024 characters, not 1025",
    ),
    (
        b'{"op": "set-health", "device": "' + b"d" * 64 + b'", "health": "Unhealthy"}\n',
        "set-health: device must be a device name of at most 63 characters",
    ),
    (b'{"op": "status"}' + b" " * (64 * 1024) + b"\n", "the request line is 65553 bytes; at most 65536 are read"),
]


@pytest.mark.parametrize(
    ("line", "error"),
    MALFORMED,
    ids=[
        "bad-json",
        "bad-utf8",
        "too-deep",
        "not-object",
        "no-op",
        "op-not-string",
        "unknown-op",
        "status-extra-field",
        "clear-extra-field",
        "health-no-device",
        "health-device-number",
        "health-missing",
        "health-unknown",
        "health-number",
        "message-not-string",
        "taint-unknown",
        "taint-list",
        "health-unknown-field",
        "fault-no-call",
        "fault-unknown-call",
        "fault-call-object",
        "fault-not-object",
        "fault-unknown-field",
        "delay-negative",
        "delay-nan",
        "delay-infinite",
        "delay-string",
        "delay-bool",
        "delay-huge",
        "fail-below-minus-one",
        "fail-fraction",
        "fail-bool",
        "error-not-string",
        "delay-beyond-sleep",
        "delay-over-an-hour",
        "fail-times-infinite",
        "error-too-long",
        "error-empty",
        "message-too-long",
        "device-too-long",
        "line-too-long",
    ],
)
def test_malformed_requests_are_refused_in_one_line(line: bytes, error: str) -> None:
    with pytest.raises(ControlRequestError) as caught:
        parse_request_line(line)
    message = str(caught.value)
    assert error in message
    assert "\n" not in message and len(message) < 300


def test_a_long_bad_value_is_shortened_in_the_error() -> None:
    line = json.dumps({"op": "set-health", "device": "gpu-0", "health": "x" * 10_000}).encode()
    with pytest.raises(ControlRequestError, match=r"not 'x+\.\.\.$"):
        parse_request_line(line)


@pytest.mark.parametrize("state", list(HealthState), ids=[s.value for s in HealthState])
def test_health_states_map_onto_the_health_stream(state: HealthState) -> None:
    assert HealthState.of(state.health) is state
    assert state.health in set(Health)
