"""Named network namespaces (``/var/run/netns/<name>``) and netlink sockets inside them."""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from pyroute2 import IPRoute

from linuxns.errors import NamespaceError

NETNS_DIR: Final = Path("/var/run/netns")
CLONE_NEWNET: Final = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def netns_path(name: str) -> Path:
    return NETNS_DIR / name


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise NamespaceError(f"ip {' '.join(args)}: {out.stderr.strip()}")


def create_netns(name: str) -> Path:
    """Create a named namespace with loopback up."""
    _ip("netns", "add", name)
    try:
        _ip("-n", name, "link", "set", "lo", "up")
    except NamespaceError:
        delete_netns(name)
        raise
    return netns_path(name)


def delete_netns(name: str) -> None:
    if netns_path(name).exists():
        with contextlib.suppress(NamespaceError):
            _ip("netns", "delete", name)


def list_netns(prefix: str) -> list[str]:
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))


@contextlib.contextmanager
def in_netns(name: str | None) -> Iterator[None]:
    """Run the block with the calling thread inside namespace ``name`` (None: stay where we are)."""
    if name is None:
        yield
        return
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(netns_path(name), os.O_RDONLY)
        try:
            if _libc.setns(target, CLONE_NEWNET) != 0:
                raise NamespaceError(f"setns into {name}: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(target)
        try:
            yield
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:  # pragma: no cover - the kernel refusing our own namespace
                raise NamespaceError(f"setns back from {name}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(own)


@contextlib.contextmanager
def netlink(name: str | None) -> Iterator[IPRoute]:
    """An rtnetlink socket bound to namespace ``name`` (a socket keeps its namespace after creation)."""
    with in_netns(name):
        ipr = IPRoute()
    try:
        yield ipr
    finally:
        ipr.close()
