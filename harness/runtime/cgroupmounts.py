"""Writable cgroup mounts for runc inside a container.

Docker mounts a container's own cgroups read-only at ``/sys/fs/cgroup/<controller>`` unless the container is
privileged (which this project never asks for). runc, run by the node emulator inside the container, must create a
cgroup per pod container below them; with CAP_SYS_ADMIN the container may remount its own view read-write. Only the
container's own subtree is visible there, so nothing of the host's cgroups becomes writable; the pod containers'
cgroups end up below the container's, and go with it.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Final

from harness.errors import ComponentError

CGROUP_ROOT: Final = "/sys/fs/cgroup"
_MS_RDONLY: Final = 1
_MS_NOSUID: Final = 2
_MS_NODEV: Final = 4
_MS_NOEXEC: Final = 8
_MS_REMOUNT: Final = 32
_MS_BIND: Final = 4096
_FLAGS: Final = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC}


def read_only_cgroup_mounts(mountinfo: str) -> list[tuple[str, int]]:
    """(mount point, flags to keep) of every read-only cgroup mount below :data:`CGROUP_ROOT` (pure)."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        separator = fields.index("-")
        point, options, fstype = fields[4], fields[5].split(","), fields[separator + 1]
        if fstype in ("cgroup", "cgroup2") and point.startswith(CGROUP_ROOT) and "ro" in options:
            found.append((point, sum(flag for name, flag in _FLAGS.items() if name in options)))
    return found


def make_cgroups_writable(*, mountinfo: Path = Path("/proc/self/mountinfo")) -> list[str]:
    """Remount read-only cgroup mounts read-write (a no-op outside a container); returns the mount points changed."""
    libc = ctypes.CDLL(None, use_errno=True)
    changed = []
    for point, keep in read_only_cgroup_mounts(mountinfo.read_text()):
        flags = _MS_REMOUNT | _MS_BIND | keep
        if libc.mount(None, os.fsencode(point), None, flags, None) != 0:
            err = ctypes.get_errno()
            raise ComponentError(
                f"cannot make {point} writable for runc ({os.strerror(err)}): the container needs CAP_SYS_ADMIN "
                "(docs/testcontainers.md)"
            )
        changed.append(point)
    return changed
