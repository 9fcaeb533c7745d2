"""CDI names: the kind ``vendor/class``, device names, and qualified device IDs ``vendor/class=device``.

The character rules are those the reference library enforces (``pkg/parser/parser.go``), which is what a runtime
will accept: vendor and class start with an ASCII letter, end with a letter or digit, and contain letters,
digits, ``_``, ``-`` and ``.``; a device name starts and ends with a letter or digit and may also contain ``:``.
(SPEC.md additionally describes 63/253-character limits that the reference code does not check; neither do we.)

Producers render IDs from structured parts; only consumers (the registry and the injector) parse IDs they receive.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from cdi.errors import QualifiedNameError

_LETTERS = frozenset(string.ascii_letters)
_ALNUM = frozenset(string.ascii_letters + string.digits)
_KIND_PART_INNER = _ALNUM | frozenset("_-.")
_DEVICE_INNER = _KIND_PART_INNER | frozenset(":")


def _check_kind_part(*, role: str, value: str) -> None:
    if not value:
        raise QualifiedNameError(f"{role} name is empty")
    if value[0] not in _LETTERS:
        raise QualifiedNameError(f"{role} name {value!r} must start with a letter")
    _check_inner_and_end(role=role, value=value, inner=_KIND_PART_INNER)


def _check_inner_and_end(*, role: str, value: str, inner: frozenset[str]) -> None:
    for char in value[1:-1]:
        if char not in inner:
            raise QualifiedNameError(f"{role} name {value!r} contains the invalid character {char!r}")
    if value[-1] not in _ALNUM:
        raise QualifiedNameError(f"{role} name {value!r} must end with a letter or digit")


def validate_vendor_name(vendor: str) -> None:
    """Raise QualifiedNameError unless ``vendor`` is a valid CDI vendor name."""
    _check_kind_part(role="vendor", value=vendor)


def validate_class_name(class_name: str) -> None:
    """Raise QualifiedNameError unless ``class_name`` is a valid CDI class name."""
    _check_kind_part(role="class", value=class_name)


def validate_device_name(device: str) -> None:
    """Raise QualifiedNameError unless ``device`` is a valid CDI device name (the part after ``=``)."""
    if not device:
        raise QualifiedNameError("device name is empty")
    if device[0] not in _ALNUM:
        raise QualifiedNameError(f"device name {device!r} must start with a letter or digit")
    _check_inner_and_end(role="device", value=device, inner=_DEVICE_INNER)


@dataclass(frozen=True, kw_only=True)
class Kind:
    """A CDI kind, ``vendor/class``."""

    vendor: str
    class_name: str

    def __str__(self) -> str:
        return f"{self.vendor}/{self.class_name}"


@dataclass(frozen=True, kw_only=True)
class QualifiedName:
    """A CDI device ID, ``vendor/class=device``."""

    kind: Kind
    device: str

    def __str__(self) -> str:
        return f"{self.kind}={self.device}"


def render_kind(*, vendor: str, class_name: str) -> str:
    """``vendor/class`` after checking both parts."""
    validate_vendor_name(vendor)
    validate_class_name(class_name)
    return str(Kind(vendor=vendor, class_name=class_name))


def render_qualified_name(*, kind: str, device: str) -> str:
    """The CDI device ID ``kind=device``, after checking the kind and the device name."""
    validate_kind(kind)
    validate_device_name(device)
    return f"{kind}={device}"


def parse_kind(kind: str) -> Kind:
    """Split and check a spec's ``kind``; the vendor ends at the first ``/`` (a later ``/`` is invalid in the class)."""
    vendor, slash, class_name = kind.partition("/")
    if not slash or not vendor or not class_name:
        raise QualifiedNameError(f"kind {kind!r} must have the form vendor/class")
    validate_vendor_name(vendor)
    validate_class_name(class_name)
    return Kind(vendor=vendor, class_name=class_name)


def validate_kind(kind: str) -> None:
    """Raise QualifiedNameError unless ``kind`` is a valid ``vendor/class``."""
    parse_kind(kind)


def parse_qualified_name(device_id: str) -> QualifiedName:
    """Split and check a CDI device ID as a runtime receives it (the kind ends at the first ``=``)."""
    # A leading '/' marks a plain host device path, which runtimes never treat as a CDI ID.
    qualifier, equals, device = device_id.partition("=")
    if device_id.startswith("/") or not equals or not qualifier or not device:
        raise QualifiedNameError(f"{device_id!r} is not a qualified CDI device ID (vendor/class=device)")
    try:
        kind = parse_kind(qualifier)
        validate_device_name(device)
    except QualifiedNameError as exc:
        raise QualifiedNameError(f"invalid CDI device ID {device_id!r}: {exc}") from exc
    return QualifiedName(kind=kind, device=device)
