"""Structured logs: ``key=value`` text for people, JSON lines for machines.

Code logs a short message plus ``extra={"fields": {...}}``; the formatter renders the fields.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Final

FORMATS: Final = ("text", "json")


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return dict(fields) if isinstance(fields, dict) else {}


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created)) + f".{int(record.msecs):03d}"
        parts = [stamp, record.levelname[0], record.name.removeprefix("fakedev."), record.getMessage()]
        parts += [f"{k}={v}" for k, v in _fields(record).items()]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
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
