"""A new file written whole under a name nobody else can have: the first half of every atomic write here.

``tempfile.mkstemp`` plus a file object cost about 15 µs more per write than these few system calls, and a prepare
writes several files. The unique part is hex (no ``.``), so the writers' temp-file patterns recognise the names:
a random base drawn once per process and a counter, so that a name costs no ``getrandom`` (``O_EXCL`` still
refuses a name taken, and a fresh random part is drawn then).

A file's mode is set exactly, whatever the umask, with an ``fchmod`` after creating it. (Skipping it when the
process owns a umask that leaves the mode whole was tried and taken back: a setgid parent or a default ACL still
changes what ``open`` makes.)
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
