"""Carry out a prepare or unprepare plan on the node (I/O only; every decision is in the plan).

Prepare order: NICs configured in the node's namespace, fake device nodes, mdevs, the claim's CDI spec, each
request's metadata file and the spec that mounts it, then the directories fsynced once. Files are written with
their data fsynced but not their directories, since one directory fsync at the end makes every rename durable
(later ones would find nothing left to commit). The checkpoint is not written here: the caller records the claim
only after this and the status write succeeded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

import cdi
from fakedev import sysfs
from fakedev.driver import cdi_edits
from fakedev.driver.fsutil import atomic_write, fsync_dir
from fakedev.driver.plan import PreparePlan, UnpreparePlan
from fakedev.nics import host as nic_host


def ensure_fake_node(path: Path) -> None:
    """Create a harmless char device (1:3) standing in for a vendor device node; idempotent."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(cdi_edits.SAFE_MAJOR, cdi_edits.SAFE_MINOR))


def apply_prepare_plan(plan: PreparePlan, *, nic_netns: str | None, sysfs_root: Path | None) -> None:
    """``nic_netns``: the node namespace holding the NICs (None: ours); ``sysfs_root``: None, no mdevs to create."""
    for nic in plan.nics:
        nic_host.configure(nic_netns, nic.assignment)
    for node in plan.fake_nodes:
        ensure_fake_node(node)
    if sysfs_root is not None:
        for mdev in plan.mdevs:
            sysfs.create_mdev(
                sysfs_root, parents=mdev.parents, mdev_type=mdev.mdev_type, uuid=mdev.uuid, iommu_group=mdev.iommu_group
            )
    cdi.write_spec(spec=plan.claim_spec.spec, cdi_dir=plan.cdi_dir, file_name=plan.claim_spec.file_name, sync=False)
    for f in plan.metadata_files:
        atomic_write(f.path, f.data, sync=False)
        cdi.write_spec(spec=f.spec.spec, cdi_dir=plan.cdi_dir, file_name=f.spec.file_name, sync=False)
    for directory in plan.sync_dirs:
        fsync_dir(directory)


def apply_unprepare_plan(plan: UnpreparePlan, *, nic_netns: str | None, sysfs_root: Path | None) -> None:
    cdi.remove_spec(cdi_dir=plan.cdi_dir, file_name=plan.claim_spec_file, sync=False)
    cdi.remove_specs_with_prefix(cdi_dir=plan.cdi_dir, prefix=plan.metadata_spec_prefix, sync=False)
    shutil.rmtree(plan.metadata_dir, ignore_errors=True)
    for directory in plan.sync_dirs:
        if directory.is_dir():
            fsync_dir(directory)
    if sysfs_root is not None:
        for uuid in plan.mdevs:
            sysfs.remove_mdev(sysfs_root, uuid=uuid)
    for nic in plan.nics:
        # Back in the node's namespace (the runtime moved it out of the pod): hardware MAC and MTU, no addresses.
        nic_host.reset(nic_netns, host_ifname=nic.assignment.host_ifname, mac=nic.hardware_mac, mtu=nic.hardware_mtu)
