"""Reading CDI spec files: decode JSON or YAML strictly, build the model, validate; scan CDI directories.

Errors name the file. Like the reference loader (sigs.k8s.io/yaml's strict mode) duplicate keys are an error, not
"last one wins", so two tools reading the same file cannot see different specs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import yaml

from cdi.errors import CdiError, SpecError, SpecProblem, SpecReadError
from cdi.spec import Spec
from cdi.validate import validate_spec

# Only these are spec files to a runtime; anything else in a CDI dir (our temp files included) is ignored.
SPEC_SUFFIXES = (".json", ".yaml")

SpecFormat = Literal["json", "yaml"]

# The safe loader, in C when PyYAML was built with libyaml (same documents, same errors as YAMLError).
_YAML_LOADER: Final[type[yaml.SafeLoader] | type[yaml.CSafeLoader]] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, kw_only=True)
class LoadedSpec:
    """A valid spec and where it came from; ``priority`` is the index of its directory (later dirs win)."""

    spec: Spec
    path: Path
    priority: int


@dataclass(frozen=True, kw_only=True)
class ScanResult:
    """The valid specs found, in scan order, and an error for every file or directory that could not be used."""

    specs: tuple[LoadedSpec, ...]
    errors: tuple[CdiError, ...]


def format_for(path: Path) -> SpecFormat:
    """JSON for ``.json`` files, YAML (a superset of JSON) for anything else."""
    return "json" if path.suffix == ".json" else "yaml"


def parse_spec_text(text: str, *, source: str, fmt: SpecFormat) -> Spec:
    """Decode, model and validate one spec document; every error names ``source``."""
    document = _decode_json(text, source=source) if fmt == "json" else _decode_yaml(text, source=source)
    spec = Spec.from_json(document, source=source)
    validate_spec(spec, source=source)
    return spec


def load_spec_file(path: Path) -> Spec:
    """Read and validate one spec file."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise _syntax_error(source=str(path), message=f"not UTF-8 text: {exc}") from exc
    except OSError as exc:
        raise SpecReadError(f"cannot read CDI spec {path}: {exc.strerror or exc}", path=path) from exc
    return parse_spec_text(text, source=str(path), fmt=format_for(path))


def scan_spec_dirs(*, spec_dirs: Sequence[Path]) -> ScanResult:
    """Load every spec file directly in each directory, in order; a missing directory is simply empty."""
    specs: list[LoadedSpec] = []
    errors: list[CdiError] = []
    for priority, spec_dir in enumerate(spec_dirs):
        try:
            # Sorted, as Go's os.ReadDir returns them, so equal-priority scans are deterministic.
            entries = sorted(os.scandir(spec_dir), key=lambda entry: entry.name)
        except FileNotFoundError:
            continue
        except OSError as exc:
            errors.append(SpecReadError(f"cannot read CDI directory {spec_dir}: {exc.strerror or exc}", path=spec_dir))
            continue
        for entry in entries:
            path = Path(entry.path)
            if path.suffix not in SPEC_SUFFIXES or entry.is_dir():
                continue
            try:
                specs.append(LoadedSpec(spec=load_spec_file(path), path=path, priority=priority))
            except CdiError as exc:
                errors.append(exc)
    return ScanResult(specs=tuple(specs), errors=tuple(errors))


def _syntax_error(*, source: str, message: str) -> SpecError:
    return SpecError(source=source, problems=[SpecProblem(json_path="$", rule=message)])


def _reject_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _decode_json(text: str, *, source: str) -> object:
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError too
        raise _syntax_error(source=source, message=f"invalid JSON: {exc}") from exc


def _decode_yaml(text: str, *, source: str) -> object:
    """Parse once (libyaml when PyYAML has it: a base spec of a few hundred devices takes the pure-Python parser most
    of a second, and a runtime reads every spec for every container), check the keys, then build the document."""
    try:
        loader = _YAML_LOADER(text)
        try:
            node = loader.get_single_node()
            _check_yaml_keys(node)
            return loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except (yaml.YAMLError, UnicodeEncodeError) as exc:  # libyaml takes UTF-8: a lone surrogate cannot be encoded
        raise _syntax_error(source=source, message=f"invalid YAML: {exc}") from exc
    except RecursionError as exc:  # an alias inside itself (``&a [*a]``) or nesting deeper than Python's stack
        raise _syntax_error(source=source, message="invalid YAML: nested too deeply (or a recursive alias)") from exc


def _check_yaml_keys(node: yaml.Node | None) -> None:
    """Raise on a mapping with the same key twice (PyYAML would silently keep the last one)."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in seen:
                    raise yaml.YAMLError(f"duplicate key {key.value!r} {key.start_mark}")
                seen.add(key.value)
            _check_yaml_keys(value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_yaml_keys(item)
