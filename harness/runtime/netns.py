"""Network namespaces for pod sandboxes, named ``fakedev-<run id>-<suffix>`` so the reaper can find them."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Final

from pyroute2 import NetNS, netns

from harness.errors import ComponentError

NETNS_DIR: Final = Path("/var/run/netns")
MAX_NAME: Final = 64


def netns_name(*, run_id: str, suffix: str) -> str:
    name = f"fakedev-{run_id}-{suffix}"
    if len(name) > MAX_NAME or "/" in name:
        raise ComponentError(f"network namespace name {name!r} is too long or has a '/'")
    return name


def netns_path(name: str) -> Path:
    return NETNS_DIR / name


def create_netns(name: str) -> Path:
    """Create a named namespace with loopback up (as a CNI-less sandbox would have)."""
    try:
        netns.create(name)
        with NetNS(name) as ns:
            (lo,) = ns.link_lookup(ifname="lo")
            ns.link("set", index=lo, state="up")
    except OSError as exc:
        with contextlib.suppress(OSError):
            netns.remove(name)
        raise ComponentError(f"cannot create network namespace {name}: {exc}") from exc
    return netns_path(name)


def delete_netns(name: str) -> None:
    with contextlib.suppress(FileNotFoundError, OSError):
        netns.remove(name)


def list_run_netns(run_id: str) -> list[str]:
    prefix = f"fakedev-{run_id}-"
    return sorted(n for n in netns.listnetns() if n.startswith(prefix))


def clean_run_netns(run_id: str) -> None:
    for name in list_run_netns(run_id):
        delete_netns(name)
