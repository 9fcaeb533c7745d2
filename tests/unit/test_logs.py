"""The log formatters: one line per record whatever the record carries, so untrusted text cannot forge records."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from fakedev.logs import JsonFormatter, TextFormatter, escape, render_value

FORGED = "u\n12:00:00.000 I plugin.app plugin ready driver=gpu.example.com"


def _record(msg: str, fields: dict[str, object], *, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError(f"bad uid {FORGED}")
        except ValueError:
            exc_info = sys.exc_info()
    record = logging.LogRecord("fakedev.driver.state", logging.WARNING, __file__, 1, msg, None, exc_info)
    record.fields = fields
    return record


@pytest.mark.parametrize(
    ("msg", "fields", "exc"),
    [
        ("prepare failed", {"claim": FORGED, "error": "claim uid is not a valid UID"}, False),
        (FORGED, {}, False),
        ("prepare failed", {"claim": "a\r\x1b[2Jb\u2028c\x00d\udcff"}, False),
        ("prepare failed", {"claim": "x"}, True),
    ],
    ids=["field-newline", "message-newline", "control-and-separators", "traceback"],
)
def test_a_text_record_is_exactly_one_printable_line(msg: str, fields: dict[str, object], exc: bool) -> None:
    line = TextFormatter().format(_record(msg, fields, exc=exc))
    assert line.isprintable()  # no newline, carriage return, escape sequence or line separator
    assert "plugin ready" not in line.split(" ", 4)[3]  # the forged text is data, never a message of its own


def test_a_forged_line_stays_inside_its_quoted_field() -> None:
    line = TextFormatter().format(_record("prepare failed", {"claim": FORGED, "ok": True}))
    assert line.endswith(
        ' W driver.state prepare failed claim="u\\n12:00:00.000 I plugin.app plugin ready '
        'driver=gpu.example.com" ok=True'
    )


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        ("gpu-0", "gpu-0"),
        (12.5, "12.5"),
        ("", '""'),
        ("a b", '"a b"'),
        ("ok=True", '"ok=True"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("C:\\dir", '"C:\\\\dir"'),
        ("a\nb", '"a\\nb"'),
        ("tab\there", '"tab\\there"'),
        ("\u202egnp.exe", '"\\u202egnp.exe"'),
        ("ünïcødé", "ünïcødé"),
    ],
    ids=["plain", "number", "empty", "space", "equals", "quotes", "backslash", "newline", "tab", "bidi", "unicode"],
)
def test_field_values_are_escaped_and_quoted_when_ambiguous(value: object, rendered: str) -> None:
    assert render_value(value) == rendered


def test_escape_leaves_printable_text_alone_and_escapes_the_rest() -> None:
    assert escape("plugin ready ünïcødé") == "plugin ready ünïcødé"
    assert escape("a\nb\x07c\U000e0001") == "a\\nb\\x07c\\U000e0001"


def test_a_json_record_is_one_line_that_keeps_the_text() -> None:
    line = JsonFormatter().format(_record("prepare failed", {"claim": FORGED}, exc=True))
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["claim"] == FORGED and doc["msg"] == "prepare failed" and "ValueError" in doc["exception"]
