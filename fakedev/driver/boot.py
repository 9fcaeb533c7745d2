"""Which boot of the node this is: what lets a prepare skip the fsync of every file it writes.

Data written without fsync is lost only when the kernel goes down (a power cut, a panic, a reset) — never when the
plugin is killed, since the page cache outlives the process — and the kernel going down always means a new boot ID.
So a claim's files are written without fsync, its record carries the boot they were written in, and a record from
another boot is not trusted: that claim is prepared again from scratch, rewriting every file, before it is
answered. The checkpoint journal keeps its own fsync: it is what a kill -9 is measured against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

BOOT_ID_FILE: Final = Path("/proc/sys/kernel/random/boot_id")
"""A random UUID the kernel makes at each boot (the host's in a container too: the file is not namespaced)."""


def read_boot_id(path: Path = BOOT_ID_FILE) -> str:
    """This boot's ID, or "" when it cannot be read (then every file is fsynced, as before boot IDs were used)."""
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""
