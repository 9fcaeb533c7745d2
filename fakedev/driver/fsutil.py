"""Files the plugin makes: crash-safe writes, directories and files with explicit modes, leftover temp files.

Crash-safe writes go to a temp file in the same directory (``.<name>.<random>.tmp``), are fsynced and renamed over
the target; the directory is fsynced so the rename survives a crash. A process killed between creating the temp
file and renaming it leaves the temp file behind; :func:`remove_temp_files` collects them (the plugin does it at
start-up, under the lock every instance takes before touching files).

Modes never depend on the caller's umask (the process-wide setting would leave a spec directory world-writable
under ``umask 000``): directories are made with ``mkdir`` and then ``chmod``-ed, files are opened with a mode and
``fchmod``-ed. Only what this code creates gets a mode; a directory that already exists keeps its own.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Final

from cdi.files import write_new_temp_file

DIR_MODE: Final = 0o755
"""Directories others (the runtime, inspection tools, a container's bind mount) read."""
PRIVATE_DIR_MODE: Final = 0o750
FILE_MODE: Final = 0o644
PRIVATE_FILE_MODE: Final = 0o600
TEMP_SUFFIX: Final = ".tmp"
_TEMP_RANDOM: Final = re.compile(r"^[A-Za-z0-9_]+$")
"""What a temp file's name has between prefix and suffix (hex from :mod:`cdi.files`; older ones: ``mkstemp``'s)."""

VOLATILE_FS_TYPES: Final = frozenset({"tmpfs", "ramfs"})
"""File systems a power cut empties (a node's /var/run/cdi is one)."""

BeforeRename = Callable[[Path], None]
"""Called with the temp file once it is written and fsynced, before the rename (crash points use it)."""


def make_dirs(path: Path, *, mode: int) -> None:
    """Create ``path`` and its missing parents, each with exactly ``mode``; existing directories are left alone.

    ``mkdir`` first, parents only when it says they are missing: a prepare makes a new claim directory under an
    existing root, and a ``stat`` of every level first cost more than the directories themselves."""
    try:
        path.mkdir(mode=mode)
    except FileExistsError:
        return  # there already (or made meanwhile by another instance: theirs, with their mode)
    except FileNotFoundError:
        if path.parent == path:
            raise
        make_dirs(path.parent, mode=mode)
        try:
            path.mkdir(mode=mode)
        except FileExistsError:
            return
    path.chmod(mode)  # mkdir's mode went through the umask


def make_new_dirs(path: Path, *, below: Path, mode: int) -> None:
    """Create ``path`` and the directories between it and ``below`` (which should exist), top down, each with
    exactly ``mode``; existing ones are left alone. For a tree a prepare makes new (a claim's metadata directory):
    one ``mkdir`` per level, where trying the file first and :func:`make_dirs` bottom up took two more calls."""
    levels = [path]
    while levels[-1].parent != below and levels[-1].parent != levels[-1]:
        levels.append(levels[-1].parent)
    for level in reversed(levels):
        try:
            level.mkdir(mode=mode)
        except FileExistsError:
            continue
        except FileNotFoundError:
            make_dirs(path, mode=mode)  # ``below`` is missing too: the general way
            return
        level.chmod(mode)  # mkdir's mode went through the umask (and a setgid parent's bit)


def write_new_file(path: Path, data: bytes, *, mode: int) -> None:
    """Write ``path`` (created or truncated) with exactly ``mode``; not crash-safe, for files nobody reads mid-write."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)


def open_lock_file(path: Path) -> int:
    """Open (creating it 0600) a lock file; returns the descriptor, which the caller closes."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def atomic_write(
    path: Path,
    data: bytes,
    *,
    mode: int = FILE_MODE,
    dir_mode: int = DIR_MODE,
    sync: bool = True,
    durable: bool = True,
    before_rename: BeforeRename | None = None,
) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file, never a torn one.

    Missing parent directories are made with ``dir_mode``. ``sync=False``: the caller fsyncs the directory once
    after several writes (:func:`fsync_dir`). ``durable=False``: no fsync at all — for files whose loss in a power
    cut is noticed and repaired (a process crash cannot tear them either way: the rename is atomic)."""
    directory, prefix = str(path.parent), f".{path.name}."
    try:
        tmp_name = write_new_temp_file(directory, prefix=prefix, suffix=TEMP_SUFFIX, data=data, mode=mode, sync=durable)
    except FileNotFoundError:  # the directory is made on first use: one failed open is cheaper than a stat each time
        make_dirs(path.parent, mode=dir_mode)
        tmp_name = write_new_temp_file(directory, prefix=prefix, suffix=TEMP_SUFFIX, data=data, mode=mode, sync=durable)
    tmp = Path(tmp_name)
    try:
        if before_rename is not None:
            before_rename(tmp)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync and durable:
        fsync_dir(path.parent)


def compute_fs_type(mountinfo: str, *, path: str) -> str:
    """The type of the file system holding ``path`` (absolute, resolved), from ``/proc/self/mountinfo`` (pure):
    the mount with the longest mount point that contains it; "" when none does."""
    best, found = -1, ""
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:] or len(fields) < 5:
            continue
        point = fields[4].encode().decode("unicode_escape")  # mountinfo escapes spaces and such as \040
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best:
            best, found = len(point), fields[fields.index("-", 6) + 1]
    return found


def is_volatile_dir(path: Path) -> bool:
    """Whether ``path`` lives on a file system a power cut empties (tmpfs, ramfs)."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return False  # cannot tell: treat as durable, which only costs fsyncs
    return compute_fs_type(mountinfo, path=str(path.resolve())) in VOLATILE_FS_TYPES


def temp_file_target(name: str) -> str | None:
    """The file name a temp file of :func:`atomic_write` was made for, or None if ``name`` is not one."""
    if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
        return None
    target, dot, random = name[1 : -len(TEMP_SUFFIX)].rpartition(".")
    return target if dot and target and _TEMP_RANDOM.match(random) else None


def remove_temp_files(directory: Path, *, target: str) -> list[Path]:
    """Remove the temp files a crashed :func:`atomic_write` of ``directory/target`` left; returns them."""
    removed: list[Path] = []
    try:
        entries = sorted(directory.iterdir())
    except FileNotFoundError:
        return removed
    for entry in entries:
        if temp_file_target(entry.name) == target:
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
                removed.append(entry)
    return removed


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_known_tree(directory: Path, *, files: tuple[Path, ...]) -> None:
    """Remove ``files`` (inside ``directory``) and the directories holding them, bottom up, without walking the
    tree; a directory holding anything else (a file nobody recorded, an older plugin's layout) is walked and
    removed whole. Walking (``shutil.rmtree``: a scan and an open per directory, in Python) cost a claim's
    metadata directory 0.2 ms; this is three system calls for a claim with one request."""
    try:
        for f in files:
            f.unlink(missing_ok=True)
        for parent in dict.fromkeys(f.parent for f in files):
            if parent != directory:
                parent.rmdir()
        directory.rmdir()
    except FileNotFoundError:
        if directory.exists():
            shutil.rmtree(directory, ignore_errors=True)
    except OSError:
        shutil.rmtree(directory, ignore_errors=True)
