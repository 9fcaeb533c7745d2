"""Errors of yamlsafe: every one says ``file:line:column: rule``, with the file's real name.

YamlError              base; ``source``, ``line``, ``column`` (1-based) and ``rule`` are attributes too
├── YamlDecodeError    the bytes are not UTF-8 (the rule names the byte offset)
├── YamlSyntaxError    the text is not YAML, or holds a character YAML forbids (the parser's own words)
├── YamlLimitError     a bound was hit: file size, nesting depth, node count, scalar length, integer range
└── YamlSchemaError    valid YAML outside what we accept: a tag beyond the core schema, an anchor or alias, a key
                       that is not a string or appears twice, a stream of several documents; NaN or an infinity
                       where plain values are asked for (``to_plain``)
"""

from __future__ import annotations


class YamlError(Exception):
    """A YAML input was refused; ``str()`` is ``file:line:column: rule``."""

    def __init__(self, *, source: str, line: int, column: int, rule: str) -> None:
        super().__init__(f"{source}:{line}:{column}: {rule}")
        self.source = source
        self.line = line
        self.column = column
        self.rule = rule


class YamlDecodeError(YamlError):
    """The input is not UTF-8."""


class YamlSyntaxError(YamlError):
    """The input is not well-formed YAML."""


class YamlLimitError(YamlError):
    """The input exceeds one of the reader's bounds."""


class YamlSchemaError(YamlError):
    """The input is YAML, but uses something the reader refuses (tags, aliases, odd keys, NaN)."""
