"""Bounded, safe YAML reading shared by node profiles (fakedev) and drill scenarios (harness).

A leaf package: both sides may import it, it imports nothing of ours. :func:`read_document` turns bytes or text into
a typed tree (:class:`YamlMap`, :class:`YamlSeq`, :class:`YamlScalar`, each with its line and column) or raises one
:class:`YamlError` naming ``file:line:column: rule``. Its cost is bounded for any input (:class:`Limits`).
"""

from yamlsafe.errors import YamlDecodeError, YamlError, YamlLimitError, YamlSchemaError, YamlSyntaxError
from yamlsafe.nodes import (
    NonFinite,
    Plain,
    ScalarValue,
    YamlEntry,
    YamlMap,
    YamlNode,
    YamlScalar,
    YamlSeq,
    kind_of,
    to_plain,
)
from yamlsafe.reader import DEFAULT_LIMITS, Limits, describe_tag, read_document, read_documents

__all__ = [
    "DEFAULT_LIMITS",
    "Limits",
    "NonFinite",
    "Plain",
    "ScalarValue",
    "YamlDecodeError",
    "YamlEntry",
    "YamlError",
    "YamlLimitError",
    "YamlMap",
    "YamlNode",
    "YamlScalar",
    "YamlSchemaError",
    "YamlSeq",
    "YamlSyntaxError",
    "describe_tag",
    "kind_of",
    "read_document",
    "read_documents",
    "to_plain",
]
