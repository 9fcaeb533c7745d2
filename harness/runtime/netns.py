"""Pod sandboxes' network namespaces, named ``fakedev-<run id>-<suffix>`` so the reaper can find them."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from harness.errors import ComponentError
from linuxns import NamespaceError, delete_netns, in_netns, list_netns, netlink, netns_path
from linuxns import create_netns as _create

MAX_NAME: Final = 64

__all__ = [
    "clean_run_netns",
    "create_netns",
    "delete_netns",
    "in_netns",
    "list_netns",
    "list_run_netns",
    "netlink",
    "netns_name",
    "netns_path",
]


def netns_name(*, run_id: str, suffix: str) -> str:
    name = f"fakedev-{run_id}-{suffix}"
    if len(name) > MAX_NAME or "/" in name:
        raise ComponentError(f"network namespace name {name!r} is too long or has a '/'")
    return name


def create_netns(name: str) -> Path:
    try:
        return _create(name)
    except NamespaceError as exc:
        raise ComponentError(str(exc)) from exc


def list_run_netns(run_id: str) -> list[str]:
    return list_netns(f"fakedev-{run_id}-")


def clean_run_netns(run_id: str) -> None:
    for name in list_run_netns(run_id):
        delete_netns(name)
