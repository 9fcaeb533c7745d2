"""Fuzz the control socket: the protocol's parser takes any bytes (a request that renders back to the same line, or
one short error), and a live plugin answers every line a client sends with exactly one reply line."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any, Final

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fakedev.errors import ControlRequestError
from fakedev.plugin.protocol import (
    MAX_REQUEST_LINE,
    Call,
    Op,
    parse_request_line,
    render_request_line,
)
from kubeclient.values import TaintEffect
from kubeletapi.types import HealthState
from tests.fuzz.fuzzing import (
    MARKS,
    PURE_SECONDS,
    TEXT,
    Figures,
    big_text,
    fuzz_settings,
    json_values,
    mutated,
    repeated,
)
from tests.fuzz.plugin_process import FuzzedPlugin

pytestmark = MARKS

LIVE_SECONDS: Final = 60.0
"""One conversation: a megabyte of newlines is a million requests, answered at about 15 µs each here."""
ANY: Final = json_values()


def _or_any(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, strategy, ANY)


NUMBERS: Final = st.one_of(
    st.floats(), st.integers(min_value=-(2**80), max_value=2**80), st.sampled_from([0, -1, 3600, 3600.0001, 1e300])
)
FAULT: Final = _or_any(
    st.fixed_dictionaries(
        {},
        optional={
            "delaySeconds": _or_any(NUMBERS),
            "failTimes": _or_any(NUMBERS),
            "error": _or_any(st.one_of(st.text(TEXT, max_size=40), big_text(limit=2000))),
        },
    )
)
REQUESTS: Final = st.fixed_dictionaries(
    {"op": _or_any(st.sampled_from([o.value for o in Op]))},
    optional={
        "device": _or_any(st.one_of(st.sampled_from(["gpu-0", "gpu-7", "gpu-99"]), st.text(TEXT, max_size=70))),
        "health": _or_any(st.sampled_from([h.value for h in HealthState] + ["unhealthy", "HEALTHY"])),
        "message": _or_any(st.one_of(st.text(TEXT, max_size=40), big_text(limit=2000))),
        "taint": _or_any(st.sampled_from([e.value for e in TaintEffect])),
        "call": _or_any(st.sampled_from([c.value for c in Call])),
        "fault": FAULT,
        "extra": ANY,
    },
)
VALID_LINES: Final = [
    b'{"op": "status"}',
    b'{"op": "clear-faults"}',
    b'{"op": "set-health", "device": "gpu-3", "health": "Unhealthy", "message": "XID 79", "taint": "NoExecute"}',
    b'{"op": "set-fault", "call": "prepare", "fault": {"delaySeconds": 0.5, "failTimes": 2, "error": "stuck"}}',
]
LINES: Final = st.one_of(
    REQUESTS.map(lambda doc: json.dumps(doc).encode()),  # NaN and Infinity come out as JSON allows them to
    st.sampled_from(VALID_LINES).flatmap(mutated),
    st.binary(max_size=200),
    ANY.map(lambda doc: json.dumps(doc).encode()),
    repeated(st.sampled_from([b"[", b'{"op":', b" ", b"\\u0000", b"\xff"]), limit=MAX_REQUEST_LINE + 100),
)


def _check_refusal(exc: ControlRequestError) -> None:
    message = str(exc)
    assert message and "\n" not in message and len(message) < 300, message


@fuzz_settings(examples=300, deadline_seconds=2 * PURE_SECONDS)
@given(line=LINES)
def test_any_line_parses_to_a_request_that_renders_back_or_is_refused_in_one_line(
    figures: Figures, line: bytes
) -> None:
    with figures.example(max_seconds=PURE_SECONDS, max_heap_mb=64):
        try:
            request = parse_request_line(line)
        except ControlRequestError as exc:
            _check_refusal(exc)
            return
        assert parse_request_line(render_request_line(request)) == request


@pytest.fixture
def plugin() -> Iterator[FuzzedPlugin]:
    plugin = FuzzedPlugin.create()
    try:
        plugin.start()
        yield plugin
    finally:
        plugin.stop()


def _exchange(plugin: FuzzedPlugin, data: bytes) -> bytes:
    """Send ``data`` (from a thread: replies may fill the socket buffer before the last line is sent) and read
    until the plugin closes the connection."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(LIVE_SECONDS)
        s.connect(str(plugin.paths.control_socket))

        def send() -> None:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        received = bytearray()
        while chunk := s.recv(65536):
            received += chunk
        sender.join(timeout=LIVE_SECONDS)
    return bytes(received)


def _lines_in(data: bytes) -> int:
    """How many request lines the server sees: one per newline, and a last one without newline."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


CONVERSATIONS: Final = st.tuples(
    st.lists(LINES, min_size=1, max_size=6), st.booleans(), st.integers(min_value=0, max_value=300)
).map(lambda drawn: b"\n".join(drawn[0]) + (b"\n" if drawn[1] else b"") + b"\n" * drawn[2])


def test_a_live_plugin_answers_every_line_with_one_reply(plugin: FuzzedPlugin, figures: Figures) -> None:
    _, peak_before = plugin.rss_kib()
    files_before = plugin.tree()

    @fuzz_settings(examples=150, deadline_seconds=2 * LIVE_SECONDS)
    @given(data=CONVERSATIONS)
    @example(data=b'{"op": "status"}' + b" " * MAX_REQUEST_LINE + b'\n{"op": "clear-faults"}\n' + b"[" * 20_000)
    @example(data=b'{"op": "set-fault", "call": "prepare", "fault": {"delaySeconds": NaN, "failTimes": 1e400}}\n')
    def conversation(data: bytes) -> None:
        with figures.example(max_seconds=LIVE_SECONDS):
            received = _exchange(plugin, data)
            replies = [json.loads(line) for line in received.splitlines()]
            assert len(replies) == _lines_in(data) and (received.endswith(b"\n") or not received)
            for reply in replies:
                assert isinstance(reply, dict) and isinstance(reply["ok"], bool)
                if not reply["ok"]:
                    assert isinstance(reply["error"], str) and not reply["error"].startswith("internal error")
            assert plugin.alive()

    conversation()
    figures.rss_growth_mb = (plugin.rss_kib()[1] - peak_before) / 1024
    assert figures.rss_growth_mb < 64
    assert plugin.foreign_log_lines() == []
    assert plugin.tree() == files_before
