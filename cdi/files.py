"""A new file written whole under a name nobody else can have: the first half of every atomic write here.

``tempfile.mkstemp`` plus a file object cost about 15 µs more per write than these few system calls, and a prepare
writes several files. The unique part is hex (no ``.``), so the writers' temp-file patterns recognise the names:
a random base drawn once per process and a counter, so that a name costs no ``getrandom`` (``O_EXCL`` still
refuses a name taken, and a fresh random part is drawn then).

A file's mode is set exactly, whatever the umask: with an ``fchmod`` after creating it, unless the process set its
umask itself (:func:`set_umask`, as ``fakedev plugin`` does at start) and the mode passes through it unchanged —
then the system call is skipped (a prepare made five of them).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
from pathlib import Path
from typing import Final

_ATTEMPTS: Final = 100
_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
_BASE: Final = secrets.token_hex(3)
_COUNTER: Final = itertools.count()  # next() on it is atomic under the GIL
_known_umask: int | None = None
"""The umask this process set itself (:func:`set_umask`); None: unknown (inherited, may change), chmod always."""


def set_umask(mask: int) -> None:
    """Set the process's umask and remember it, so modes it leaves whole need no chmod (a process that owns its
    umask: the plugin). Nothing else in the process may change the umask afterwards."""
    global _known_umask  # process-wide by nature, like the umask itself
    os.umask(mask)
    _known_umask = mask


def needs_chmod(mode: int) -> bool:
    """Whether a file or directory created with ``mode`` must be chmodded to have exactly ``mode``."""
    return _known_umask is None or bool(mode & _known_umask)


def unique_part() -> str:
    """Hex no other call of this process returns (and, with the random base, most likely no other process)."""
    return f"{_BASE}{next(_COUNTER):x}"


def write_new_temp_file(directory: str, *, prefix: str, suffix: str, data: bytes, mode: int, sync: bool) -> str:
    """Create ``directory/<prefix><unique><suffix>`` (never an existing file), holding ``data`` with exactly
    ``mode`` whatever the umask, fsynced when ``sync``; returns its path. On any error nothing is left behind
    (a missing ``directory`` raises FileNotFoundError: the caller makes it and tries again)."""
    unique = unique_part()
    for _ in range(_ATTEMPTS):
        path = f"{directory}/{prefix}{unique}{suffix}"
        try:
            fd = os.open(path, _FLAGS, mode)
        except FileExistsError:
            unique = secrets.token_hex(5)  # taken (another process's, or left by a crash): draw one at random
            continue
        try:
            if needs_chmod(mode):
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                Path(path).unlink()
            raise
        os.close(fd)
        return path
    raise FileExistsError(f"no free temp file name for {prefix}*{suffix} in {directory}")
