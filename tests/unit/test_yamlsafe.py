"""The bounded YAML reader: what it resolves, where it says things are, what it refuses and what refusing costs."""

from __future__ import annotations

import time

import pytest

from yamlsafe import (
    Limits,
    NonFinite,
    YamlDecodeError,
    YamlError,
    YamlLimitError,
    YamlMap,
    YamlScalar,
    YamlSchemaError,
    YamlSeq,
    YamlSyntaxError,
    read_document,
    read_documents,
    to_plain,
)

# CPU seconds (the machine is shared): far above what the reader needs for any of these inputs (milliseconds), far
# below what the old reader took.
COST_DEADLINE = 2.0


def _value(text: str) -> object:
    node = read_document(f"v: {text}\n", source="f.yaml")
    assert isinstance(node, YamlMap)
    value = node.entries[0].value
    assert isinstance(value, YamlScalar)
    return value.value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("plain", "plain"),
        ("'quoted'", "quoted"),
        ('"12"', "12"),
        ("12", 12),
        ("-7", -7),
        ("0x1f", 31),
        ("017", 15),
        ("1_000", 1000),
        ("1.5", 1.5),
        ("true", True),
        ("yes", True),
        ("off", False),
        ("~", None),
        ("", None),
        ("2024-01-01", "2024-01-01"),
        ("!!str 12", "12"),
        ("!!int '12'", 12),
        ("!!float 1", 1.0),
        ("! 12", 12),
        ('"\\x00"', "\x00"),
        (str(2**63 - 1), 2**63 - 1),
    ],
    ids=[
        "plain",
        "single-quoted",
        "double-quoted-number",
        "int",
        "negative",
        "hex",
        "octal",
        "underscores",
        "float",
        "true",
        "yes",
        "off",
        "tilde",
        "empty",
        "date-stays-text",
        "explicit-str",
        "explicit-int",
        "explicit-float",
        "non-specific-tag-as-pyyaml-reads-it",
        "escaped-nul",
        "int64-max",
    ],
)
def test_scalars_resolve_as_safe_loader_does_within_the_core_types(text: str, value: object) -> None:
    resolved = _value(text)
    assert (resolved, type(resolved)) == (value, type(value))


@pytest.mark.parametrize("text", [".nan", ".inf", "-.inf", ".NaN", "1.0e+999", "!!float .inf", "!!float 1e999"])
def test_nan_and_infinities_are_never_floats(text: str) -> None:
    assert _value(text) == NonFinite(text=text.removeprefix("!!float "))


def test_to_plain_refuses_a_non_finite_number_at_its_position() -> None:
    node = read_document("a: [1, {b: .nan}]\n", source="plain.yaml")
    with pytest.raises(YamlSchemaError, match=r"^plain\.yaml:1:12: '\.nan' is not a finite number"):
        to_plain(node, source="plain.yaml")


def test_to_plain_gives_python_values() -> None:
    node = read_document("a: [1, {b: x}]\nc: ~\n", source="f.yaml")
    assert to_plain(node, source="f.yaml") == {"a": [1, {"b": "x"}], "c": None}


def test_every_node_knows_its_line_and_column() -> None:
    node = read_document("# comment\ntop:\n  - {a: 1}\n  -   b\nother: 'x'\n", source="f.yaml")
    assert isinstance(node, YamlMap)
    top, other = node.entries
    assert (top.name, top.line, top.column, other.line, other.column) == ("top", 2, 1, 5, 1)
    assert isinstance(top.value, YamlSeq)
    first, second = top.value.items
    assert isinstance(first, YamlMap) and (first.line, first.column) == (3, 5)
    assert (first.entries[0].line, first.entries[0].column) == (3, 6)
    assert isinstance(second, YamlScalar) and (second.value, second.line, second.column) == ("b", 4, 7)
    assert node.get("other") is other.value and node.names() == ("top", "other")


def test_a_stream_gives_every_document() -> None:
    documents = read_documents("a: 1\n---\n---\n- x\n", source="m.yaml")
    assert [to_plain(d, source="m.yaml") for d in documents] == [{"a": 1}, None, ["x"]]


def test_an_empty_input_is_no_document() -> None:
    assert read_document(b"", source="f.yaml") is None
    assert read_document("# only a comment\n", source="f.yaml") is None


TINY = Limits(max_bytes=64, max_depth=3, max_nodes=10, max_scalar=8)

# (input, limits, error class, line, column, rule fragment)
REFUSED: dict[str, tuple[str | bytes, Limits, type[YamlError], int, int, str]] = {
    "alias": ("a: 1\nb: *x\n", Limits(), YamlSchemaError, 2, 4, "aliases (*x) are not supported"),
    "anchor": ("a: &x 1\n", Limits(), YamlSchemaError, 1, 4, "anchors (&x) are not supported"),
    "python-tag": ("a: !!python/name:os.system\n", Limits(), YamlSchemaError, 1, 4, "tag !!python/name:os.system is"),
    "python-object": ("a: !!python/object/apply:os.system [ls]\n", Limits(), YamlSchemaError, 1, 4, "!!python/object"),
    "local-tag": ("a: !foo bar\n", Limits(), YamlSchemaError, 1, 4, "tag !foo is not allowed"),
    "binary": ("a: !!binary aGk=\n", Limits(), YamlSchemaError, 1, 4, "tag !!binary is not allowed"),
    "explicit-timestamp": ("a: !!timestamp 2024-01-01\n", Limits(), YamlSchemaError, 1, 4, "tag !!timestamp is"),
    "set": ("a: !!set {x, y}\n", Limits(), YamlSchemaError, 1, 4, "tag !!set on a mapping is not allowed"),
    "omap": ("a: !!omap [x: 1]\n", Limits(), YamlSchemaError, 1, 4, "tag !!omap on a list is not allowed"),
    "int-key": ("1: a\n", Limits(), YamlSchemaError, 1, 1, "a mapping key must be a string, not an integer"),
    "bool-key": ("on: a\n", Limits(), YamlSchemaError, 1, 1, "a mapping key must be a string, not a boolean"),
    "null-key": ("~: a\n", Limits(), YamlSchemaError, 1, 1, "a mapping key must be a string, not null"),
    "list-key": ("? [a]\n: b\n", Limits(), YamlSchemaError, 1, 3, "a mapping key must be a string, not a list"),
    "mapping-key": ("{a: 1}: b\n", Limits(), YamlSchemaError, 1, 1, "a mapping key must be a string, not a mapping"),
    "duplicate-key": ("a: 1\nb: 2\na: 3\n", Limits(), YamlSchemaError, 3, 1, "key 'a' appears twice (first at line 1)"),
    "merge-key": ("a: 1\n<<: {b: 2}\n", Limits(), YamlSchemaError, 2, 1, "'<<' merge keys are not supported"),
    "bad-explicit-int": ("a: !!int twelve\n", Limits(), YamlSchemaError, 1, 4, "'twelve' is not a valid !!int"),
    "bad-explicit-bool": ("a: !!bool maybe\n", Limits(), YamlSchemaError, 1, 4, "'maybe' is not a valid !!bool"),
    "bad-explicit-null": ("a: !!null nothing\n", Limits(), YamlSchemaError, 1, 4, "'nothing' is not a valid !!null"),
    "empty-explicit-int": ("a: !!int ''\n", Limits(), YamlSchemaError, 1, 4, "'' is not a valid !!int"),
    "empty-binary-int": ("a: !!int 0b_\n", Limits(), YamlSchemaError, 1, 4, "'0b_' is not a valid !!int"),
    "int-beyond-64-bits": (f"a: {2**63}\n", Limits(), YamlLimitError, 1, 4, "is out of range for a 64-bit integer"),
    "long-number": ("a: 1" + "0" * 200 + "\n", Limits(), YamlLimitError, 1, 4, "more than 100 characters"),
    "two-documents": ("a: 1\n---\nb: 2\n", Limits(), YamlSchemaError, 2, 1, "a second document"),
    "too-deep": ("a: [[[1]]]\n", TINY, YamlLimitError, 1, 6, "nested deeper than 3 levels"),
    "too-many-nodes": ("[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n", TINY, YamlLimitError, 1, 26, "more than 10 nodes"),
    "scalar-too-long": ("a: abcdefghi\n", TINY, YamlLimitError, 1, 4, "a scalar of 9 characters (at most 8)"),
    "too-large": ("a: b\n" * 13, TINY, YamlLimitError, 1, 1, "65 bytes is more than the 64 a file may have"),
    "not-utf8": (b"a: ok\nb: caf\xe9\n", Limits(), YamlDecodeError, 2, 7, "not UTF-8: byte 0xe9 at offset 12"),
    "control-character": ("a: ok\nb: x\x07\n", Limits(), YamlSyntaxError, 2, 5, "character U+0007 is not allowed"),
    "syntax": ("a: [1,\nb: 2\n", Limits(), YamlSyntaxError, 3, 1, "not valid YAML: "),
    "bad-indentation": ("a:\n  - x\n - y\n", Limits(), YamlSyntaxError, 3, 2, "not valid YAML: "),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_refusals_name_file_line_column_and_rule(case: str) -> None:
    data, limits, error, line, column, rule = REFUSED[case]
    with pytest.raises(error) as caught:
        read_document(data, source="dir/in.yaml", limits=limits)
    assert (caught.value.source, caught.value.line, caught.value.column) == ("dir/in.yaml", line, column)
    assert str(caught.value).startswith(f"dir/in.yaml:{line}:{column}: "), str(caught.value)
    assert rule in caught.value.rule, caught.value.rule


def _bomb() -> bytes:
    """The classic: nine levels of nine aliases, 9^9 strings once expanded, in about 350 bytes."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    return ("\n".join(lines) + "\n").encode()


MEGABYTE = 1 << 20
COSTLY = {
    "alias-bomb": (_bomb(), YamlSchemaError, "anchors (&a) are not supported"),
    "deep-flow-1mb": (b"[" * (MEGABYTE // 2 - 1) + b"]" * (MEGABYTE // 2 - 1), YamlError, ""),
    "deep-block-1mb": (b"- " * (MEGABYTE // 2 - 1) + b"x\n", YamlLimitError, "nested deeper than 64 levels"),
    "flat-list-1mb": (b"[" + b",".join([b"1"] * (MEGABYTE // 2 - 1)) + b"]", YamlLimitError, "more than 20000 nodes"),
    "flat-mapping-1mb": (b"".join(b"k%06d: v\n" % i for i in range(MEGABYTE // 11)), YamlLimitError, "20000 nodes"),
    "one-scalar-1mb": (b"a: " + b"x" * (MEGABYTE - 4) + b"\n", YamlLimitError, "at most 65536"),
    "too-large": (b"#" * (MEGABYTE + 1), YamlLimitError, "1048577 bytes is more than the 1048576"),
}


@pytest.mark.parametrize("case", COSTLY, ids=list(COSTLY))
def test_hostile_inputs_are_refused_quickly(case: str) -> None:
    data, error, rule = COSTLY[case]
    assert len(data) <= MEGABYTE + 1
    started = time.process_time()
    with pytest.raises(error) as caught:
        read_document(data, source="big.yaml")
    assert time.process_time() - started < COST_DEADLINE
    assert str(caught.value).startswith("big.yaml:") and rule in str(caught.value)


def test_a_lone_surrogate_in_text_is_refused_at_its_position() -> None:
    with pytest.raises(YamlSyntaxError, match=r"^t\.yaml:2:4: character U\+D800 is not allowed"):
        read_document("a: 1\nb: \ud800\n", source="t.yaml")
