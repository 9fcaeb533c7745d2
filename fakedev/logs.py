"""Structured logs: ``key=value`` text for people, JSON lines for machines.

Code logs a short message plus ``extra={"fields": {...}}``; the formatter renders the fields.

Every record is exactly one line in either format, whatever it carries: claim UIDs, names and errors arrive from
the kubelet and the control socket, and a newline in one of them must not forge a record of its own (tests and
people count lines such as "plugin ready"). The text format therefore escapes every non-printable character
(newlines, terminal escapes, bidi controls, lone surrogates) as a Python escape, quotes a field value that holds a
space, ``=`` or ``"`` (logfmt's rule, so a value cannot forge a field either), and puts a traceback on the same line.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Final

FORMATS: Final = ("text", "json")
_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_QUOTE_IF: Final = frozenset(' ="')


def _escape_char(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape(text: str) -> str:
    """``text`` with every non-printable character written as its escape: one line, safe on a terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape_char(c) for c in text)


def render_value(value: object) -> str:
    """A field value: escaped, and quoted (with ``\\`` and ``"`` escaped) when it would otherwise be ambiguous."""
    text = str(value)
    if text and text.isprintable() and not _QUOTE_IF.intersection(text) and "\\" not in text:
        return text
    return '"' + escape(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return dict(fields) if isinstance(fields, dict) else {}


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created)) + f".{int(record.msecs):03d}"
        parts = [stamp, record.levelname[0], record.name.removeprefix("fakedev."), escape(record.getMessage())]
        parts += [f"{escape(str(k))}={render_value(v)}" for k, v in _fields(record).items()]
        if record.exc_info:
            parts.append(f"exception={render_value(self.formatException(record.exc_info))}")
        if record.stack_info:
            parts.append(f"stack={render_value(self.formatStack(record.stack_info))}")
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    """One JSON document per line (``json.dumps`` escapes control characters, and non-ASCII by default)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def configure(*, fmt: str = "text", level: str = "INFO") -> None:
    """Send fakedev's logs to stderr in the chosen format (idempotent)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("fakedev")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
