"""Reading YAML with bounded cost: bytes or text in, a typed tree of positioned nodes out, or one ``YamlError``.

The parser (libyaml when PyYAML has it, PyYAML's own otherwise) yields events; this module builds the tree itself,
without PyYAML's recursive composer and constructor, and refuses on the spot:

- more than ``max_bytes`` of input, bytes that are not UTF-8, characters YAML forbids;
- anchors and aliases, all of them: an alias is where an expansion bomb starts, a node reached through two paths has
  no one line to blame in an error, and no profile or scenario needs one;
- tags outside the core schema (``!!str !!int !!float !!bool !!null !!seq !!map``): ``!!python/…``, ``!!binary``,
  ``!!set``, ``!foo``; plain scalars resolve as PyYAML's SafeLoader resolves them (YAML 1.1, as Kubernetes reads
  YAML), except that what it would read as a date stays a string, and ``<<`` merge keys are refused;
- keys that are not strings, keys that appear twice, integers beyond 64 bits;
- nesting deeper than ``max_depth``, more than ``max_nodes`` nodes, scalars longer than ``max_scalar`` characters.

NaN and infinities are returned as :class:`NonFinite`, never as a float: whoever expects a number refuses them and
can say which field held one.

Every bound is checked as the events arrive, so the work done before a refusal is linear in the input read so far.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import yaml
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from yamlsafe.errors import YamlDecodeError, YamlLimitError, YamlSchemaError, YamlSyntaxError
from yamlsafe.nodes import NonFinite, ScalarValue, YamlEntry, YamlMap, YamlNode, YamlScalar, YamlSeq, kind_of


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What one input may cost. The defaults fit every profile and scenario with a wide margin."""

    max_bytes: int = 1 << 20
    """Input size in bytes (text is measured as its UTF-8 encoding)."""
    max_depth: int = 64
    """Nested lists and mappings; the top-level collection is depth 1."""
    max_nodes: int = 20_000
    """Scalars, lists, mappings and documents, all counted."""
    max_scalar: int = 64 * 1024
    """Characters in one scalar (a key, a value, a block of manifests)."""


DEFAULT_LIMITS: Final = Limits()

_CORE: Final = "tag:yaml.org,2002:"
_STR: Final = _CORE + "str"
_INT: Final = _CORE + "int"
_FLOAT: Final = _CORE + "float"
_BOOL: Final = _CORE + "bool"
_NULL: Final = _CORE + "null"
_SEQ: Final = _CORE + "seq"
_MAP: Final = _CORE + "map"
_MERGE: Final = _CORE + "merge"
# Implicit YAML 1.1 types beyond the core schema; their text is kept as a string.
_AS_STRING: Final = frozenset({_CORE + "timestamp", _CORE + "value"})
_SCALAR_TAGS: Final = frozenset({_STR, _INT, _FLOAT, _BOOL, _NULL})
_NUMBER_TEXT_MAX: Final = 100
"""Characters of an integer or float's text: int64 needs 64 binary digits plus a sign, a prefix and separators."""
_INT64: Final = range(-(1 << 63), 1 << 63)
_LINE_BREAK: Final = re.compile("\r\n|[\n\r\x85\u2028\u2029]")
_NON_PRINTABLE: Final = yaml.reader.Reader.NON_PRINTABLE
_RESOLVER: Final = Resolver()
_CONSTRUCTOR: Final = SafeConstructor()
# What implicit resolution matches per tag; an explicit !!null must match it (PyYAML would ignore the text).
_PATTERNS: Final = {tag: regexp for rules in Resolver.yaml_implicit_resolvers.values() for tag, regexp in rules}
_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser is about twenty times faster; both produce the same events for valid YAML."""


def read_document(data: bytes | str, *, source: str, limits: Limits = DEFAULT_LIMITS) -> YamlNode | None:
    """The single document in ``data`` (None for an empty stream); ``source`` names the file in every error."""
    text = _decode(data, source=source, limits=limits)
    documents = _compose(text, source=source, limits=limits, single=True)
    return documents[0] if documents else None


def read_documents(data: bytes | str, *, source: str, limits: Limits = DEFAULT_LIMITS) -> tuple[YamlNode | None, ...]:
    """Every document of a stream (``---`` separated), in order; an empty document is None."""
    text = _decode(data, source=source, limits=limits)
    return tuple(_compose(text, source=source, limits=limits, single=False))


def describe_tag(tag: str) -> str:
    """A tag as it would be written: ``!!python/name:os.system`` rather than ``tag:yaml.org,2002:python/…``."""
    return "!!" + tag.removeprefix(_CORE) if tag.startswith(_CORE) else tag


# -- text ------------------------------------------------------------------------------------------------------------


def _position(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of character ``offset``, counting line breaks as YAML does."""
    line, start = 1, 0
    for match in _LINE_BREAK.finditer(text, 0, offset):
        line, start = line + 1, match.end()
    return line, offset - start + 1


def _decode(data: bytes | str, *, source: str, limits: Limits) -> str:
    size = len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) else len(data)
    if size > limits.max_bytes:
        raise YamlLimitError(
            source=source, line=1, column=1, rule=f"{size} bytes is more than the {limits.max_bytes} a file may have"
        )
    if isinstance(data, str):
        text = data
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            prefix = data[: exc.start].decode("utf-8")
            line, column = _position(prefix, len(prefix))
            raise YamlDecodeError(
                source=source,
                line=line,
                column=column,
                rule=f"not UTF-8: byte {data[exc.start]:#04x} at offset {exc.start} ({exc.reason})",
            ) from exc
    bad = _NON_PRINTABLE.search(text)
    if bad is not None:
        line, column = _position(text, bad.start())
        raise YamlSyntaxError(
            source=source,
            line=line,
            column=column,
            rule=f"character U+{ord(bad.group()):04X} is not allowed in YAML (control characters, lone surrogates)",
        )
    return text


# -- events ----------------------------------------------------------------------------------------------------------


def _events(text: str, *, source: str) -> Iterator[yaml.Event]:
    loader = _LOADER(text)
    try:
        while True:
            try:
                if not loader.check_event():
                    return
                event = loader.get_event()
            except yaml.MarkedYAMLError as exc:
                raise _syntax_error(exc, source=source) from exc
            except yaml.YAMLError as exc:
                raise YamlSyntaxError(source=source, line=1, column=1, rule=f"not valid YAML: {exc}") from exc
            yield event
    finally:
        loader.dispose()


def _syntax_error(exc: yaml.MarkedYAMLError, *, source: str) -> YamlSyntaxError:
    mark = exc.problem_mark or exc.context_mark
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    rule = f"not valid YAML: {exc.problem or exc.context or 'cannot parse'}"
    opened = exc.context_mark
    if exc.context and exc.problem and opened is not None and (opened.line, opened.column) != (line - 1, column - 1):
        rule += f" ({exc.context} at {opened.line + 1}:{opened.column + 1})"
    return YamlSyntaxError(source=source, line=line, column=column, rule=rule)


# -- composing -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Where:
    """A position in the input, making the errors that point at it."""

    source: str
    line: int
    column: int

    @classmethod
    def of(cls, event: yaml.Event, *, source: str) -> _Where:
        mark = event.start_mark  # the parsers always set it; the stubs allow None
        return cls(source=source, line=mark.line + 1 if mark else 1, column=mark.column + 1 if mark else 1)

    def schema(self, rule: str) -> YamlSchemaError:
        return YamlSchemaError(source=self.source, line=self.line, column=self.column, rule=rule)

    def limit(self, rule: str) -> YamlLimitError:
        return YamlLimitError(source=self.source, line=self.line, column=self.column, rule=rule)


class _SeqFrame:
    """A list being built."""

    def __init__(self, *, line: int, column: int) -> None:
        self.line, self.column = line, column
        self.items: list[YamlNode] = []


class _MapFrame:
    """A mapping being built; ``key`` is the key waiting for its value (name, line, column)."""

    def __init__(self, *, line: int, column: int) -> None:
        self.line, self.column = line, column
        self.entries: list[YamlEntry] = []
        self.key: tuple[str, int, int] | None = None
        self.seen: dict[str, int] = {}


class _Composer:
    def __init__(self, *, source: str, limits: Limits) -> None:
        self.source = source
        self.limits = limits
        self.stack: list[_SeqFrame | _MapFrame] = []
        self.count = 0
        self.root: YamlNode | None = None

    def at(self, event: yaml.Event) -> _Where:
        return _Where.of(event, source=self.source)

    def counted(self, event: yaml.Event) -> None:
        self.count += 1
        if self.count > self.limits.max_nodes:
            raise self.at(event).limit(f"more than {self.limits.max_nodes} nodes")

    def node(self, event: yaml.Event) -> None:
        """One scalar, collection start or collection end."""
        anchor = getattr(event, "anchor", None)
        if isinstance(event, yaml.AliasEvent):
            raise self.at(event).schema(f"aliases (*{anchor}) are not supported: write the value out")
        if anchor is not None:
            raise self.at(event).schema(f"anchors (&{anchor}) are not supported: write the value out")
        if isinstance(event, yaml.ScalarEvent):
            self.counted(event)
            self.attach(_scalar(event, source=self.source, limits=self.limits))
        elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            self.start(event)
        elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            frame = self.stack.pop()
            if isinstance(frame, _SeqFrame):
                self.attach(YamlSeq(items=tuple(frame.items), line=frame.line, column=frame.column))
            else:
                self.attach(YamlMap(entries=tuple(frame.entries), line=frame.line, column=frame.column))

    def start(self, event: yaml.SequenceStartEvent | yaml.MappingStartEvent) -> None:
        self.counted(event)
        is_map = isinstance(event, yaml.MappingStartEvent)
        if event.tag not in (None, "!", _MAP if is_map else _SEQ):
            what = "a mapping" if is_map else "a list"
            raise self.at(event).schema(f"tag {describe_tag(str(event.tag))} on {what} is not allowed")
        parent = self.stack[-1] if self.stack else None
        if isinstance(parent, _MapFrame) and parent.key is None:
            what = "a mapping" if is_map else "a list"
            raise self.at(event).schema(f"a mapping key must be a string, not {what}")
        if len(self.stack) >= self.limits.max_depth:
            raise self.at(event).limit(f"nested deeper than {self.limits.max_depth} levels")
        where = self.at(event)
        frame = _MapFrame if is_map else _SeqFrame
        self.stack.append(frame(line=where.line, column=where.column))

    def attach(self, node: YamlNode) -> None:
        if not self.stack:
            self.root = node
            return
        frame = self.stack[-1]
        if isinstance(frame, _SeqFrame):
            frame.items.append(node)
            return
        if frame.key is None:
            if not isinstance(node, YamlScalar) or not isinstance(node.value, str):
                raise _Where(source=self.source, line=node.line, column=node.column).schema(
                    f"a mapping key must be a string, not {kind_of(node)}"
                )
            first = frame.seen.get(node.value)
            if first is not None:
                raise _Where(source=self.source, line=node.line, column=node.column).schema(
                    f"key {node.value!r} appears twice (first at line {first})"
                )
            frame.seen[node.value] = node.line
            frame.key = (node.value, node.line, node.column)
            return
        (name, line, column), frame.key = frame.key, None
        frame.entries.append(YamlEntry(name=name, line=line, column=column, value=node))


def _compose(text: str, *, source: str, limits: Limits, single: bool) -> list[YamlNode | None]:
    composer = _Composer(source=source, limits=limits)
    documents: list[YamlNode | None] = []
    for event in _events(text, source=source):
        if isinstance(event, yaml.StreamStartEvent | yaml.StreamEndEvent):
            continue
        if isinstance(event, yaml.DocumentStartEvent):
            if single and documents:
                raise composer.at(event).schema("a second document: one document is expected")
            composer.counted(event)
            composer.root = None
        elif isinstance(event, yaml.DocumentEndEvent):
            documents.append(composer.root)
        else:
            composer.node(event)
    return documents


def _scalar(event: yaml.ScalarEvent, *, source: str, limits: Limits) -> YamlScalar:
    where = _Where.of(event, source=source)
    text = event.value
    if len(text) > limits.max_scalar:
        raise where.limit(f"a scalar of {len(text)} characters (at most {limits.max_scalar})")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # PyYAML's own parser turns a "\ud800" escape into half a character; nothing downstream could print it.
            raise where.schema("an escape in this scalar makes a lone surrogate, which is not a character") from None
    tag = event.tag
    if tag is None or tag == "!":
        tag = str(_RESOLVER.resolve(yaml.ScalarNode, text, event.implicit))  # type: ignore[no-untyped-call]
        if tag in _AS_STRING:
            tag = _STR
    elif tag in (_SEQ, _MAP):
        raise where.schema(f"tag {describe_tag(tag)} does not fit a scalar")
    elif tag not in _SCALAR_TAGS:
        raise where.schema(
            f"tag {describe_tag(tag)} is not allowed (the core schema only: !!str, !!int, !!float, !!bool, !!null)"
        )
    elif tag == _NULL and not _PATTERNS[tag].match(text):
        raise where.schema(f"{text[:40]!r} is not a valid {describe_tag(tag)}")
    if tag == _MERGE:
        raise where.schema("'<<' merge keys are not supported: write the keys out")
    return YamlScalar(value=_value(text, tag=tag, where=where), line=where.line, column=where.column)


def _value(text: str, *, tag: str, where: _Where) -> ScalarValue:
    if tag == _NULL:
        return None
    if tag == _BOOL:
        try:
            return bool(_CONSTRUCTOR.construct_yaml_bool(yaml.ScalarNode(tag, text)))
        except KeyError:
            raise where.schema(f"{text[:40]!r} is not a valid {describe_tag(tag)}") from None
    if tag not in (_INT, _FLOAT):
        return text
    if len(text) > _NUMBER_TEXT_MAX:
        raise where.limit(f"a number written with more than {_NUMBER_TEXT_MAX} characters")
    try:
        if tag == _INT:
            number: int | float = _CONSTRUCTOR.construct_yaml_int(yaml.ScalarNode(tag, text))
        else:
            number = _CONSTRUCTOR.construct_yaml_float(yaml.ScalarNode(tag, text))
    # Implicitly resolved text always converts; an explicit tag can hold anything ("!!int ''" is an IndexError).
    except (ValueError, IndexError):
        raise where.schema(f"{text!r} is not a valid {describe_tag(tag)}") from None
    if isinstance(number, float) and not math.isfinite(number):
        return NonFinite(text=text)
    if isinstance(number, int) and number not in _INT64:
        raise where.limit(f"{text!r} is out of range for a 64-bit integer")
    return number
