"""Block-style YAML for the plain documents CDI specs are, written directly (pure).

PyYAML represents a document as a tree of nodes in Python before its C emitter writes it; for a claim's spec that
was a tenth of a prepare's CPU (``make bench``). A spec is mappings, sequences, strings and integers, and its
strings are names, paths and ``KEY=value`` pairs, so most documents need nothing of YAML but indentation. This writes
exactly the text ``yaml.dump(document, sort_keys=False, explicit_start=True)`` writes, or declines (None) as soon as
a value could need quoting, folding or anything else it does not do — then the caller asks PyYAML.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Final

import yaml

_PLAIN: Final = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_./=+,@-]*(?::[A-Za-z0-9_./=+,@-]+)*")
"""Strings a YAML plain scalar can hold as they are in block context: no spaces, no indicator at the start, a
colon only between other characters, no comment sign, ASCII only."""
_STR_TAG: Final = "tag:yaml.org,2002:str"
_SIMPLE_KEY_MAX: Final = 128
"""PyYAML writes a longer key as a complex ``? key`` entry."""
_RESOLVER: Final = yaml.resolver.Resolver()


@functools.lru_cache(maxsize=4096)
def _plain(text: str) -> bool:
    """Whether PyYAML writes ``text`` unquoted: plain-safe characters that would read back as a string (not
    ``true``, ``null``, ``1.5``, ``0x1f`` …)."""
    if _PLAIN.fullmatch(text) is None:
        return False
    tag: str = _RESOLVER.resolve(yaml.ScalarNode, text, (True, False))  # type: ignore[no-untyped-call]
    return tag == _STR_TAG


def _scalar(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and _plain(value):
        return value
    return None


class _DeclinedError(Exception):
    """Something PyYAML would write differently than this module does."""


def _key(key: object) -> str:
    if not isinstance(key, str) or len(key) >= _SIMPLE_KEY_MAX or (text := _scalar(key)) is None:
        raise _DeclinedError
    return text


def _inline(value: object) -> str | None:
    """The text of a value that stays on its key's or dash's line, or None for a nested block."""
    if isinstance(value, dict | list):
        return ("{}" if isinstance(value, dict) else "[]") if not value else None
    text = _scalar(value)
    if text is None:
        raise _DeclinedError
    return text


def _mapping(mapping: Mapping[object, object], *, indent: int, lines: list[str], first_prefix: str = "") -> None:
    """Keys at column ``indent``; the first line starts with ``first_prefix`` instead (a sequence item's dash)."""
    pad = " " * indent
    for number, (key, value) in enumerate(mapping.items()):
        lead = first_prefix if number == 0 and first_prefix else pad
        inline = _inline(value)
        if inline is not None:
            lines.append(f"{lead}{_key(key)}: {inline}")
        elif isinstance(value, dict):
            lines.append(f"{lead}{_key(key)}:")
            _mapping(value, indent=indent + 2, lines=lines)
        else:
            lines.append(f"{lead}{_key(key)}:")
            _sequence(value, indent=indent, lines=lines)  # type: ignore[arg-type]  # a non-empty list here


def _sequence(items: list[object], *, indent: int, lines: list[str]) -> None:
    """A block sequence under a mapping key: its dashes at the key's column (PyYAML does not indent them)."""
    dash = " " * indent + "- "
    for item in items:
        inline = _inline(item)
        if inline is not None:
            lines.append(dash + inline)
        elif isinstance(item, dict):
            _mapping(item, indent=indent + 2, lines=lines, first_prefix=dash)
        else:
            raise _DeclinedError  # a sequence right inside a sequence: PyYAML writes "- - …"


def render_block_yaml(document: Mapping[str, object]) -> str | None:
    """``document`` as PyYAML's block style writes it (``---`` first, keys in their order), or None when some value
    needs what only PyYAML does."""
    if not document:
        return None
    lines = ["---"]
    try:
        _mapping(document, indent=0, lines=lines)  # type: ignore[arg-type]  # str keys are objects
    except _DeclinedError:
        return None
    return "\n".join(lines) + "\n"
