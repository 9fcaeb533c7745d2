"""Prepare and unprepare claims: the order of reading the claim, planning, doing, writing status, recording.

A prepare reads the claim, computes its plan (:mod:`fakedev.driver.plan`, pure), writes ``status.devices`` while
the plan is carried out on the node (:mod:`fakedev.driver.apply`), and records the claim in the checkpoint last.

Crash safety without a two-phase checkpoint: every file a claim gets is named from its UID (CDI specs) or from the
namespace/name the kubelet passes to unprepare (the metadata directory), so unprepare can remove everything even when
the plugin died between writing files and recording the claim. The checkpoint is written last, atomically.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from fakedev.driver import metadata
from fakedev.driver.apply import apply_prepare_plan, apply_unprepare_plan
from fakedev.driver.checkpoint import Checkpoint, ClaimRecord, prepared_device, prepared_nic
from fakedev.driver.claims import check_claim_ref, compute_claim_plan
from fakedev.driver.plan import (
    PrepareDirs,
    compute_device_configs,
    compute_nic_assignments,
    compute_prepare_plan,
    compute_unprepare_plan,
)
from fakedev.errors import ClaimError, KubeApiError
from fakedev.kube import DriverApi
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
    api: DriverApi | None
    """None when the plugin runs without an API server: claims cannot be read, so every prepare fails clearly."""
    lookup: Lookup
    nic_netns: str | None = None
    """The node namespace holding its NICs (None: ours); NIC claims are configured there before the pod gets them."""
    claims: dict[str, ClaimRecord] = field(default_factory=dict)

    @property
    def checkpoint(self) -> Checkpoint:
        return Checkpoint(path=self.paths.checkpoint)

    def load(self) -> None:
        """Rebuild state from the checkpoint (a corrupt one raises CheckpointError: the plugin must not start)."""
        self.claims = self.checkpoint.load()
        for directory in (self.paths.cdi_dir, self.paths.metadata_root, self.paths.dev_root):
            directory.mkdir(parents=True, exist_ok=True)

    # -- prepare -------------------------------------------------------------------------------------------------

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
            node_name=self.node_name,
            dirs=self.paths.dirs,
            generation=(known["metadataGeneration"] if known else 0) + 1,
            now=render_time(),
        )
        # The status write (an API round trip) overlaps the node-side work (netlink, files, fsyncs); both must
        # succeed before the claim is recorded, and either failing fails the prepare, which the kubelet retries.
        status = _STATUS_WRITER.submit(
            self.api.apply_claim_status,
            namespace=claim_plan.namespace,
            name=claim_plan.name,
            uid=claim_plan.uid,
            devices=list(plan.status_devices),
        )
        try:
            apply_prepare_plan(plan, nic_netns=self.nic_netns, sysfs_root=self.paths.sysfs_root)
        finally:
            status_error = status.exception()
        if status_error is not None:
            raise status_error
        self.claims[ref.uid] = plan.record
        self.checkpoint.save(self.claims)
        return plan.prepared

    def _published(self, pool: str, device: str, *, request: str) -> PublishedDevice:
        found = self.lookup(pool, device)
        if found is None:
            raise ClaimError(
                f"device {device} of pool {pool} (request {request}) is not published by "
                f"driver {self.driver} on node {self.node_name}"
            )
        return found

    def _files_present(self, record: ClaimRecord) -> bool:
        """A node reboot wipes the CDI dir (volatile); then the claim is prepared again from scratch."""
        return all((self.paths.cdi_dir / f).exists() for f in record["cdiSpecFiles"])

    # -- unprepare -----------------------------------------------------------------------------------------------

    def unprepare(self, ref: ClaimRef) -> str:
        """Remove everything of a claim; an unknown claim is success. Returns an error message or ""."""
        try:
            check_claim_ref(uid=ref.uid, namespace=ref.namespace, name=ref.name)
        except ClaimError as exc:
            return str(exc)
        record = self.claims.get(ref.uid)
        plan = compute_unprepare_plan(
            driver=self.driver, uid=ref.uid, namespace=ref.namespace, name=ref.name, record=record, dirs=self.paths.dirs
        )
        # Clearing our status entries overlaps the node-side clean-up, as in prepare.
        status = (
            _STATUS_WRITER.submit(
                self.api.apply_claim_status, namespace=ref.namespace, name=ref.name, uid=ref.uid, devices=[]
            )
            if self.api is not None
            else None
        )
        try:
            apply_unprepare_plan(plan, nic_netns=self.nic_netns, sysfs_root=self.paths.sysfs_root)
        finally:
            status_error = status.exception() if status is not None else None
        if isinstance(status_error, KubeApiError):
            # Gone, re-created or unreachable: deallocation clears status.devices anyway, so this is not fatal.
            log.info("claim status not cleared", extra={"fields": {"claim": ref.uid, "reason": str(status_error)}})
        elif status_error is not None:
            raise status_error
        if record is not None:
            del self.claims[ref.uid]
            self.checkpoint.save(self.claims)
        return ""
