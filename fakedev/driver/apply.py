"""Carry out a prepare or unprepare plan on the node (I/O only; every decision is in the plan).

Prepare order: NICs configured in the node's namespace, fake device nodes, mdevs, the node's base spec if it is
gone (releases that have one), the claim's CDI spec, each request's metadata file and the spec that mounts it,
then the directories fsynced once. Files are written with
their data fsynced but not their directories, since one directory fsync at the end makes every rename durable
(later ones would find nothing left to commit). The checkpoint is not written here: the caller records the claim
only after this and the status write succeeded.

Every directory and file made here gets an explicit mode (:mod:`fakedev.driver.fsutil`), whatever the umask. The
crash switch (:mod:`fakedev.driver.crash`) is passed between the steps so the torture tool can kill the plugin there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Final

import cdi
from fakedev import sysfs
from fakedev.driver import cdi_edits, metadata
from fakedev.driver.crash import CrashPoint, CrashSwitch
from fakedev.driver.fsutil import DIR_MODE, atomic_write, fsync_dir, make_dirs, make_new_dirs, remove_known_tree
from fakedev.driver.plan import PreparePlan, SpecFile, UnpreparePlan
from fakedev.driver.trash import Trash
from fakedev.nics import host as nic_host

FAKE_NODE_MODE: Final = 0o660
"""Only root (the runtime) opens the stand-ins on the host; containers get the mode the CDI spec gives them."""
UNARMED: Final = CrashSwitch()
"""The switch of callers that arm no crash point (never counts: nothing is armed)."""


def ensure_fake_node(path: Path) -> None:
    """Create a harmless char device (1:3) standing in for a vendor device node, mode 0660; idempotent."""
    if path.exists():
        return
    make_dirs(path.parent, mode=DIR_MODE)
    with contextlib.suppress(FileExistsError):
        os.mknod(path, FAKE_NODE_MODE | stat.S_IFCHR, os.makedev(cdi_edits.SAFE_MAJOR, cdi_edits.SAFE_MINOR))
        path.chmod(FAKE_NODE_MODE)  # mknod's mode went through the umask


def apply_prepare_plan(
    plan: PreparePlan,
    *,
    nic_netns: str | None,
    sysfs_root: Path | None,
    crash: CrashSwitch = UNARMED,
    reuse_dir: Callable[[Path], bool] | None = None,
) -> None:
    """``nic_netns``: the node namespace holding the NICs (None: ours); ``sysfs_root``: None, no mdevs to create;
    ``reuse_dir``: puts an emptied claim directory in place as a request directory (:meth:`Trash.reuse`), True
    when it did (None: directories are always made)."""
    for nic in plan.nics:
        nic_host.configure(nic_netns, nic.assignment)
    crash.reached(CrashPoint.PREPARE_AFTER_NICS)
    for node in plan.fake_nodes:
        ensure_fake_node(node)
    crash.reached(CrashPoint.PREPARE_AFTER_DEVICE_NODES)
    if sysfs_root is not None:
        for mdev in plan.mdevs:
            sysfs.create_mdev(
                sysfs_root, parents=mdev.parents, mdev_type=mdev.mdev_type, uuid=mdev.uuid, iommu_group=mdev.iommu_group
            )
    if plan.base_spec is not None and not (plan.cdi_dir / plan.base_spec.file_name).exists():
        write_base_spec(plan.base_spec, cdi_dir=plan.cdi_dir, sync=False)  # gone since start-up (a reboot, a hand)
    if plan.claim_spec is not None:
        cdi.write_spec(
            spec=plan.claim_spec.spec,
            cdi_dir=plan.cdi_dir,
            file_name=plan.claim_spec.file_name,
            sync=False,
            durable=plan.durable,
            before_rename=crash.before_rename(CrashPoint.PREPARE_CLAIM_SPEC_TEMP),
        )
    crash.reached(CrashPoint.PREPARE_AFTER_CLAIM_SPEC)
    for index, f in enumerate(plan.metadata_files):
        # <metadata root>/<claim>/<request>/: new for a claim prepared the first time, made before the file is tried
        # (the first request's from a spare when there is one).
        request_dir = f.path.parent
        if index or reuse_dir is None or not reuse_dir(request_dir):
            make_new_dirs(request_dir, below=request_dir.parent.parent, mode=DIR_MODE)
        atomic_write(
            f.path,
            f.data,
            sync=False,
            durable=plan.durable,
            before_rename=crash.before_rename(CrashPoint.PREPARE_METADATA_TEMP),
        )
        crash.reached(CrashPoint.PREPARE_AFTER_METADATA_FILE)
        cdi.write_spec(
            spec=f.spec.spec,
            cdi_dir=plan.cdi_dir,
            file_name=f.spec.file_name,
            sync=False,
            durable=plan.durable,
            before_rename=crash.before_rename(CrashPoint.PREPARE_METADATA_SPEC_TEMP),
        )
        crash.reached(CrashPoint.PREPARE_AFTER_METADATA_SPEC)
    for directory in plan.sync_dirs:
        fsync_dir(directory)
    crash.reached(CrashPoint.PREPARE_AFTER_SYNC)


def write_base_spec(spec: SpecFile, *, cdi_dir: Path, sync: bool = True) -> None:
    """Write (or replace) the node-wide base spec atomically; its devices' fake nodes are made by each prepare."""
    cdi.write_spec(spec=spec.spec, cdi_dir=cdi_dir, file_name=spec.file_name, sync=sync)


def apply_unprepare_plan(
    plan: UnpreparePlan,
    *,
    nic_netns: str | None,
    sysfs_root: Path | None,
    crash: CrashSwitch = UNARMED,
    trash: Trash | None = None,
) -> None:
    """``trash``: where the claim's metadata directory goes, to be deleted behind (None: deleted here)."""
    # Temp files of writes a crash cut short are collected at start-up: no listing of the CDI directory here.
    for name in plan.claim_spec_files:
        cdi.remove_spec(cdi_dir=plan.cdi_dir, file_name=name, sync=False, collect_temps=False)
    crash.reached(CrashPoint.UNPREPARE_AFTER_CLAIM_SPEC)
    if plan.metadata_spec_files is not None:
        for name in plan.metadata_spec_files:
            cdi.remove_spec(cdi_dir=plan.cdi_dir, file_name=name, sync=False, collect_temps=False)
    else:  # no record: whatever a prepare that died before recording wrote, found by the claim's prefix
        cdi.remove_specs_with_prefix(cdi_dir=plan.cdi_dir, prefix=plan.metadata_spec_prefix, sync=False)
    crash.reached(CrashPoint.UNPREPARE_AFTER_METADATA_SPECS)
    if plan.metadata_dir is not None:
        files = plan.metadata_files
        if trash is None:
            remove_known_tree(plan.metadata_dir, files=files)
        else:
            trash.discard(plan.metadata_dir, files=files)
    if plan.legacy_metadata_dir is not None and _belongs_to(plan.legacy_metadata_dir, uid=plan.uid):
        shutil.rmtree(plan.legacy_metadata_dir, ignore_errors=True)
    crash.reached(CrashPoint.UNPREPARE_AFTER_METADATA_DIR)
    for directory in plan.sync_dirs:
        if directory.is_dir():
            fsync_dir(directory)
    if sysfs_root is not None:
        for uuid in plan.mdevs:
            sysfs.remove_mdev(sysfs_root, uuid=uuid)
    for nic in plan.nics:
        # Back in the node's namespace (the runtime moved it out of the pod): hardware MAC and MTU, no addresses.
        nic_host.reset(nic_netns, host_ifname=nic.assignment.host_ifname, mac=nic.hardware_mac, mtu=nic.hardware_mtu)
    for stray in plan.stray_nics:
        nic_host.reset_if_mac(
            nic_netns,
            host_ifname=stray.host_ifname,
            claim_mac=stray.claim_mac,
            mac=stray.hardware_mac,
            mtu=stray.hardware_mtu,
        )
    crash.reached(CrashPoint.UNPREPARE_AFTER_NICS)


def _belongs_to(claim_dir: Path, *, uid: str) -> bool:
    """Whether a directory of the old ``<namespace>_<name>`` naming holds metadata of claim ``uid`` only: a claim
    re-created under the same name may have written it since, and its files are not ours to remove."""
    files = list(claim_dir.glob(f"*/{metadata.HOST_FILE_NAME}"))
    try:
        return bool(files) and all(metadata.read_stream_uid(f.read_bytes()) == uid for f in files)
    except OSError:
        return False
