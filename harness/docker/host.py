"""What a private dockerd leaves on the host, made and removed: its bridge (deleted with the real node's
``remove_bridge``), the mounts below its run directory, its containers' cgroups. Every removal here is idempotent:
the daemon's own stop and the reaper both call them."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import ipaddress
import os
import signal
from pathlib import Path
from typing import Final

from pyroute2.netlink.exceptions import NetlinkError

from harness.errors import DockerUnsupportedError
from harness.procs import wait_for
from harness.runtime.netns import netlink

CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
_MNT_DETACH: Final = 2


def add_bridge(*, name: str, address: ipaddress.IPv4Interface) -> None:
    """Create the bridge dockerd attaches containers to, with the gateway address, up."""
    try:
        with netlink(None) as ip:
            ip.link("add", ifname=name, kind="bridge")
            index = ip.link_lookup(ifname=name)[0]
            ip.addr("add", index=index, address=str(address.ip), prefixlen=address.network.prefixlen)
            ip.link("set", index=index, state="up")
    except NetlinkError as exc:
        if exc.code in (errno.EPERM, errno.EOPNOTSUPP):
            raise DockerUnsupportedError(f"the kernel refused a bridge ({name}): {exc}") from exc
        raise


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal (\040 …).
    return field.encode().decode("unicode_escape").encode("latin-1").decode(errors="replace")


def mounts_below(root: Path) -> list[Path]:
    """Mount points at or below ``root`` in this mount namespace, deepest first."""
    prefix = str(root).rstrip("/")
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = _unescape(line.split(" ")[4])
        if point == prefix or point.startswith(prefix + "/"):
            found.append(Path(point))
    return sorted(set(found), key=lambda p: (-len(p.parts), str(p)))


def unmount_below(root: Path) -> int:
    """Detach every mount at or below ``root`` (overlay layers, shm, network namespace files); returns how many."""
    libc = ctypes.CDLL(None, use_errno=True)
    count = 0
    for point in mounts_below(root):
        if libc.umount2(os.fsencode(point), _MNT_DETACH) == 0:
            count += 1
    return count


def _hierarchies() -> list[Path]:
    """cgroup v1's per-controller hierarchies, or v2's one tree."""
    if not CGROUP_ROOT.is_dir():
        return []
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    return [p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink()]


def cgroup_dirs(parent: str) -> list[Path]:
    """Every cgroup at or below ``parent`` in every hierarchy, deepest first."""
    dirs: list[Path] = []
    for hierarchy in _hierarchies():
        top = hierarchy / parent
        if top.is_dir():
            dirs += [top, *(p for p in top.rglob("*") if p.is_dir())]
    return sorted(dirs, key=lambda p: (-len(p.parts), str(p)))


def cgroup_pids(parent: str) -> set[int]:
    pids: set[int] = set()
    for directory in cgroup_dirs(parent):
        with contextlib.suppress(OSError):
            pids |= {int(p) for p in (directory / "cgroup.procs").read_text().split()}
    return pids


def remove_cgroups(parent: str, *, timeout: float = 15.0) -> None:
    """Kill whatever still runs in the cgroups (containers a dead daemon left running) and remove them."""
    for pid in cgroup_pids(parent):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not cgroup_pids(parent), timeout=timeout, what=f"the processes of cgroup {parent} to exit")
    for directory in cgroup_dirs(parent):
        with contextlib.suppress(FileNotFoundError):
            directory.rmdir()
