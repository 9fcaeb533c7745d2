"""Prepare and unprepare claims: the order of reading the claim, planning, doing, writing status, recording.

A prepare reads the claim, computes its plan (:mod:`fakedev.driver.plan`, pure), carries it out on the node
(:mod:`fakedev.driver.apply`), and records the claim in the checkpoint journal last, together with the
``status.devices`` write it owes; that write goes out after the answer (:mod:`fakedev.driver.status_outbox`).
Prepares of different claims run at the same time; the caller (:mod:`fakedev.driver.core`) keeps one claim's calls
in order.

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

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import cdi
from fakedev.driver import cdi_layout, metadata
from fakedev.driver.apply import apply_prepare_plan, apply_unprepare_plan, write_base_spec
from fakedev.driver.cdi_layout import CdiLayout
from fakedev.driver.checkpoint import (
    ClaimRecord,
    JournalEntry,
    del_entry,
    owe_entry,
    prepared_device,
    prepared_nic,
    put_entry,
)
from fakedev.driver.claim_cache import ClaimCache
from fakedev.driver.claims import ClaimPlan, check_claim_ref, compute_claim_plan
from fakedev.driver.crash import CrashPoint, CrashSwitch
from fakedev.driver.fsutil import DIR_MODE, PRIVATE_DIR_MODE, make_dirs, remove_temp_files
from fakedev.driver.journal import ClaimJournal
from fakedev.driver.plan import (
    PrepareDirs,
    PreparePlan,
    SpecFile,
    compute_device_configs,
    compute_nic_assignments,
    compute_prepare_plan,
    compute_recorded_files,
    compute_unprepare_plan,
)
from fakedev.driver.status_outbox import StatusOutbox, owed_status
from fakedev.driver.trash import TRASH_DIR_NAME, Trash
from fakedev.errors import ClaimError, KubeApiError
from fakedev.kube import DriverApi, PendingClaim
from fakedev.nics.plan import HostNic
from fakedev.render.published import PublishedDevice
from kubeclient.timestamps import render_time
from kubeletapi.types import ClaimRef, PreparedDevice, PrepareResult

log = logging.getLogger("fakedev.driver.state")

Lookup = Callable[[str, str], PublishedDevice | None]
"""(pool, device) → what this node publishes, or None."""


def _files_only(plan: PreparePlan) -> bool:
    """Whether a plan may be carried out before the API server's answer confirms it: NICs and mdevs never move on
    a plan the answer has not confirmed (a stale allocation may name another claim's); files are named from the
    claim's UID, so writing them touches nothing of another claim's."""
    return not plan.nics and not plan.mdevs


def _may_forget_later(record: ClaimRecord) -> bool:
    """Whether an unprepared claim's record may be forgotten without waiting for the disk: it moved no NIC and made
    no mdev, so its files — named from its UID, removed before — are all there was to undo."""
    return not record["nics"] and not record["mdevs"]


@dataclass(frozen=True, kw_only=True)
class StatePaths:
    """Every directory the driver writes to; all of them are settings (tests use temp roots)."""

    cdi_dir: Path
    plugin_data_dir: Path
    dev_root: Path
    checkpoint: Path
    sysfs_root: Path | None = None
    """The node's fake /sys (vGPU prepare creates its mdev there); None: no sysfs to maintain."""
    durable: bool = True
    """False: the CDI directory is volatile, so a claim's files need no fsync (:attr:`PrepareDirs.durable`)."""
    boot_id: str = ""
    """This boot's ID: a claim's files are written unsynced, trusted in this boot only (:attr:`PrepareDirs.boot_id`)."""

    # Cached: every prepare and unprepare asks, and building Paths anew cost ~20 µs a call (pathlib is slow).
    @functools.cached_property
    def metadata_root(self) -> Path:
        return self.plugin_data_dir / metadata.METADATA_DIR_NAME

    @functools.cached_property
    def dirs(self) -> PrepareDirs:
        return PrepareDirs(
            cdi_dir=self.cdi_dir,
            dev_root=self.dev_root,
            metadata_root=self.metadata_root,
            durable=self.durable,
            boot_id=self.boot_id,
        )


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
    """Whether prepare writes ``status.devices`` (no NVIDIA release does)."""
    cache: ClaimCache | None = None
    """Claims as a watch last showed them: a head start for prepares, never their only read."""
    journal: ClaimJournal = field(init=False)
    trash: Trash = field(init=False)
    outbox: StatusOutbox | None = field(init=False)
    """None without an API server (nothing to write to)."""

    def __post_init__(self) -> None:
        self.journal = ClaimJournal(
            path=self.paths.checkpoint,
            before_compact_rename=self.crash.before_rename(CrashPoint.CHECKPOINT_TEMP),
            before_sync=lambda: self.crash.reached(CrashPoint.CHECKPOINT_APPEND),
        )
        self.trash = Trash(root=self.paths.plugin_data_dir / TRASH_DIR_NAME)
        self.outbox = StatusOutbox(journal=self.journal, api=self.api, crash=self.crash) if self.api else None

    @property
    def claims(self) -> Mapping[str, ClaimRecord]:
        """The prepared claims as recorded, durable or queued (a snapshot: replaced, never changed, by each entry)."""
        return self.journal.claims

    def load(self) -> list[Path]:
        """Rebuild state from the checkpoint (a corrupt one raises CheckpointError: the plugin must not start),
        collect the temp files crashed writes left (returns those) and write the release's base spec, if it has one.
        Hold the instances' lock (``serialize.lock``): another instance's write in progress looks just like a
        crashed one."""
        make_dirs(self.paths.plugin_data_dir, mode=PRIVATE_DIR_MODE)
        make_dirs(self.paths.checkpoint.parent, mode=PRIVATE_DIR_MODE)
        for directory in (self.paths.cdi_dir, self.paths.metadata_root, self.paths.dev_root):
            make_dirs(directory, mode=DIR_MODE)
        self.journal.open()
        self._forget_unprepared()
        self.trash.empty()  # metadata directories a stopped or killed plugin had not deleted yet
        removed = self.collect_temp_files()
        if self.base_spec is not None:
            write_base_spec(self.base_spec, cdi_dir=self.paths.cdi_dir)
        if self.outbox is not None:
            self.outbox.start()  # first the writes a previous process owed and did not send
        return removed

    @property
    def _writes_status(self) -> bool:
        """Whether prepare owes the claim a ``status.devices`` write (and unprepare a clear of it)."""
        return self.writes_device_status and self.outbox is not None

    def _forget_unprepared(self) -> None:
        """Drop the records of claims unprepared before a crash took their queued ``del`` (synced, so it is said
        once): a record none of whose own files is left (the node's base spec is no claim's) and that moved
        nothing else — no NIC, no mdev, no status owed. A reboot never looks like this: it empties the CDI
        directory, not the plugin's metadata files. Only for a driver that writes no claim status: one that does
        never queues a ``del``, and its record is what an unprepare retried after a crash needs to clear the status
        the claim carries."""
        if self._writes_status:
            return
        state = self.journal.state
        gone = [
            uid
            for uid, record in state.claims.items()
            if _may_forget_later(record) and uid not in state.owed and not self._any_file_left(record)
        ]
        if gone:
            self.journal.commit([del_entry(uid) for uid in gone])
            log.info("records of claims unprepared before a crash dropped", extra={"fields": {"claims": gone}})

    def _any_file_left(self, record: ClaimRecord) -> bool:
        files = compute_recorded_files(record, dirs=self.paths.dirs, base_spec=None)
        return not files or any(p.exists() for p in files)

    def close(self) -> None:
        """Stop the status writers (what they owe stays in the journal) and close the journal."""
        if self.outbox is not None:
            self.outbox.stop()
        self.trash.close()
        self.journal.close()

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
        if not self._trusted(known):
            return None
        return PrepareResult(devices=tuple(prepared_device(d) for d in known["devices"]))

    def read_ahead(self, ref: ClaimRef) -> PendingClaim | None:
        """Send the GET a prepare of ``ref`` will make, before the call waits for its lock and thread: a claim this
        node does not hold needs it in any case. None: nothing to send (held, no API server, a name that is no
        Kubernetes name). Cheap and free of file I/O, for the event loop; :meth:`prepare` takes the answer."""
        if self.api is None or ref.uid in self.claims:
            return None
        try:
            check_claim_ref(uid=ref.uid, namespace=ref.namespace, name=ref.name)
            return self.api.read_ahead_claim(namespace=ref.namespace, name=ref.name)
        except (ClaimError, KubeApiError):
            return None  # the prepare reads again, and reports what goes wrong then

    def prepare(self, ref: ClaimRef, *, ahead: PendingClaim | None = None) -> PrepareResult:
        """``ahead``: the claim's GET sent by :meth:`read_ahead`, used when the prepare needs a read (the caller
        drains it otherwise)."""
        try:
            return PrepareResult(devices=self._prepare(ref, ahead=ahead))
        except ClaimError as exc:
            log.warning("prepare failed", extra={"fields": {"claim": ref.uid, "error": str(exc)}})
            return PrepareResult(error=str(exc))
        except KubeApiError as exc:
            return PrepareResult(error=f"cannot read or update claim {ref.namespace}/{ref.name}: {exc}")

    def _prepare(self, ref: ClaimRef, *, ahead: PendingClaim | None) -> tuple[PreparedDevice, ...]:
        check_claim_ref(uid=ref.uid, namespace=ref.namespace, name=ref.name)
        known = self.claims.get(ref.uid)
        if known is not None and (known["namespace"], known["name"]) != (ref.namespace, ref.name):
            # A UID names one claim for ever; the same UID under another name is a caller's mistake, and answering
            # it would hand one claim's devices to a pod that asked for another.
            raise ClaimError(
                f"claim {ref.uid} is prepared on this node as {known['namespace']}/{known['name']}; "
                f"refusing to prepare it as {ref.namespace}/{ref.name}"
            )
        if known is not None and self._trusted(known):
            return tuple(prepared_device(d) for d in known["devices"])
        if known is None and ref.uid in self.journal.state.claims:
            # Unprepared with its del still queued: on disk first, or a kill between this prepare's files and its
            # record would leave the old record beside new files, answered from after a restart.
            self.journal.commit([])
        if self.api is None:
            raise ClaimError(f"no API server configured; cannot read claim {ref.namespace}/{ref.name}")
        cached = self.cache.get(ref.uid) if self.cache is not None and known is None else None
        pending = ahead or self.api.get_claim_later(namespace=ref.namespace, name=ref.name)
        writes_status = self._writes_status
        if cached is not None and (cached.namespace, cached.name) == (ref.namespace, ref.name):
            early = self._plan_early(cached, pending=pending)
            if early is not None and _files_only(early) and not writes_status:
                return self._prepare_before_answer(ref, early=early, cached=cached, pending=pending)
            plan = self._prepare_from_cache(ref, early=early, cached=cached, pending=pending)
        else:
            # Read fresh, never from a watch cache alone: the kubelet names only namespace, name and UID, a
            # reallocated claim keeps its UID, and a cache that has not caught up cannot be told from one that has.
            claim = pending.result()
            plan = self._plan(compute_claim_plan(claim, uid=ref.uid, driver=self.driver, node_name=self.node_name))
            self._apply(plan)
        entries: list[JournalEntry] = [put_entry(plan.record)]
        owed = None
        if writes_status:
            owed = owed_status(uid=ref.uid, namespace=ref.namespace, name=ref.name, devices=list(plan.status_devices))
            entries.append(owe_entry(owed))
        self.crash.reached(CrashPoint.PREPARE_BEFORE_CHECKPOINT)
        self.journal.commit(entries)
        self.crash.reached(CrashPoint.PREPARE_AFTER_CHECKPOINT)
        if owed is not None and self.outbox is not None:
            self.outbox.owe(owed)  # written after the answer; owed in the journal until it is through
        return plan.prepared

    def _plan_early(self, cached: ClaimPlan, *, pending: PendingClaim) -> PreparePlan | None:
        """The cached plan, planned while the GET is out; None when it cannot be (the answer decides: the same error
        again, or a plan)."""
        try:
            return self._plan(cached)
        except ClaimError:
            return None
        except BaseException:
            pending.abandon()
            raise

    def _prepare_before_answer(
        self, ref: ClaimRef, *, early: PreparePlan, cached: ClaimPlan, pending: PendingClaim
    ) -> tuple[PreparedDevice, ...]:
        """A claim not held yet, whose cached plan (``early``) only writes files, for a driver that writes no claim
        status: its files and its record (marked unconfirmed) are written while the API server answers the GET, the
        record synced only if the files are. The answer decides: the same plan is confirmed (queued for the next
        journal batch; a restart before it only costs a read); another one (reallocated since the watch saw it)
        replaces the early files and record; an error undoes both and is raised. A crash before the answer leaves an
        unconfirmed record, which no prepare answers from without reading the claim again."""
        unconfirmed = early.record.copy()
        unconfirmed["unconfirmed"] = True
        try:
            self._apply(early)
            self.crash.reached(CrashPoint.PREPARE_BEFORE_CHECKPOINT)
            if early.durable:
                self.journal.commit([put_entry(unconfirmed)])
            else:
                # Files written unsynced are worthless after a power cut (the boot ID tells), and so is their record:
                # it must outlive this process — a kill — not the power. Written, it does; synced with a later batch.
                self.journal.commit_written([put_entry(unconfirmed)])
        except BaseException:
            pending.abandon()
            raise
        self.crash.reached(CrashPoint.PREPARE_BEFORE_CONFIRM)
        try:
            fresh = compute_claim_plan(pending.result(), uid=ref.uid, driver=self.driver, node_name=self.node_name)
        except BaseException:
            self._withdraw(early)
            raise
        if fresh == cached:
            self.journal.commit_later(put_entry(early.record), replaces=unconfirmed)
            self.crash.reached(CrashPoint.PREPARE_AFTER_CHECKPOINT)
            return early.prepared
        try:
            self._undo(early)
            plan = self._plan(fresh)  # may refuse the new allocation: then nothing of this prepare may stay
            self._apply(plan)
            self.journal.commit([put_entry(plan.record)])
        except BaseException:
            self._withdraw(early)
            raise
        self.crash.reached(CrashPoint.PREPARE_AFTER_CHECKPOINT)
        return plan.prepared

    def _withdraw(self, early: PreparePlan) -> None:
        """Undo an early prepare the API server's answer did not confirm (an error): its files and its record. What
        fails here is logged: the unconfirmed record left is never answered from, and unprepare removes it."""
        try:
            self._undo(early)
            self.journal.commit([del_entry(early.uid)])
        except Exception as exc:  # the answer's own error is what the caller must see
            log.warning("early prepare not undone", extra={"fields": {"claim": early.uid, "error": str(exc)}})

    def _prepare_from_cache(
        self, ref: ClaimRef, *, early: PreparePlan | None, cached: ClaimPlan, pending: PendingClaim
    ) -> PreparePlan:
        """Prepare a claim not held yet whose plan the watch cache has: its GET (``pending``) is out, and the cached
        plan (``early``, None when it cannot be planned) is — when it only writes files — carried out while the API
        server answers. The answer decides: the same plan is kept; another one (a claim reallocated since the watch
        saw it) undoes the early files and is carried out instead; an error undoes them and is raised."""
        applied = early is not None and _files_only(early)
        if applied and early is not None:
            try:
                self._apply(early)  # every file is named from the UID: nothing of another claim's is touched
            except BaseException:
                pending.abandon()
                raise
        try:
            fresh = compute_claim_plan(pending.result(), uid=ref.uid, driver=self.driver, node_name=self.node_name)
        except BaseException:
            if applied and early is not None:
                self._undo(early)
            raise
        if early is not None and fresh == cached:
            if not applied:
                self._apply(early)
            return early
        if applied and early is not None:
            self._undo(early)
        plan = self._plan(fresh)
        self._apply(plan)
        return plan

    def _plan(self, claim_plan: ClaimPlan) -> PreparePlan:
        """The plan of a claim read from the API (or the cache), given what the checkpoint holds."""
        known = self.claims.get(claim_plan.uid)
        published = [self._published(d.pool, d.device, request=d.request) for d in claim_plan.devices]
        configs = compute_device_configs(claim_plan, published)
        # A claim prepared before keeps its NICs as recorded; records become PreparedNics here, at the boundary.
        nics = compute_nic_assignments(
            claim=claim_plan,
            published=published,
            configs=configs,
            node_name=self.node_name,
            kept={n["device"]: prepared_nic(n) for n in known["nics"]} if known else {},
            others=[prepared_nic(n) for uid, r in self.claims.items() if uid != claim_plan.uid for n in r["nics"]],
        )
        return compute_prepare_plan(
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

    def _apply(self, plan: PreparePlan) -> None:
        apply_prepare_plan(
            plan,
            nic_netns=self.nic_netns,
            sysfs_root=self.paths.sysfs_root,
            crash=self.crash,
            reuse_dir=self.trash.reuse,
        )

    def _undo(self, plan: PreparePlan) -> None:
        """Remove the files an early plan wrote (it moved no NIC and made no mdev)."""
        record = plan.record
        undo = compute_unprepare_plan(
            driver=self.driver,
            node_name=self.node_name,
            uid=plan.uid,
            namespace=record["namespace"],
            name=record["name"],
            record=record,
            dirs=self.paths.dirs,
            node_nics={},
        )
        apply_unprepare_plan(undo, nic_netns=self.nic_netns, sysfs_root=self.paths.sysfs_root)

    def _published(self, pool: str, device: str, *, request: str) -> PublishedDevice:
        found = self.lookup(pool, device)
        if found is None:
            raise ClaimError(
                f"device {device} of pool {pool} (request {request}) is not published by "
                f"driver {self.driver} on node {self.node_name}"
            )
        return found

    def _trusted(self, record: ClaimRecord) -> bool:
        """Whether a held claim may be answered from its record: confirmed by a read and every file in place."""
        if record.get("unconfirmed"):
            return False
        return self._files_present(record)

    def _files_present(self, record: ClaimRecord) -> bool:
        """A node reboot wipes the CDI dir (volatile), and a metadata file a spec mounts may be gone too; then the
        claim is prepared again from scratch. So is a claim whose files were written unsynced in another boot: a
        power cut may have left them empty."""
        if record.get("bootId", self.paths.boot_id) != self.paths.boot_id:
            return False
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
        apply_unprepare_plan(
            plan, nic_netns=self.nic_netns, sysfs_root=self.paths.sysfs_root, crash=self.crash, trash=self.trash
        )
        if record is None:
            return ""  # nothing recorded, so no status of ours was ever owed: no journal entry, no API call
        if not self._writes_status and _may_forget_later(record):
            # Nothing but files was undone, and they are gone: a crash before the queued ``del`` is written leaves a
            # record with no file, which start-up drops (:meth:`_forget_unprepared`).
            self.crash.reached(CrashPoint.UNPREPARE_BEFORE_CHECKPOINT)
            self.journal.commit_later(del_entry(ref.uid), replaces=record)
            self.crash.reached(CrashPoint.UNPREPARE_AFTER_CHECKPOINT)
            return ""
        # A status write not yet sent is withdrawn (no API call); one that may be in the claim is cleared later.
        withdrawn = self.outbox.withdraw(ref.uid) if self.outbox is not None else True
        entries: list[JournalEntry] = [del_entry(ref.uid)]
        clear = None
        if self._writes_status and not withdrawn:
            clear = owed_status(uid=ref.uid, namespace=ref.namespace, name=ref.name, devices=[])
            entries.append(owe_entry(clear))
        self.crash.reached(CrashPoint.UNPREPARE_BEFORE_CHECKPOINT)
        self.journal.commit(entries)
        self.crash.reached(CrashPoint.UNPREPARE_AFTER_CHECKPOINT)
        if clear is not None and self.outbox is not None:
            self.outbox.owe(clear)
        return ""
