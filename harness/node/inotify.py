"""Linux inotify on one directory, read from the event loop — how the kubelet's plugin watcher learns of sockets.

Polling cannot see a socket deleted and re-created between two looks when the kernel hands the new file the same
inode number; inotify reports the ``IN_CREATE`` itself.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from harness.errors import ComponentError

IN_CREATE: Final = 0x100
IN_DELETE: Final = 0x200
IN_MOVED_FROM: Final = 0x40
IN_MOVED_TO: Final = 0x80
IN_NONBLOCK: Final = 0o4000
IN_CLOEXEC: Final = 0o2000000
_HEADER: Final = struct.Struct("iIII")
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(kw_only=True)
class DirectoryWatch:
    """Calls ``on_event(name, created)`` for every entry created/moved in (True) or deleted/moved out (False)."""

    directory: Path
    on_event: Callable[[str, bool], None]
    fd: int = field(default=-1, init=False)

    def open(self) -> int:
        fd = int(_libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC))
        if fd < 0:
            raise ComponentError(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        mask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
        if _libc.inotify_add_watch(fd, str(self.directory).encode(), mask) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise ComponentError(f"inotify_add_watch {self.directory}: {os.strerror(err)}")
        self.fd = fd
        return fd

    def read(self) -> None:
        """Drain pending events (call when the fd is readable)."""
        try:
            data = os.read(self.fd, 64 * 1024)
        except BlockingIOError:
            return
        offset = 0
        while offset + _HEADER.size <= len(data):
            _, mask, _, length = _HEADER.unpack_from(data, offset)
            raw = data[offset + _HEADER.size : offset + _HEADER.size + length]
            offset += _HEADER.size + length
            name = raw.split(b"\0", 1)[0].decode(errors="replace")
            if name:
                self.on_event(name, bool(mask & (IN_CREATE | IN_MOVED_TO)))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
