"""Network namespaces for pod sandboxes, named ``fakedev-<run id>-<suffix>`` so the reaper can find them.

Namespaces are made and removed with iproute2 (``ip netns``), and netlink sockets are opened inside one by switching
only the calling thread (``setns``) — never by forking, which is unsafe in a process that runs gRPC threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from pyroute2 import IPRoute

from harness.errors import ComponentError

NETNS_DIR: Final = Path("/var/run/netns")
MAX_NAME: Final = 64
CLONE_NEWNET: Final = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def netns_name(*, run_id: str, suffix: str) -> str:
    name = f"fakedev-{run_id}-{suffix}"
    if len(name) > MAX_NAME or "/" in name:
        raise ComponentError(f"network namespace name {name!r} is too long or has a '/'")
    return name


def netns_path(name: str) -> Path:
    return NETNS_DIR / name


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise ComponentError(f"ip {' '.join(args)}: {out.stderr.strip()}")


def create_netns(name: str) -> Path:
    """Create a named namespace with loopback up (as a CNI-less sandbox would have)."""
    _ip("netns", "add", name)
    try:
        _ip("-n", name, "link", "set", "lo", "up")
    except ComponentError:
        delete_netns(name)
        raise
    return netns_path(name)


def delete_netns(name: str) -> None:
    if netns_path(name).exists():
        with contextlib.suppress(ComponentError):
            _ip("netns", "delete", name)


def list_netns(prefix: str = "fakedev-") -> list[str]:
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))


def list_run_netns(run_id: str) -> list[str]:
    return list_netns(f"fakedev-{run_id}-")


def clean_run_netns(run_id: str) -> None:
    for name in list_run_netns(run_id):
        delete_netns(name)


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
                raise ComponentError(f"setns into {name}: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(target)
        try:
            yield
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:  # pragma: no cover - the kernel refusing our own ns
                raise ComponentError(f"setns back from {name}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(own)


@contextlib.contextmanager
def netlink(name: str | None) -> Iterator[IPRoute]:
    """An rtnetlink socket bound to namespace ``name`` (the socket keeps its namespace after creation)."""
    with in_netns(name):
        ipr = IPRoute()
    try:
        yield ipr
    finally:
        ipr.close()
