"""The typed tree the reader returns: scalars already resolved to Python values, every node with its position.

A tree never holds an alias, a tag beyond the core schema, or a non-string or repeated key: the reader refuses
those. A NaN or an infinity is never a ``float`` in it but a :class:`NonFinite`, so code that wants a number refuses
it by type, with its own field path in the message, and :func:`to_plain` refuses it outright.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from yamlsafe.errors import YamlSchemaError


@dataclass(frozen=True, kw_only=True)
class NonFinite:
    """``.nan``, ``.inf``, ``-.inf`` or a float too large to hold (``1e999``), as written."""

    text: str


ScalarValue: TypeAlias = str | int | float | bool | NonFinite | None
"""A float here is always finite."""
Plain: TypeAlias = str | int | float | bool | list["Plain"] | dict[str, "Plain"] | None


@dataclass(frozen=True, kw_only=True)
class YamlScalar:
    value: ScalarValue
    """str, bool, int (64-bit), finite float, NonFinite or None, as the YAML 1.1 rules PyYAML follows resolve it."""
    line: int
    column: int


@dataclass(frozen=True, kw_only=True)
class YamlSeq:
    items: tuple[YamlNode, ...]
    line: int
    column: int


@dataclass(frozen=True, kw_only=True)
class YamlEntry:
    """One key of a mapping: its name, where the key is written, and its value."""

    name: str
    line: int
    column: int
    value: YamlNode


@dataclass(frozen=True, kw_only=True)
class YamlMap:
    entries: tuple[YamlEntry, ...]
    """In document order; names are unique."""
    line: int
    column: int

    def get(self, name: str) -> YamlNode | None:
        return next((e.value for e in self.entries if e.name == name), None)

    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries)


YamlNode: TypeAlias = YamlScalar | YamlSeq | YamlMap


def kind_of(node: YamlNode | None) -> str:
    """What a node is, in words for error messages: ``a mapping``, ``a list``, ``a string``, ``null``…"""
    if node is None:
        return "nothing"
    if isinstance(node, YamlMap):
        return "a mapping"
    if isinstance(node, YamlSeq):
        return "a list"
    value = node.value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, NonFinite):
        return f"a number that is not finite ({value.text})"
    return "a string"


def to_plain(node: YamlNode | None, *, source: str) -> Plain:
    """The node as plain Python (dicts, lists, scalars), refusing NaN and infinities; ``source`` names the file.

    Recursion is bounded by the reader's depth limit.
    """
    if node is None:
        return None
    if isinstance(node, YamlSeq):
        return [to_plain(item, source=source) for item in node.items]
    if isinstance(node, YamlMap):
        return {entry.name: to_plain(entry.value, source=source) for entry in node.entries}
    if isinstance(node.value, NonFinite):
        raise YamlSchemaError(
            source=source,
            line=node.line,
            column=node.column,
            rule=f"{node.value.text!r} is not a finite number (NaN and infinities are refused)",
        )
    return node.value
