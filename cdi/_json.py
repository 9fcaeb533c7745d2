"""Strict readers for decoded CDI JSON/YAML documents, reporting errors at JSON paths.

Why strict: runtimes load specs with unknown fields rejected (the reference library unmarshals strictly), so a
spec we accept must also be accepted there. ``null`` counts as absent because that is what a Go decoder does
with it (and what YAML's empty values decode to).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from cdi.errors import SpecError, SpecProblem

T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True, kw_only=True)
class JsonPath:
    """Where a value sits in a document, and which document (``source``) for the error message."""

    source: str
    path: str = "$"

    def key(self, name: str) -> JsonPath:
        """The path of a field of this object."""
        return JsonPath(source=self.source, path=f"{self.path}.{name}")

    def index(self, position: int) -> JsonPath:
        """The path of an item of this array."""
        return JsonPath(source=self.source, path=f"{self.path}[{position}]")

    def error(self, rule: str) -> SpecError:
        """A SpecError for one problem at this path."""
        return SpecError(source=self.source, problems=[SpecProblem(json_path=self.path, rule=rule)])


class ItemDecoder(Protocol[T_co]):
    """Decodes one array item found at ``at`` (a model's ``from_json`` fits)."""

    def __call__(self, value: object, /, *, at: JsonPath) -> T_co: ...


def expect_object(value: object, *, at: JsonPath, fields: frozenset[str]) -> Mapping[str, object]:
    """The value as an object whose keys are all in ``fields``."""
    if not isinstance(value, dict):
        raise at.error(f"must be an object, not {_kind(value)}")
    for key in value:
        if not isinstance(key, str):
            raise at.error(f"object keys must be strings, not {_kind(key)}")
        if key not in fields:
            raise at.key(key).error(f"unknown field (the CDI schema has: {', '.join(sorted(fields))})")
    return value


def _present(obj: Mapping[str, object], key: str, *, at: JsonPath, required: bool) -> object:
    value = obj.get(key)
    if value is None and required:
        raise at.key(key).error("required field is missing")
    return value


def read_str(obj: Mapping[str, object], key: str, *, at: JsonPath, required: bool = False) -> str:
    """A string field ('' when absent and optional)."""
    value = _present(obj, key, at=at, required=required)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise at.key(key).error(f"must be a string, not {_kind(value)}")
    return value


def read_int(obj: Mapping[str, object], key: str, *, at: JsonPath) -> int | None:
    """An optional integer field (bools are not integers here, unlike in Python)."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise at.key(key).error(f"must be an integer, not {_kind(value)}")
    return value


def read_bool(obj: Mapping[str, object], key: str, *, at: JsonPath) -> bool:
    """An optional boolean field (false when absent)."""
    value = obj.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise at.key(key).error(f"must be a boolean, not {_kind(value)}")
    return value


def read_list(obj: Mapping[str, object], key: str, *, at: JsonPath, item: ItemDecoder[T_co]) -> tuple[T_co, ...] | None:
    """An optional array field, each item decoded by ``item``; None when absent."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise at.key(key).error(f"must be an array, not {_kind(value)}")
    return tuple(item(entry, at=at.key(key).index(i)) for i, entry in enumerate(value))


def str_item(value: object, /, *, at: JsonPath) -> str:
    """An array item that must be a string."""
    if not isinstance(value, str):
        raise at.error(f"must be a string, not {_kind(value)}")
    return value


def int_item(value: object, /, *, at: JsonPath) -> int:
    """An array item that must be an integer."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise at.error(f"must be an integer, not {_kind(value)}")
    return value


def read_str_map(obj: Mapping[str, object], key: str, *, at: JsonPath) -> dict[str, str]:
    """An optional string-to-string object field (annotations)."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise at.key(key).error(f"must be an object, not {_kind(value)}")
    result: dict[str, str] = {}
    for name, entry in value.items():
        if not isinstance(name, str) or not isinstance(entry, str):
            raise at.key(key).error(f"must map strings to strings; {name!r} maps to {_kind(entry)}")
        result[name] = entry
    return result


def _kind(value: object) -> str:
    """JSON's name for the type of a decoded value, for error messages."""
    names: list[tuple[type, str]] = [
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a number"),
        (str, "a string"),
        (list, "an array"),
        (dict, "an object"),
    ]
    for python_type, name in names:
        if isinstance(value, python_type):
            return name
    return "null" if value is None else type(value).__name__
