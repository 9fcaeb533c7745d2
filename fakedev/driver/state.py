"""Prepare and unprepare claims: the order of reading the claim, planning, doing, writing status, recording.

A prepare reads the claim, computes its plan (:mod:`fakedev.driver.plan`, pure), writes ``status.devices`` while
the plan is carried out on the node (:mod:`fakedev.driver.apply`), and records the claim in the checkpoint last.

Crash safety without a two-phase checkpoint: every file a claim gets is named from its UID (CDI specs, and the
metadata directory ``<namespace>_<name>_<uid>``), and every NIC it configures gets a MAC derived from its UID, so
unprepare can undo everything even when the plugin died between the node-side work and recording the claim, and
can never touch another claim's files or NICs. The checkpoint is
written last, atomically. A recorded claim is answered from the checkpoint only while every file it depends on is
there, and only to the namespace/name it was prepared for. Temp files of writes cut short by a crash are collected
when the state is loaded at start-up. A release's node-wide base spec (NVIDIA v25.8.1) belongs to the node, not to
a claim: it is written (atomically) when the state is loaded, again by a prepare that finds it gone, and never
removed by an unprepare.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import cdi
from fakedev.driver import cdi_layout, metadata
from fakedev.driver.apply import apply_prepare_plan, apply_unprepare_plan, write_base_spec
from fakedev.driver.cdi_layout import CdiLayout
from fakedev.driver.checkpoint import Checkpoint, ClaimRecord, prepared_device, prepared_nic
from fakedev.driver.claims import check_claim_ref, compute_claim_plan
from fakedev.driver.crash import CrashPoint, CrashSwitch
from fakedev.driver.fsutil import DIR_MODE, PRIVATE_DIR_MODE, make_dirs, remove_temp_files
from fakedev.driver.plan import (
    PrepareDirs,
    SpecFile,
    compute_device_configs,
    compute_nic_assignments,
    compute_prepare_plan,
    compute_recorded_files,
    compute_unprepare_plan,
)
from fakedev.errors import ClaimError, KubeApiError
from fakedev.kube import DriverApi
from fakedev.nics.plan import HostNic
from fakedev.render.published import PublishedDevice
from kubeclient.timestamps import render_time
from kubeletapi.types import ClaimRef, PreparedDevice, PrepareResult

log = logging.getLogger("fakedev.driver.state")

Lookup = Callable[[str, str], PublishedDevice | None]
"""(pool, device) → what this node publishes, or None."""

_STATUS_WRITER: Final = ThreadPoolExecutor(max_workers=4, thread_name_prefix="claim-status")
"""Claim status writes run here, overlapping the node-side work of the same prepare or unprepare."""


@dataclass(frozen=True, kw_only=True)
class StatePaths:
    """Every directory the driver writes to; all of them are settings (tests use temp roots)."""

    cdi_dir: Path
    plugin_data_dir: Path
    dev_root: Path
    checkpoint: Path
    sysfs_root: Path | None = None
    """The node's fake /sys (vGPU prepare creates its mdev there); None: no sysfs to maintain."""

    @property
    def metadata_root(self) -> Path:
        return self.plugin_data_dir / metadata.METADATA_DIR_NAME

    @property
    def dirs(self) -> PrepareDirs:
        return PrepareDirs(cdi_dir=self.cdi_dir, dev_root=self.dev_root, metadata_root=self.metadata_root)


@dataclass(kw_only=True)
class ClaimState:
    """The driver's memory of prepared claims, backed by the checkpoint."""

    driver: str
    node_name: str
    paths: StatePaths
    layout: CdiLayout
    """How the driver's release names and fills its CDI specs."""
    base_spec: SpecFile | None
    """The release's node-wide spec (:func:`~fakedev.driver.plan.compute_base_spec`); None: it writes none."""
    api: DriverApi | None
    """None when the plugin runs without an API server: claims cannot be read, so every prepare fails clearly."""
    lookup: Lookup
    nic_netns: str | None = None
    """The node namespace holding its NICs (None: ours); NIC claims are configured there before the pod gets them."""
    node_nics: Mapping[str, HostNic] = field(default_factory=dict)
    """The node's NICs by device name: an unrecorded claim's unprepare resets those carrying its MAC."""
    crash: CrashSwitch = field(default_factory=CrashSwitch)
    """Unarmed unless the torture tool asked for a crash point (``FAKEDEV_CRASH_AT``)."""
    writes_device_status: bool = True
    """Whether prepare writes ``status.devices`` (no NVIDIA release does; unprepare still clears ours, which an
    older fakedev may have written)."""
    claims: dict[str, ClaimRecord] = field(default_factory=dict)

    @property
    def checkpoint(self) -> Checkpoint:
        return Checkpoint(path=self.paths.checkpoint)

    def load(self) -> list[Path]:
        """Rebuild state from the checkpoint (a corrupt one raises CheckpointError: the plugin must not start),
        collect the temp files crashed writes left (returns those) and write the release's base spec, if it has one.
        Hold the instances' lock (``serialize.lock``): another instance's write in progress looks just like a
        crashed one."""
        make_dirs(self.paths.plugin_data_dir, mode=PRIVATE_DIR_MODE)
        make_dirs(self.paths.checkpoint.parent, mode=PRIVATE_DIR_MODE)
        for directory in (self.paths.cdi_dir, self.paths.metadata_root, self.paths.dev_root):
            make_dirs(directory, mode=DIR_MODE)
        self.claims = self.checkpoint.load()
        removed = self.collect_temp_files()
        if self.base_spec is not None:
            write_base_spec(self.base_spec, cdi_dir=self.paths.cdi_dir)
        return removed

    def collect_temp_files(self) -> list[Path]:
        """Remove our own writes' temp files, and only in our own directories: spec temp files of this driver's
        names in the (shared) CDI directory, metadata temp files below our metadata root, checkpoint temp files."""
        cdi_dir = self.paths.cdi_dir
        prefixes = (*cdi_layout.spec_file_prefixes(self.driver), metadata.metadata_spec_driver_prefix(self.driver))
        removed = [
            *(p for prefix in prefixes for p in cdi.remove_temp_files(cdi_dir=cdi_dir, prefix=prefix)),
            *remove_temp_files(self.paths.checkpoint.parent, target=self.paths.checkpoint.name),
        ]
        for request_dir in sorted(self.paths.metadata_root.glob("*/*")):
            if request_dir.is_dir() and not request_dir.is_symlink():
                removed += remove_temp_files(request_dir, target=metadata.HOST_FILE_NAME)
        if removed:
            log.info(
                "temp files of interrupted writes removed",
                extra={"fields": {"count": len(removed), "files": [str(p) for p in removed]}},
            )
        return removed

    # -- prepare -------------------------------------------------------------------------------------------------

    def held(self, ref: ClaimRef) -> PrepareResult | None:
        """The answer for a claim this plugin holds under this name with every file in place — from the checkpoint,
        with no API call and no write — or None when it takes a real prepare (unknown, another name, files gone, a
        name that is no Kubernetes name). Safe without the driver's lock: it only reads."""
        try:
            check_claim_ref(uid=ref.uid, namespace=ref.namespace, name=ref.name)
        except ClaimError:
            return None
        known = self.claims.get(ref.uid)
        if known is None or (known["namespace"], known["name"]) != (ref.namespace, ref.name):
            return None
        if not self._files_present(known):
            return None
        return PrepareResult(devices=tuple(prepared_device(d) for d in known["devices"]))

    def prepare(self, ref: ClaimRef) -> PrepareResult:
        try:
            return PrepareResult(devices=self._prepare(ref))
        except ClaimError as exc:
            log.warning("prepare failed", extra={"fields": {"claim": ref.uid, "error": str(exc)}})
            return PrepareResult(error=str(exc))
        except KubeApiError as exc:
            return PrepareResult(error=f"cannot read or update claim {ref.namespace}/{ref.name}: {exc}")

    def _prepare(self, ref: ClaimRef) -> tuple[PreparedDevice, ...]:
        check_claim_ref(uid=ref.uid, namespace=ref.namespace, name=ref.name)
        known = self.claims.get(ref.uid)
        if known is not None and (known["namespace"], known["name"]) != (ref.namespace, ref.name):
            # A UID names one claim for ever; the same UID under another name is a caller's mistake, and answering
            # it would hand one claim's devices to a pod that asked for another.
            raise ClaimError(
                f"claim {ref.uid} is prepared on this node as {known['namespace']}/{known['name']}; "
                f"refusing to prepare it as {ref.namespace}/{ref.name}"
            )
        if known is not None and self._files_present(known):
            return tuple(prepared_device(d) for d in known["devices"])
        if self.api is None:
            raise ClaimError(f"no API server configured; cannot read claim {ref.namespace}/{ref.name}")
        claim = self.api.get_claim(namespace=ref.namespace, name=ref.name)
        claim_plan = compute_claim_plan(claim, uid=ref.uid, driver=self.driver, node_name=self.node_name)
        published = [self._published(d.pool, d.device, request=d.request) for d in claim_plan.devices]
        configs = compute_device_configs(claim_plan, published)
        # A claim prepared before keeps its NICs as recorded; records become PreparedNics here, at the boundary.
        nics = compute_nic_assignments(
            claim=claim_plan,
            published=published,
            configs=configs,
            node_name=self.node_name,
            kept={n["device"]: prepared_nic(n) for n in known["nics"]} if known else {},
            others=[prepared_nic(n) for uid, r in self.claims.items() if uid != ref.uid for n in r["nics"]],
        )
        plan = compute_prepare_plan(
            claim=claim_plan,
            published=published,
            configs=configs,
            nics=nics,
            driver=self.driver,
            layout=self.layout,
            base_spec=self.base_spec,
            node_name=self.node_name,
            dirs=self.paths.dirs,
            generation=(known["metadataGeneration"] if known else 0) + 1,
            now=render_time(),
        )
        # The status write (an API round trip) overlaps the node-side work (netlink, files, fsyncs); both must
        # succeed before the claim is recorded, and either failing fails the prepare, which the kubelet retries.
        status = _STATUS_WRITER.submit(
            self._write_status,
            api=self.api,
            ref=ref,
            devices=list(plan.status_devices) if self.writes_device_status else None,
            points=(CrashPoint.PREPARE_BEFORE_STATUS, CrashPoint.PREPARE_AFTER_STATUS),
        )
        try:
            apply_prepare_plan(plan, nic_netns=self.nic_netns, sysfs_root=self.paths.sysfs_root, crash=self.crash)
        finally:
            status_error = status.exception()
        if status_error is not None:
            raise status_error
        self.claims[ref.uid] = plan.record
        self.crash.reached(CrashPoint.PREPARE_BEFORE_CHECKPOINT)
        self.checkpoint.save(self.claims, before_rename=self.crash.before_rename(CrashPoint.CHECKPOINT_TEMP))
        self.crash.reached(CrashPoint.PREPARE_AFTER_CHECKPOINT)
        return plan.prepared

    def _write_status(
        self,
        *,
        api: DriverApi,
        ref: ClaimRef,
        devices: list[dict[str, Any]] | None,
        points: tuple[CrashPoint, CrashPoint],
    ) -> None:
        """Apply our ``status.devices`` entries (``[]`` clears them; None: this driver writes none, so no call)."""
        before, after = points
        self.crash.reached(before)
        if devices is not None:
            api.apply_claim_status(namespace=ref.namespace, name=ref.name, uid=ref.uid, devices=devices)
        self.crash.reached(after)

    def _published(self, pool: str, device: str, *, request: str) -> PublishedDevice:
        found = self.lookup(pool, device)
        if found is None:
            raise ClaimError(
                f"device {device} of pool {pool} (request {request}) is not published by "
                f"driver {self.driver} on node {self.node_name}"
            )
        return found

    def _files_present(self, record: ClaimRecord) -> bool:
        """A node reboot wipes the CDI dir (volatile), and a metadata file a spec mounts may be gone too; then the
        claim is prepared again from scratch."""
        return all(p.exists() for p in compute_recorded_files(record, dirs=self.paths.dirs, base_spec=self.base_spec))

    # -- unprepare -----------------------------------------------------------------------------------------------

    def unprepare(self, ref: ClaimRef) -> str:
        """Remove everything of a claim; an unknown claim is success. Returns an error message or ""."""
        try:
            check_claim_ref(uid=ref.uid, namespace=ref.namespace, name=ref.name)
        except ClaimError as exc:
            return str(exc)
        record = self.claims.get(ref.uid)
        plan = compute_unprepare_plan(
            driver=self.driver,
            node_name=self.node_name,
            uid=ref.uid,
            namespace=ref.namespace,
            name=ref.name,
            record=record,
            dirs=self.paths.dirs,
            node_nics=self.node_nics,
        )
        # Clearing our status entries overlaps the node-side clean-up, as in prepare.
        status = (
            _STATUS_WRITER.submit(
                self._write_status,
                api=self.api,
                ref=ref,
                devices=[],
                points=(CrashPoint.UNPREPARE_BEFORE_STATUS, CrashPoint.UNPREPARE_AFTER_STATUS),
            )
            if self.api is not None
            else None
        )
        try:
            apply_unprepare_plan(plan, nic_netns=self.nic_netns, sysfs_root=self.paths.sysfs_root, crash=self.crash)
        finally:
            status_error = status.exception() if status is not None else None
        if isinstance(status_error, KubeApiError):
            # Gone, re-created or unreachable: deallocation clears status.devices anyway, so this is not fatal.
            log.info("claim status not cleared", extra={"fields": {"claim": ref.uid, "reason": str(status_error)}})
        elif status_error is not None:
            raise status_error
        if record is not None:
            del self.claims[ref.uid]
            self.crash.reached(CrashPoint.UNPREPARE_BEFORE_CHECKPOINT)
            self.checkpoint.save(self.claims, before_rename=self.crash.before_rename(CrashPoint.CHECKPOINT_TEMP))
            self.crash.reached(CrashPoint.UNPREPARE_AFTER_CHECKPOINT)
        return ""
