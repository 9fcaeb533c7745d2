"""Errors raised by the CDI package.

CdiError
├── SpecError             a spec breaks a rule; names the file, the JSON path(s) and the rule(s)
├── SpecReadError         a spec file or CDI directory could not be read (the OS said no)
├── QualifiedNameError    a vendor, class, kind, device name or CDI device ID breaks the naming rules
├── DeviceConflictError   two specs of equal priority define the same qualified device (registry report)
├── ResolveError          CDI device IDs the registry cannot resolve (unknown, malformed or conflicting)
├── WriteError            a spec file could not be written or removed
│   └── PathEscapeError   a file name would place the file outside the CDI directory
└── InjectError           container edits cannot be applied to an OCI spec (e.g. host device missing)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


class CdiError(Exception):
    """Base of every error the CDI package raises on purpose."""


@dataclass(frozen=True, kw_only=True)
class SpecProblem:
    """One broken rule: where in the spec (a JSON path such as ``$.devices[0].name``) and what rule."""

    json_path: str
    rule: str


class SpecError(CdiError):
    """A spec is invalid. Every problem found is listed, each as ``<source>: <json path>: <rule>``."""

    def __init__(self, *, source: str, problems: Sequence[SpecProblem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__("\n".join(f"{source}: {p.json_path}: {p.rule}" for p in self.problems))


class SpecReadError(CdiError):
    """A spec file or a CDI directory exists but could not be read."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


class QualifiedNameError(CdiError):
    """A name breaks the CDI naming rules (``vendor/class=device``)."""


class DeviceConflictError(CdiError):
    """The same qualified device is defined by two specs with equal priority; neither is used."""

    def __init__(self, message: str, *, device_id: str, paths: Sequence[Path]) -> None:
        super().__init__(message)
        self.device_id = device_id
        self.paths = tuple(paths)


class ResolveError(CdiError):
    """Some requested CDI device IDs cannot be resolved; ``unresolved`` lists them in request order."""

    def __init__(self, message: str, *, unresolved: Sequence[str]) -> None:
        super().__init__(message)
        self.unresolved = tuple(unresolved)


class WriteError(CdiError):
    """Writing or removing a spec file failed."""


class PathEscapeError(WriteError):
    """The file name is not a plain name inside the CDI directory (``..``, ``/``, hidden or empty)."""


class InjectError(CdiError):
    """The container edits cannot be applied to the OCI spec."""
