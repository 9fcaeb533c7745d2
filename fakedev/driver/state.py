"""Prepare and unprepare claims: CDI specs, device-metadata files, claim status, checkpoint.

Crash safety without a two-phase checkpoint: every file a claim gets is named from its UID (CDI specs) or from the
namespace/name the kubelet passes to unprepare (the metadata directory), so unprepare can remove everything even when
the plugin died between writing files and recording the claim. The checkpoint is written last, atomically.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import cdi
from fakedev import sysfs
from fakedev.driver import cdi_edits, metadata
from fakedev.driver.checkpoint import Checkpoint, ClaimRecord, DeviceRecord, NicRecord
from fakedev.driver.claims import AllocatedDevice, ClaimPlan, check_claim_ref, compute_claim_plan, configs_for
from fakedev.driver.config import GPU_KINDS, NIC_KINDS, DeviceConfig, merge_configs, parse_config
from fakedev.driver.fsutil import atomic_write, fsync_dir
from fakedev.errors import ClaimError, KubeApiError
from fakedev.kube import DriverApi
from fakedev.model.identity import mig_uuid
from fakedev.model.inventory import ExampleGpu, MigDevice, NicPf, NicVf, VgpuDevice, VirtualNic
from fakedev.nics import host as nic_host
from fakedev.nics.plan import NicAssignment, compute_assignment
from fakedev.nics.ports import ifname_of
from fakedev.render.example import FABRIC_ATTACHED
from fakedev.render.published import PublishedDevice
from kubeclient.timestamps import render_time
from kubeletapi.types import ClaimRef, PreparedDevice, PrepareResult

log = logging.getLogger("fakedev.driver.state")

Lookup = Callable[[str, str], PublishedDevice | None]
"""(pool, device) → what this node publishes, or None."""

READY_REASON: Final = "DevicePrepared"
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


def ensure_fake_node(dev_root: Path, relpath: str) -> None:
    """Create a harmless char device (1:3) standing in for a vendor device node; idempotent."""
    path = dev_root / relpath
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(cdi_edits.SAFE_MAJOR, cdi_edits.SAFE_MINOR))


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
            return tuple(_prepared(d) for d in known["devices"])
        if self.api is None:
            raise ClaimError(f"no API server configured; cannot read claim {ref.namespace}/{ref.name}")
        claim = self.api.get_claim(namespace=ref.namespace, name=ref.name)
        plan = compute_claim_plan(claim, uid=ref.uid, driver=self.driver, node_name=self.node_name)
        published = [self._published(d) for d in plan.devices]
        configs = {d.request: self._config(plan, d, p) for d, p in zip(plan.devices, published, strict=True)}
        nics = self._assign_nics(plan=plan, published=published, configs=configs, known=known)
        # The status write (an API round trip) overlaps the node-side work (netlink, files, fsyncs); both must
        # succeed before the claim is recorded, and either failing fails the prepare, which the kubelet retries.
        status = _STATUS_WRITER.submit(
            self.api.apply_claim_status,
            namespace=plan.namespace,
            name=plan.name,
            uid=plan.uid,
            devices=[
                _status_entry(self.driver, d, nics.get(d.device), attached=_fabric_attached(p.model))
                for d, p in zip(plan.devices, published, strict=True)
            ],
        )
        try:
            for nic in nics.values():
                nic_host.configure(self.nic_netns, nic_assignment(nic))
            record = self._write(
                plan=plan,
                published=published,
                configs=configs,
                nics=nics,
                generation=(known["metadataGeneration"] if known else 0) + 1,
            )
        finally:
            status_error = status.exception()
        if status_error is not None:
            raise status_error
        record["statusApplied"] = True
        self.claims[ref.uid] = record
        self.checkpoint.save(self.claims)
        return tuple(_prepared(d) for d in record["devices"])

    def _published(self, device: AllocatedDevice) -> PublishedDevice:
        found = self.lookup(device.pool, device.device)
        if found is None:
            raise ClaimError(
                f"device {device.device} of pool {device.pool} (request {device.request}) is not published by "
                f"driver {self.driver} on node {self.node_name}"
            )
        return found

    @staticmethod
    def _config(plan: ClaimPlan, device: AllocatedDevice, published: PublishedDevice) -> DeviceConfig:
        kinds = NIC_KINDS if isinstance(published.model, (NicPf, NicVf, VirtualNic)) else GPU_KINDS
        return merge_configs(
            [
                parse_config(p, kinds=kinds, path=f"config[{i}].opaque.parameters")
                for i, p in enumerate(configs_for(plan, device.request))
            ]
        )

    def _assign_nics(
        self,
        *,
        plan: ClaimPlan,
        published: Sequence[PublishedDevice],
        configs: Mapping[str, DeviceConfig],
        known: ClaimRecord | None,
    ) -> dict[str, NicRecord]:
        """Names, MACs and addresses for the claim's NICs; a claim prepared before keeps what it had."""
        kept = {n["device"]: n for n in (known.get("nics", []) if known else [])}
        others = [n for uid, r in self.claims.items() if uid != plan.uid for n in r.get("nics", [])]
        used_names = {n["podIfname"] for n in others}
        used_addresses = {a for n in others for a in n["addresses"]}
        out: dict[str, NicRecord] = {}
        for d, p in zip(plan.devices, published, strict=True):
            host_ifname = ifname_of(p.model)
            if host_ifname is None:
                continue
            if isinstance(p.model, NicPf) and p.model.link.value != "ethernet":
                raise ClaimError(f"{d.device} is an InfiniBand port; fakedev emulates only Ethernet NICs as veth")
            if d.device in kept:
                out[d.device] = kept[d.device]
                continue
            model_mtu = getattr(p.model, "mtu", 1500)
            a = compute_assignment(
                node_name=self.node_name,
                claim_uid=plan.uid,
                device=d.device,
                host_ifname=host_ifname,
                default_mtu=int(model_mtu),
                config=configs[d.request],
                used_names=used_names,
                used_addresses=used_addresses,
                ipv6=configs[d.request].ipv6,
            )
            used_names.add(a.pod_ifname)
            used_addresses.update(a.addresses)
            out[d.device] = {
                "device": d.device,
                "hostIfname": a.host_ifname,
                "podIfname": a.pod_ifname,
                "mac": a.mac,
                "mtu": a.mtu,
                "addresses": list(a.addresses),
                "hardwareMac": str(getattr(p.model, "mac", "")),
                "hardwareMtu": int(model_mtu),
            }
        return out

    def _write(
        self,
        *,
        plan: ClaimPlan,
        published: Sequence[PublishedDevice],
        configs: Mapping[str, DeviceConfig],
        nics: Mapping[str, NicRecord],
        generation: int,
    ) -> ClaimRecord:
        identity = metadata.ClaimIdentity(
            namespace=plan.namespace, name=plan.name, uid=plan.uid, pod_claim_name=plan.pod_claim_name
        )
        mig_uuids = {
            d.device: mig_uuid(node=self.node_name, key=f"{d.pool}/{d.device}/{plan.uid}")
            for d, p in zip(plan.devices, published, strict=True)
            if isinstance(p.model, MigDevice) and p.model.uuid is None
        }
        visible = [
            mig_uuids.get(d.device) or str(getattr(p.model, "uuid", "") or "")
            for d, p in zip(plan.devices, published, strict=True)
        ]
        visible = [u for u in visible if u]
        cdi_devices: list[tuple[str, cdi.ContainerEdits]] = []
        records: list[DeviceRecord] = []
        metadata_devices: dict[str, list[metadata.MetadataDevice]] = {}
        mdevs: list[str] = []
        for d, p in zip(plan.devices, published, strict=True):
            for node in cdi_edits.device_nodes(p.model):
                ensure_fake_node(self.paths.dev_root, node.host_relpath)
            nic = nics.get(d.device)
            edits = (
                cdi_edits.render_nic_edits(
                    host_ifname=nic["hostIfname"], pod_ifname=nic["podIfname"], config=configs[d.request]
                )
                if nic is not None
                else cdi_edits.render_device_edits(
                    model=p.model,
                    device=d.device,
                    config=configs[d.request],
                    visible_uuids=visible,
                    dev_root=self.paths.dev_root,
                    mig_uuid=mig_uuids.get(d.device),
                )
            )
            name = cdi_edits.claim_device_name(claim_uid=plan.uid, device=d.device)
            cdi_devices.append((name, edits))
            top = metadata.top_level_request(d.request)
            records.append(
                {
                    "requestNames": [top],
                    "pool": d.pool,
                    "device": d.device,
                    "cdiDeviceIDs": [cdi.render_qualified_name(kind=cdi_edits.claim_kind(self.driver), device=name)],
                    "shareID": d.share_id,
                }
            )
            attributes: dict[str, Any] = {k: dict(v) for k, v in p.attributes.items()}
            if isinstance(p.model, VgpuDevice):
                # The mdev exists from now on; KubeVirt finds the vGPU by this (unqualified) attribute.
                self._create_mdev(p.model)
                attributes["mdevUUID"] = {"string": p.model.mdev_uuid}
                mdevs.append(p.model.mdev_uuid)
            entry: metadata.MetadataDevice = {
                "driver": self.driver,
                "pool": d.pool,
                "name": d.device,
                "attributes": attributes,
            }
            if nic is not None:
                entry["networkData"] = _network_data(nic)
            metadata_devices.setdefault(d.request, []).append(entry)
        spec_files = [cdi_edits.claim_spec_file(driver=self.driver, claim_uid=plan.uid)]
        # Each file's data is fsynced as it is written; the directories once at the end (one journal commit
        # makes every rename durable, later directory fsyncs find nothing left to commit).
        cdi.write_spec(
            spec=cdi_edits.render_claim_spec(driver=self.driver, devices=cdi_devices),
            cdi_dir=self.paths.cdi_dir,
            file_name=spec_files[0],
            sync=False,
        )
        claim_dir = self.paths.metadata_root / metadata.host_claim_dir_name(identity)
        synced: list[Path] = []
        first_of_request: set[str] = set()
        for top, requests in metadata.group_by_request(metadata_devices).items():
            host_file = claim_dir / top / metadata.HOST_FILE_NAME
            atomic_write(
                host_file,
                metadata.render_metadata_stream(claim=identity, generation=generation, requests=requests),
                sync=False,
            )
            synced.append(host_file.parent)
            spec_file = metadata.metadata_spec_file(driver=self.driver, claim_uid=plan.uid, request=top)
            cdi.write_spec(
                spec=metadata.render_metadata_spec(
                    driver=self.driver, claim=identity, request=top, host_file=str(host_file)
                ),
                cdi_dir=self.paths.cdi_dir,
                file_name=spec_file,
                sync=False,
            )
            spec_files.append(spec_file)
            # The metadata device rides on the first device of its request (contract §4).
            first = next(r for r in records if r["requestNames"][0] == top and top not in first_of_request)
            first_of_request.add(top)
            first["cdiDeviceIDs"].append(
                cdi.render_qualified_name(
                    kind=metadata.metadata_kind(self.driver),
                    device=metadata.metadata_device_name(claim_uid=plan.uid, request=top),
                )
            )
        for directory in (self.paths.cdi_dir, *synced, claim_dir, self.paths.metadata_root):
            fsync_dir(directory)
        return {
            "uid": plan.uid,
            "namespace": plan.namespace,
            "name": plan.name,
            "state": "PrepareCompleted",
            "devices": records,
            "cdiSpecFiles": spec_files,
            "metadataDir": claim_dir.name,
            "metadataGeneration": generation,
            "statusApplied": False,
            "nics": list(nics.values()),
            "mdevs": mdevs,
        }

    def _create_mdev(self, vgpu: VgpuDevice) -> None:
        if self.paths.sysfs_root is None:
            return
        sysfs.create_mdev(
            self.paths.sysfs_root,
            parents=vgpu.parent.vfs,
            mdev_type=vgpu.vgpu_type.mdev_type,
            uuid=vgpu.mdev_uuid,
            iommu_group=vgpu.iommu_group,
        )

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
        # Clearing our status entries overlaps the node-side clean-up, as in prepare.
        status = (
            _STATUS_WRITER.submit(
                self.api.apply_claim_status, namespace=ref.namespace, name=ref.name, uid=ref.uid, devices=[]
            )
            if self.api is not None
            else None
        )
        try:
            self._remove_files(ref, record)
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

    def _remove_files(self, ref: ClaimRef, record: ClaimRecord | None) -> None:
        """Everything a prepare of ``ref`` may have left on the node, record or not (see the module docstring)."""
        cdi.remove_spec(
            cdi_dir=self.paths.cdi_dir,
            file_name=cdi_edits.claim_spec_file(driver=self.driver, claim_uid=ref.uid),
            sync=False,
        )
        cdi.remove_specs_with_prefix(
            cdi_dir=self.paths.cdi_dir,
            prefix=metadata.metadata_spec_prefix(driver=self.driver, claim_uid=ref.uid),
            sync=False,
        )
        dir_name = record["metadataDir"] if record else f"{ref.namespace}_{ref.name}"
        shutil.rmtree(self.paths.metadata_root / dir_name, ignore_errors=True)
        for directory in (self.paths.cdi_dir, self.paths.metadata_root):
            if directory.is_dir():
                fsync_dir(directory)
        for uuid in record.get("mdevs", []) if record else []:
            if self.paths.sysfs_root is not None:
                sysfs.remove_mdev(self.paths.sysfs_root, uuid=uuid)
        for nic in record.get("nics", []) if record else []:
            # Back in the node's namespace (the runtime moved it out of the pod): hardware MAC and MTU, no addresses.
            nic_host.reset(
                self.nic_netns, host_ifname=nic["hostIfname"], mac=nic["hardwareMac"], mtu=nic["hardwareMtu"]
            )


def _prepared(record: DeviceRecord) -> PreparedDevice:
    return PreparedDevice(
        request_names=tuple(record["requestNames"]),
        pool=record["pool"],
        device=record["device"],
        cdi_device_ids=tuple(record["cdiDeviceIDs"]),
        share_id=record["shareID"],
    )


def _network_data(nic: NicRecord) -> metadata.NetworkData:
    return {"interfaceName": nic["podIfname"], "ips": list(nic["addresses"]), "hardwareAddress": nic["mac"]}


def nic_assignment(nic: NicRecord) -> NicAssignment:
    return NicAssignment(
        device=nic["device"],
        host_ifname=nic["hostIfname"],
        pod_ifname=nic["podIfname"],
        mac=nic["mac"],
        mtu=nic["mtu"],
        addresses=tuple(nic["addresses"]),
    )


def _fabric_attached(model: object) -> bool:
    return isinstance(model, ExampleGpu) and model.fabric_attach == "ready"


def _status_entry(driver: str, device: AllocatedDevice, nic: NicRecord | None, *, attached: bool) -> dict[str, Any]:
    now = render_time()
    conditions = [
        # The binding verdict stays in the entry the driver owns (server-side apply replaces the entry's list).
        *(
            [
                {
                    "type": FABRIC_ATTACHED,
                    "status": "True",
                    "reason": "Attached",
                    "lastTransitionTime": now,
                    "message": f"{device.device} attached to the node through the fabric",
                }
            ]
            if attached
            else []
        ),
        {
            "type": "Ready",
            "status": "True",
            "reason": READY_REASON,
            "lastTransitionTime": now,
            "message": "prepared by fakedev",
        },
    ]
    entry: dict[str, Any] = {"driver": driver, "pool": device.pool, "device": device.device, "conditions": conditions}
    if nic is not None:
        conditions.append(
            {
                "type": "NetworkReady",
                "status": "True",
                "reason": "InterfaceConfigured",
                "lastTransitionTime": now,
                "message": f"{nic['podIfname']} configured",
            }
        )
        entry["networkData"] = _network_data(nic)
    if device.share_id is not None:
        entry["shareID"] = device.share_id
    return entry
