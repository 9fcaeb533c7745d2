"""The reaper: removes everything a dead run left behind — processes, containers, namespaces, directories."""

from __future__ import annotations

from pathlib import Path

from harness import procs
from harness.runtime.netns import clean_run_netns
from harness.runtime.runc import clean_runc_root


def _containers(_: str, path: Path) -> None:
    # Node emulators keep one runc root per node below their run directory.
    for root in path.rglob("runc"):
        if root.is_dir():
            clean_runc_root(root)


def _namespaces(run_id: str, _: Path) -> None:
    clean_run_netns(run_id)


CLEANERS: tuple[procs.Cleaner, ...] = (_containers, _namespaces)


def reap_all(*, base: Path | None = None) -> list[str]:
    """Reap every dead run under ``base`` with every cleaner; returns the reaped run ids."""
    return procs.reap(base=base, cleaners=CLEANERS)
