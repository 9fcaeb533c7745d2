"""What preparing a claim does, computed without doing any of it (pure): the prepare plan.

``compute_prepare_plan`` turns an allocated claim, the devices this node publishes for it, their opaque config and
their NIC assignments into a :class:`PreparePlan`: every fake device node, mdev, NIC configuration, CDI spec (named
and filled as the driver's release does, :mod:`fakedev.driver.cdi_layout`) and metadata file prepare creates, the
directories to fsync, the ``status.devices`` entries, the answer to the kubelet and the checkpoint record.
:mod:`fakedev.driver.apply` carries a plan out; :mod:`fakedev.driver.state` orders the two with the API calls.
What differs between device kinds comes from their preparer (:mod:`fakedev.driver.preparers`).

Two pure steps come before the plan: the opaque config of each request (which kinds apply depends on the device),
and the NIC assignments (names and addresses picked against what the node's other claims hold).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import cdi
from fakedev.driver import cdi_edits, cdi_layout, metadata
from fakedev.driver.cdi_edits import FakeNode
from fakedev.driver.cdi_layout import CdiLayout, VfioApiNode
from fakedev.driver.checkpoint import ClaimRecord, DeviceRecord, nic_record, prepared_device, prepared_nic
from fakedev.driver.claims import AllocatedDevice, ClaimPlan, configs_for
from fakedev.driver.config import DeviceConfig, merge_configs, parse_config
from fakedev.driver.preparers import EditsInput, MdevRequest, StatusCondition, StatusExtras, preparer_for
from fakedev.nics.plan import HostNic, PreparedNic, claim_mac, compute_assignment
from fakedev.render.published import PublishedDevice
from kubeletapi.types import PreparedDevice

READY_REASON: Final = "DevicePrepared"


@dataclass(frozen=True, kw_only=True)
class PrepareDirs:
    """Where a plan puts things: the CDI directory, the fake /dev root and the metadata root."""

    cdi_dir: Path
    dev_root: Path
    metadata_root: Path
    durable: bool = True
    """False when the CDI directory is volatile (tmpfs, as /var/run/cdi on a node): a power cut wipes every spec,
    so every claim is prepared again and the files a prepare writes need no fsync (the journal still has one)."""
    boot_id: str = ""
    """This boot's ID (:mod:`fakedev.driver.boot`): files are written without fsync and the record carries the ID,
    so a record of another boot — whose files a power cut may have emptied — is never trusted. "": unknown."""
    _dev_paths: dict[str, Path] = field(default_factory=dict, init=False, compare=False, hash=False, repr=False)
    """Fake device nodes' host paths by relative path, joined once (a prepare joined four anew); not copied by
    ``dataclasses.replace``, which may give another ``dev_root``."""

    def dev_path(self, relpath: str) -> Path:
        """A fake device node's path on the host."""
        path = self._dev_paths.get(relpath)
        if path is None:
            path = self._dev_paths[relpath] = self.dev_root / relpath
        return path

    @property
    def synced(self) -> bool:
        """Whether a prepare's files are fsynced: only when neither a volatile directory nor a boot ID stands in."""
        return self.durable and not self.boot_id


@dataclass(frozen=True, kw_only=True)
class SpecFile:
    """A CDI spec and its file name inside the CDI directory."""

    file_name: str
    spec: cdi.Spec


@dataclass(frozen=True, kw_only=True)
class MetadataFile:
    """One request's device-metadata file (host path and bytes) and the CDI spec that mounts it."""

    path: Path
    data: bytes
    spec: SpecFile


@dataclass(frozen=True, kw_only=True)
class PreparePlan:
    """Everything preparing one claim does on the node and answers, in the order it must happen."""

    uid: str
    fake_nodes: tuple[Path, ...]
    """Char devices to create (each once, in first-use order)."""
    mdevs: tuple[MdevRequest, ...]
    nics: tuple[PreparedNic, ...]
    cdi_dir: Path
    base_spec: SpecFile | None
    """The node-wide spec the claim's IDs also name (written at start-up; prepare writes it again if it is gone)."""
    claim_spec: SpecFile | None
    """None: a base spec holds every edit the claim's devices get."""
    metadata_files: tuple[MetadataFile, ...]
    durable: bool
    """Whether the files are fsynced (see :attr:`PrepareDirs.synced`)."""
    sync_dirs: tuple[Path, ...]
    """fsynced once after every file is written (one journal commit makes every rename durable)."""
    status_devices: tuple[dict[str, Any], ...]
    prepared: tuple[PreparedDevice, ...]
    record: ClaimRecord


@dataclass(frozen=True, kw_only=True)
class StrayNic:
    """A NIC a prepare of the claim may have configured before the plugin died unrecorded; it is recognised by the
    MAC prepare gives it (derived from the claim UID) and only then given back its hardware MAC and MTU."""

    host_ifname: str
    claim_mac: str
    hardware_mac: str
    hardware_mtu: int


@dataclass(frozen=True, kw_only=True)
class UnpreparePlan:
    """What unpreparing one claim removes; computed from its record when there is one, else from its names."""

    uid: str
    claim_spec_files: tuple[str, ...]
    """Every name the claim's spec may have (any release: one prepared before an upgrade is found too)."""
    metadata_spec_prefix: str
    metadata_spec_files: tuple[str, ...] | None
    """The recorded claim's metadata specs by name; None (no record): found by ``metadata_spec_prefix``."""
    cdi_dir: Path
    metadata_dir: Path | None
    """The claim's own metadata directory; None: its record names none."""
    metadata_files: tuple[Path, ...] = ()
    """The files in ``metadata_dir`` its record names (empty without a record: the directory is walked)."""
    legacy_metadata_dir: Path | None
    """For a claim without a record: the directory an older plugin would have used, removed only if its files name
    this claim's UID (a re-created claim of the same name may own it now)."""
    sync_dirs: tuple[Path, ...]
    mdevs: tuple[str, ...]
    nics: tuple[PreparedNic, ...]
    stray_nics: tuple[StrayNic, ...]
    """Without a record: every NIC of the node, each reset only if it carries this claim's MAC."""


def compute_device_configs(claim: ClaimPlan, published: Sequence[PublishedDevice]) -> dict[str, DeviceConfig]:
    """The effective opaque config of each request; which config kinds it may use depends on its devices' kind."""
    return {
        d.request: merge_configs(
            [
                parse_config(p, kinds=preparer_for(pub.model).config_kinds, path=f"config[{i}].opaque.parameters")
                for i, p in enumerate(configs_for(claim, d.request))
            ]
        )
        for d, pub in zip(claim.devices, published, strict=True)
    }


def compute_nic_assignments(
    *,
    claim: ClaimPlan,
    published: Sequence[PublishedDevice],
    configs: Mapping[str, DeviceConfig],
    node_name: str,
    kept: Mapping[str, PreparedNic],
    others: Iterable[PreparedNic],
) -> dict[str, PreparedNic]:
    """Name, MAC and addresses of each NIC of the claim, by device; ``kept`` (this claim's NICs from an earlier
    prepare) are reused as they were, ``others`` (every other claim's) are never collided with."""
    held = list(others)
    used_names = {n.assignment.pod_ifname for n in held}
    used_addresses = {a for n in held for a in n.assignment.addresses}
    out: dict[str, PreparedNic] = {}
    for d, p in zip(claim.devices, published, strict=True):
        host = preparer_for(p.model).host_nic(p.model, device=d.device)
        if host is None:
            continue
        if d.device in kept:
            out[d.device] = kept[d.device]
            continue
        config = configs[d.request]
        a = compute_assignment(
            node_name=node_name,
            claim_uid=claim.uid,
            device=d.device,
            host_ifname=host.ifname,
            default_mtu=host.mtu,
            config=config,
            used_names=used_names,
            used_addresses=used_addresses,
            ipv6=config.ipv6,
        )
        used_names.add(a.pod_ifname)
        used_addresses.update(a.addresses)
        out[d.device] = PreparedNic(assignment=a, hardware_mac=host.mac, hardware_mtu=host.mtu)
    return out


def compute_base_spec(
    *, layout: CdiLayout, devices: Sequence[tuple[str, PublishedDevice]], dev_root: Path
) -> SpecFile | None:
    """The node-wide base spec of a release that writes one (every published device, by name, with the edits no
    claim changes); None: the release writes none."""
    if not layout.has_base_spec:
        return None
    entries = [
        (name, e) for name, p in devices if not (e := _base_entry(layout, p, device=name, dev_root=dev_root)).is_empty()
    ]
    if not entries:
        return None
    return SpecFile(file_name=layout.base_spec_file(), spec=cdi_layout.render_base_spec(layout, devices=entries))


def _base_entry(layout: CdiLayout, published: PublishedDevice, *, device: str, dev_root: Path) -> cdi.ContainerEdits:
    prep = preparer_for(published.model)
    edits = prep.device_edits(published.model, device=device, dev_root=dev_root)
    if edits.is_empty() or layout.style.vfio_api_node is not VfioApiNode.ON_DEVICE:
        return edits
    return _with_nodes(edits, prep.api_nodes(published.model), dev_root=dev_root)


def _with_nodes(edits: cdi.ContainerEdits, nodes: Sequence[FakeNode], *, dev_root: Path) -> cdi.ContainerEdits:
    """``edits`` with ``nodes`` first (the VFIO API node before the group node, as fakedev always had them)."""
    if not nodes:
        return edits
    rendered = cdi_edits.render_device_nodes(nodes, dev_root=dev_root)
    return replace(edits, device_nodes=(*rendered, *edits.device_nodes))


def compute_prepare_plan(
    *,
    claim: ClaimPlan,
    published: Sequence[PublishedDevice],
    configs: Mapping[str, DeviceConfig],
    nics: Mapping[str, PreparedNic],
    driver: str,
    layout: CdiLayout,
    base_spec: SpecFile | None,
    node_name: str,
    dirs: PrepareDirs,
    generation: int,
    now: str,
) -> PreparePlan:
    """The plan for ``claim`` (its devices paired with ``published`` in order); ``layout`` is the release's CDI,
    ``base_spec`` its node-wide spec (:func:`compute_base_spec`); ``generation`` numbers the metadata files, ``now``
    stamps the status conditions."""
    pairs = list(zip(claim.devices, published, strict=True))
    preparers = [preparer_for(p.model) for _, p in pairs]
    claim_uuids = [
        prep.claim_uuid(p.model, node_name=node_name, key=f"{d.pool}/{d.device}/{claim.uid}")
        for prep, (d, p) in zip(preparers, pairs, strict=True)
    ]
    visible = tuple(
        u
        for prep, (_, p), minted in zip(preparers, pairs, claim_uuids, strict=True)
        if (u := prep.visible_uuid(p.model, claim_uuid=minted))
    )
    placement = layout.style.vfio_api_node
    fake_nodes: dict[Path, None] = {}
    spec_nodes: dict[FakeNode, None] = {}
    mdevs: list[MdevRequest] = []
    cdi_devices: list[tuple[str, cdi.ContainerEdits]] = []
    records: list[DeviceRecord] = []
    metadata_devices: dict[str, list[metadata.MetadataDevice]] = {}
    status: list[dict[str, Any]] = []
    for prep, (d, p), minted in zip(preparers, pairs, claim_uuids, strict=True):
        asked = placement is not VfioApiNode.ON_REQUEST or bool(configs[d.request].vfio_api_device)
        api = prep.api_nodes(p.model) if asked else ()
        for node in (*prep.fake_nodes(p.model), *api):
            fake_nodes[dirs.dev_path(node.host_relpath)] = None
        if placement is not VfioApiNode.ON_DEVICE:
            spec_nodes.update(dict.fromkeys(api))
        if (mdev := prep.mdev(p.model)) is not None:
            mdevs.append(mdev)
        nic = nics.get(d.device)
        use = EditsInput(
            device=d.device,
            config=configs[d.request],
            visible_uuids=visible,
            claim_uuid=minted,
            nic=nic,
            dev_root=dirs.dev_root,
        )
        ids: list[str] = []
        if layout.has_base_spec:
            if not prep.device_edits(p.model, device=d.device, dev_root=dirs.dev_root).is_empty():
                ids.append(layout.base_device_id(d.device))
            edits = prep.claim_edits(p.model, use=use)
        else:
            on_device = api if placement is VfioApiNode.ON_DEVICE else ()
            edits = _with_nodes(prep.container_edits(p.model, use=use), on_device, dev_root=dirs.dev_root)
        if not edits.is_empty():
            cdi_devices.append((cdi_layout.claim_device_name(claim_uid=claim.uid, device=d.device), edits))
            ids.append(layout.claim_device_id(claim_uid=claim.uid, device=d.device))
        records.append(
            {
                "requestNames": [metadata.top_level_request(d.request)],
                "pool": d.pool,
                "device": d.device,
                "cdiDeviceIDs": ids,
                "shareID": d.share_id,
            }
        )
        extras = prep.status_extras(p.model, device=d.device, nic=nic, now=now)
        entry: metadata.MetadataDevice = {
            "driver": driver,
            "pool": d.pool,
            "name": d.device,
            "attributes": prep.metadata_attributes(p.model, published=p.attributes),
        }
        if extras.network_data is not None:
            entry["networkData"] = extras.network_data
        metadata_devices.setdefault(d.request, []).append(entry)
        status.append(_status_entry(driver=driver, device=d, extras=extras, now=now))

    identity = metadata.ClaimIdentity(
        namespace=claim.namespace, name=claim.name, uid=claim.uid, pod_claim_name=claim.pod_claim_name
    )
    claim_spec = (
        SpecFile(
            file_name=layout.claim_spec_file(claim.uid),
            spec=cdi_layout.render_claim_spec(
                layout,
                devices=cdi_devices,
                device_nodes=cdi_edits.render_device_nodes(tuple(spec_nodes), dev_root=dirs.dev_root),
            ),
        )
        if cdi_devices
        else None
    )
    claim_dir = dirs.metadata_root / metadata.host_claim_dir_name(
        namespace=claim.namespace, name=claim.name, uid=claim.uid
    )
    metadata_files: list[MetadataFile] = []
    for top, requests in metadata.group_by_request(metadata_devices).items():
        host_file = claim_dir / top / metadata.HOST_FILE_NAME
        metadata_files.append(
            MetadataFile(
                path=host_file,
                data=metadata.render_metadata_stream(claim=identity, generation=generation, requests=requests),
                spec=SpecFile(
                    file_name=metadata.metadata_spec_file(driver=driver, claim_uid=claim.uid, request=top),
                    spec=metadata.render_metadata_spec(
                        driver=driver, claim=identity, request=top, host_file=str(host_file)
                    ),
                ),
            )
        )
        # The metadata device rides on the first device of its request (contract §4).
        first = next(r for r in records if r["requestNames"][0] == top)
        first["cdiDeviceIDs"].append(
            cdi.render_qualified_name(
                kind=metadata.metadata_kind(driver),
                device=metadata.metadata_device_name(claim_uid=claim.uid, request=top),
            )
        )
    record: ClaimRecord = {
        "uid": claim.uid,
        "namespace": claim.namespace,
        "name": claim.name,
        "devices": records,
        "cdiSpecFiles": [
            *([claim_spec.file_name] if claim_spec else []),
            *(f.spec.file_name for f in metadata_files),
        ],
        "metadataDir": claim_dir.name,
        "metadataGeneration": generation,
        "nics": [nic_record(n) for n in nics.values()],
        "mdevs": [m.uuid for m in mdevs],
    }
    if dirs.boot_id:
        record["bootId"] = dirs.boot_id
    return PreparePlan(
        uid=claim.uid,
        fake_nodes=tuple(fake_nodes),
        mdevs=tuple(mdevs),
        nics=tuple(nics.values()),
        cdi_dir=dirs.cdi_dir,
        base_spec=base_spec,
        claim_spec=claim_spec,
        metadata_files=tuple(metadata_files),
        durable=dirs.synced,
        sync_dirs=(
            (dirs.cdi_dir, *(f.path.parent for f in metadata_files), claim_dir, dirs.metadata_root)
            if dirs.synced
            else ()
        ),
        status_devices=tuple(status),
        prepared=tuple(prepared_device(r) for r in records),
        record=record,
    )


def _status_entry(*, driver: str, device: AllocatedDevice, extras: StatusExtras, now: str) -> dict[str, Any]:
    ready: StatusCondition = extras.ready or {
        "type": "Ready",
        "status": "True",
        "reason": READY_REASON,
        "lastTransitionTime": now,
        "message": "prepared by fakedev",
    }
    entry: dict[str, Any] = {
        "driver": driver,
        "pool": device.pool,
        "device": device.device,
        "conditions": [*extras.before_ready, ready, *extras.after_ready],
    }
    if extras.network_data is not None:
        entry["networkData"] = extras.network_data
    if device.share_id is not None:
        entry["shareID"] = device.share_id
    return entry


def compute_unprepare_plan(
    *,
    driver: str,
    node_name: str,
    uid: str,
    namespace: str,
    name: str,
    record: ClaimRecord | None,
    dirs: PrepareDirs,
    node_nics: Mapping[str, HostNic],
) -> UnpreparePlan:
    """Everything a prepare of the claim may have left on the node, record or not: files are named from the UID
    (and the metadata directory from the namespace, name and UID), so they are found even when the plugin died
    before recording the claim, and never include another claim's; so is the MAC of a NIC it configured.
    ``node_nics``: the node's NICs by device name (empty for a driver without NICs)."""
    metadata_files: tuple[Path, ...] = ()
    if record is not None:
        recorded = _recorded_metadata_dir(record)
        metadata_dir, legacy = (dirs.metadata_root / recorded if recorded else None), None
        if metadata_dir is not None:
            metadata_files = _recorded_metadata_files(record, claim_dir=metadata_dir)
    else:
        metadata_dir = dirs.metadata_root / metadata.host_claim_dir_name(namespace=namespace, name=name, uid=uid)
        legacy = dirs.metadata_root / metadata.legacy_claim_dir_name(namespace=namespace, name=name)
    return UnpreparePlan(
        uid=uid,
        claim_spec_files=cdi_layout.claim_spec_files(driver=driver, claim_uid=uid),
        metadata_spec_prefix=metadata.metadata_spec_prefix(driver=driver, claim_uid=uid),
        metadata_spec_files=tuple(record["cdiSpecFiles"]) if record else None,
        cdi_dir=dirs.cdi_dir,
        metadata_dir=metadata_dir,
        metadata_files=metadata_files,
        legacy_metadata_dir=legacy,
        # Without fsync a power cut may bring a removed file back: named from this UID, it is one no claim uses.
        sync_dirs=(dirs.cdi_dir, dirs.metadata_root) if dirs.synced else (),
        mdevs=tuple(record["mdevs"]) if record else (),
        nics=tuple(prepared_nic(n) for n in record["nics"]) if record else (),
        stray_nics=()
        if record
        else tuple(
            StrayNic(
                host_ifname=nic.ifname,
                claim_mac=claim_mac(node_name=node_name, claim_uid=uid, device=device),
                hardware_mac=nic.mac,
                hardware_mtu=nic.mtu,
            )
            for device, nic in sorted(node_nics.items())
        ),
    )


def compute_recorded_files(record: ClaimRecord, *, dirs: PrepareDirs, base_spec: SpecFile | None) -> tuple[Path, ...]:
    """Every file a recorded claim's containers depend on: its CDI specs (and the node's base spec, whose IDs it
    was answered with) and the metadata files they mount. Any of them missing (a reboot empties the CDI directory;
    a file removed by hand) means the claim must be prepared again before it is answered from the checkpoint."""
    node = (base_spec.file_name,) if base_spec is not None else ()
    specs = tuple(dirs.cdi_dir / f for f in (*node, *record["cdiSpecFiles"]))
    recorded = _recorded_metadata_dir(record)
    if not recorded:
        return specs
    return (*specs, *_recorded_metadata_files(record, claim_dir=dirs.metadata_root / recorded))


def _recorded_metadata_files(record: ClaimRecord, *, claim_dir: Path) -> tuple[Path, ...]:
    """The metadata file of each top-level request of a recorded claim, in its metadata directory."""
    requests = dict.fromkeys(metadata.top_level_request(r) for d in record["devices"] for r in d["requestNames"])
    return tuple(claim_dir / r / metadata.HOST_FILE_NAME for r in requests)


def _recorded_metadata_dir(record: ClaimRecord) -> str:
    """The record's metadata directory if it is a plain name inside the root, else "" (none to touch)."""
    name = record["metadataDir"]
    return name if name and name not in (".", "..") and "/" not in name and "\0" not in name else ""
