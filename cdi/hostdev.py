"""What a runtime learns about a host device node by stat-ing it (the injector's only I/O, swappable in tests)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class HostDevice:
    """A host device node: ``type`` is ``b``, ``c`` or ``p``; ``file_mode`` the permission bits."""

    type: str
    major: int
    minor: int
    file_mode: int


# Takes a host path; raises OSError when it is missing or not a device node.
StatDevice = Callable[[str], HostDevice]


def stat_host_device(path: str) -> HostDevice:
    """Stat ``path`` without following a final symlink, as runtimes do (a symlink is not a device node)."""
    info = os.lstat(path)
    if stat.S_ISBLK(info.st_mode):
        kind = "b"
    elif stat.S_ISCHR(info.st_mode):
        kind = "c"
    elif stat.S_ISFIFO(info.st_mode):
        kind = "p"
    else:
        raise OSError(errno.ENODEV, "not a device node", path)
    return HostDevice(
        type=kind,
        major=os.major(info.st_rdev),
        minor=os.minor(info.st_rdev),
        file_mode=stat.S_IMODE(info.st_mode),
    )
