"""Writing and removing spec files in a CDI directory, atomically and only inside that directory.

A runtime may scan the directory at any moment, so a spec file must appear whole or not at all: we validate, write a
hidden temp file in the same directory (:mod:`cdi.files`; same filesystem, so the rename is atomic; not
``.json``/``.yaml``, so scanners skip it), fsync it, rename it over the target and fsync the directory so the rename
survives a crash (both fsyncs are skipped with ``durable=False``, for callers that detect a power cut otherwise).
File names come from the caller and must be plain names: anything that could land outside the directory is refused.

A writer killed between creating the temp file and the rename leaves it behind; :func:`remove_temp_files` collects
the ones made for a writer's own spec names. A CDI directory (and its missing parents) is created 0755 whatever the
umask: runtimes apply its specs as root, so nobody else may be able to add one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

import orjson
import yaml

from cdi.errors import PathEscapeError, WriteError
from cdi.files import write_new_temp_file
from cdi.loader import SPEC_SUFFIXES, format_for
from cdi.spec import Spec
from cdi.validate import validate_spec
from cdi.yamltext import render_block_yaml

SPEC_FILE_MODE = 0o644  # runtimes read specs as root, but inspection tools often do not
CDI_DIR_MODE = 0o755
_TEMP_SUFFIX = ".tmp"

# Called with the temp file's path after it is written and fsynced, before the rename; lets tests stop there.
BeforeRename = Callable[[Path], None]

# The safe dumper, in C when PyYAML was built with libyaml (a node-wide spec is large).
_YAML_DUMPER: Final[type[yaml.SafeDumper] | type[yaml.CSafeDumper]] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def render_spec_text(spec: Spec, *, path: Path) -> str:
    """The file content for ``spec``: JSON for ``.json``, YAML otherwise, opening with ``---`` as the reference
    library's YAML files do (pure)."""
    document = spec.to_json()
    if format_for(path) == "json":
        return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n"
    fast = render_block_yaml(document)
    if fast is not None:
        return fast
    return yaml.dump(document, Dumper=_YAML_DUMPER, sort_keys=False, explicit_start=True)


def _check_plain_name(name: str, *, what: str) -> None:
    # A leading "." is reserved for our temp files, so a spec can never be mistaken for (or removed as) one.
    if not name or name in (".", "..") or name.startswith(".") or "/" in name or "\0" in name:
        raise PathEscapeError(f"{what} {name!r} must be a plain, non-hidden file name inside the CDI directory")


def _target(*, cdi_dir: Path, file_name: str) -> Path:
    # A plain name is a direct child of the directory; a symlink of that name is replaced or unlinked itself
    # (rename and unlink never follow it), so no write or removal can land outside.
    _check_plain_name(file_name, what="spec file name")
    return cdi_dir / file_name


def _make_dirs(path: Path) -> None:
    """``path`` and its missing parents, each exactly :data:`CDI_DIR_MODE` (``mkdir`` alone obeys the umask)."""
    missing: list[Path] = []
    here = path
    while not here.is_dir() and here.parent != here:
        missing.append(here)
        here = here.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=CDI_DIR_MODE)
        except FileExistsError:
            continue
        directory.chmod(CDI_DIR_MODE)


def _temp_prefix(file_name: str) -> str:
    return f".{file_name}."


def _write_temp(directory: str, *, file_name: str, data: bytes, durable: bool) -> str:
    return write_new_temp_file(
        directory, prefix=_temp_prefix(file_name), suffix=_TEMP_SUFFIX, data=data, mode=SPEC_FILE_MODE, sync=durable
    )


def _temp_owner(name: str) -> str | None:
    """The spec file name a temp file was made for (``.<file>.<random>.tmp``), or None if it is not one of ours."""
    if not (name.startswith(".") and name.endswith(_TEMP_SUFFIX)):
        return None
    owner, dot, _random = name[1 : -len(_TEMP_SUFFIX)].rpartition(".")  # the random part has no "."
    return owner if dot and owner else None


def sync_dir(directory: Path) -> None:
    """Make renames and unlinks in ``directory`` durable (what ``sync=False`` callers do once for many files)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise WriteError(f"cannot fsync CDI directory {directory}: {exc}") from exc


def write_spec(
    *,
    spec: Spec,
    cdi_dir: Path,
    file_name: str,
    before_rename: BeforeRename | None = None,
    sync: bool = True,
    durable: bool = True,
) -> Path:
    """Validate ``spec`` and write it atomically as ``cdi_dir/file_name`` (mode 0644); returns the path written.

    ``sync=False`` leaves the directory fsync to the caller (:func:`sync_dir`), who writes several files and makes
    them durable together. ``durable=False``: no fsync at all, for a caller that can tell a file a power cut may
    have emptied (a spec is still never seen half-written: the rename is atomic).
    """
    target = _target(cdi_dir=cdi_dir, file_name=file_name)
    if target.suffix not in SPEC_SUFFIXES:
        raise WriteError(f"spec file name {file_name!r} must end in .json or .yaml, or runtimes will not read it")
    validate_spec(spec, source=str(target))
    data = render_spec_text(spec, path=target).encode()
    directory = str(cdi_dir)
    try:
        try:
            temp_name = _write_temp(directory, file_name=file_name, data=data, durable=durable)
        except FileNotFoundError:  # the directory is made on first use (or after a hand removed it)
            _make_dirs(cdi_dir)
            temp_name = _write_temp(directory, file_name=file_name, data=data, durable=durable)
    except OSError as exc:
        raise WriteError(f"cannot write a temp file in CDI directory {cdi_dir}: {exc}") from exc
    temp = Path(temp_name)
    try:
        if before_rename is not None:
            before_rename(temp)
        temp.replace(target)
    except OSError as exc:
        _discard(temp)
        raise WriteError(f"cannot write CDI spec {target}: {exc}") from exc
    except BaseException:
        _discard(temp)
        raise
    if sync and durable:
        sync_dir(cdi_dir)
    return target


def _discard(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise WriteError(f"cannot remove CDI spec {path}: {exc}") from exc
    return True


def _list_names(cdi_dir: Path) -> list[str]:
    try:
        return sorted(entry.name for entry in cdi_dir.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise WriteError(f"cannot list CDI directory {cdi_dir}: {exc}") from exc


def remove_spec(*, cdi_dir: Path, file_name: str, sync: bool = True, collect_temps: bool = True) -> bool:
    """Remove ``cdi_dir/file_name`` and temp files a crashed write of it left; False if it was already gone.

    ``collect_temps=False``: the caller collects temp files otherwise (at start-up), so the directory — whose size
    grows with the claims held — is not listed."""
    target = _target(cdi_dir=cdi_dir, file_name=file_name)
    removed = _unlink(target)
    for name in _list_names(cdi_dir) if collect_temps else ():
        if _temp_owner(name) == file_name:
            _unlink(cdi_dir / name)
    if removed and sync:
        sync_dir(cdi_dir)
    return removed


def remove_temp_files(*, cdi_dir: Path, prefix: str) -> tuple[Path, ...]:
    """Remove the temp files crashed writes of ``<prefix>*`` specs left (never a spec, never another writer's
    temp files); returns what was removed. The caller must make sure no write of those names is under way."""
    _check_plain_name(prefix, what="spec file prefix")
    removed: list[Path] = []
    for name in _list_names(cdi_dir):
        owner = _temp_owner(name)
        if owner is not None and owner.startswith(prefix) and _unlink(cdi_dir / name):
            removed.append(cdi_dir / name)
    return tuple(removed)


def remove_specs_with_prefix(
    *, cdi_dir: Path, prefix: str, suffix: str = ".json", sync: bool = True
) -> tuple[Path, ...]:
    """Remove every ``<prefix>*<suffix>`` spec file (and its write leftovers); returns the spec files removed.

    The prefix is matched literally (no glob characters), so it can come from IDs without escaping.
    """
    _check_plain_name(prefix, what="spec file prefix")
    removed: list[Path] = []
    for name in _list_names(cdi_dir):
        owner = _temp_owner(name)
        if owner is not None and owner.startswith(prefix) and owner.endswith(suffix):
            _unlink(cdi_dir / name)
        elif name.startswith(prefix) and name.endswith(suffix) and _unlink(cdi_dir / name):
            removed.append(cdi_dir / name)
    if removed and sync:
        sync_dir(cdi_dir)
    return tuple(removed)
