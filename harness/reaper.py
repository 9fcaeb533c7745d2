"""The reaper: removes everything a dead run left behind — processes, containers, namespaces, directories."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path
from typing import Final

from harness import procs
from harness.docker.config import run_of_bridge as docker_run_of_bridge
from harness.docker.daemon import clean_dead_daemon
from harness.realnode.node import remove_bridge, remove_kubepods_cgroups
from harness.realnode.podnetwork import bridge_name, run_of_bridge
from harness.runtime.netns import clean_run_netns, delete_netns, list_netns, netlink, netns_path
from harness.runtime.runc import clean_runc_root

ORPHAN_AGE_SECONDS: Final = 600.0


def _containers(_: str, path: Path) -> None:
    # Node emulators keep one runc root per node below their run directory.
    for root in path.rglob("runc"):
        if root.is_dir():
            clean_runc_root(root)


def _namespaces(run_id: str, _: Path) -> None:
    clean_run_netns(run_id)


def _real_nodes(run_id: str, path: Path) -> None:
    # A real node's shim sockets live outside its run directory (the path must be short); its cgroups in /sys.
    if "-realnode-" in path.name:
        shutil.rmtree(f"/tmp/fd-shim-{run_id}", ignore_errors=True)
        remove_kubepods_cgroups()
        remove_bridge(bridge_name(run_id))


# The private dockerd's clean-up goes first: it unmounts its overlay layers before anything walks the run directory.
CLEANERS: tuple[procs.Cleaner, ...] = (clean_dead_daemon, _containers, _namespaces, _real_nodes)


def _candidates(base: Path, run_id: str) -> list[Path]:
    """Run directories of ``run_id`` under ``base`` and its fd-* directories; other processes create and remove
    those concurrently, so a directory vanishing mid-scan is normal."""
    found: list[Path] = []
    for parent in [base, *_subdirs(base, prefix="fd-")]:
        found += [p for p in _subdirs(parent, prefix="fakedev-") if p.name.endswith(f"-{run_id}")]
    return found


def _subdirs(directory: Path, *, prefix: str) -> list[Path]:
    try:
        with os.scandir(directory) as entries:
            return [Path(e.path) for e in entries if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def _run_alive(run_id: str, *, bases: list[Path]) -> bool:
    for base in bases:
        for path in _candidates(base, run_id):
            with contextlib.suppress(FileNotFoundError):
                if procs.owner_alive(path):
                    return True
    return bool(procs.tagged_pids(run_id))


def reap_orphan_namespaces(*, base: Path | None = None) -> list[str]:
    """Delete ``fakedev-<id>-…`` namespaces whose run is gone (its directory removed after a failed tear-down)."""
    # Look where runs live: the given base, the default one, and the short fd-* directories tests and suites use.
    bases = list(dict.fromkeys([base or procs.default_run_base(), procs.default_run_base()]))
    removed = []
    now = time.time()
    for name in list_netns("fakedev-"):
        parts = name.split("-")
        if len(parts) < 3 or _run_alive(parts[1], bases=bases):
            continue
        # A run makes its namespaces moments before it locks its directory: only long-lived orphans are reaped.
        with contextlib.suppress(FileNotFoundError):
            if now - netns_path(name).stat().st_mtime < ORPHAN_AGE_SECONDS:
                continue
        delete_netns(name)
        removed.append(name)
    return removed


def reap_orphan_bridges(*, base: Path | None = None) -> list[str]:
    """Delete real nodes' pod-network bridges (``fdbr<id>``) and private dockerds' bridges (``fdk<id>``) whose run
    is gone; the CNI plugin makes a bridge only once the first pod starts, long after its run directory exists, and
    a dockerd's bridge is made after its run directory is locked, so no age check is needed."""
    bases = list(dict.fromkeys([base or procs.default_run_base(), procs.default_run_base()]))
    with netlink(None) as ip:
        names = [str(link.get_attr("IFLA_IFNAME")) for link in ip.get_links()]
    removed = []
    for name in names:
        run_id = run_of_bridge(name) or docker_run_of_bridge(name)
        if run_id is None or _run_alive(run_id, bases=bases):
            continue
        if remove_bridge(name):
            removed.append(name)
    return removed


def reap_all(*, base: Path | None = None) -> list[str]:
    """Reap every dead run under ``base`` with every cleaner, then orphaned namespaces and bridges; returns the
    reaped run ids."""
    reaped = procs.reap(base=base, cleaners=CLEANERS)
    reap_orphan_namespaces(base=base)
    reap_orphan_bridges(base=base)
    return reaped
