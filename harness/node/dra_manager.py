"""The kubelet's DRA manager: prepare a pod's claims per driver, unprepare when the last pod is gone (contract §2).

Prepare: GET each claim, require the pod in ``status.reservedFor`` and every driver of the allocation registered,
checkpoint, then one ``NodePrepareResources`` per driver with the pod's not-yet-prepared claims; batches run in
order and the first error aborts. An RPC error, a per-claim error, an unknown UID in the answer or a missing entry
all fail the pod start. Unprepare runs when the last pod using a claim terminates; the claim may be gone from the API.

The checkpoint (``dra_manager_state``) has the kubelet's shape: ``{"Data": "<json>", "Checksum": <crc32 of Data>}``;
a wrong checksum refuses to start, as the kubelet does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from harness.errors import CheckpointCorruptError, DraCallError, PrepareError
from harness.node.plugins import PluginManager
from harness.node.podclaims import compute_pod_claims
from kubeclient import ApiError, KubeClient
from kubeclient.resources import RESOURCE_CLAIMS
from kubeletapi.types import ClaimRef, PreparedDevice

log = logging.getLogger("harness.node.dra")
CALLS_KEPT: Final = 1000

CHECKPOINT_VERSION: Final = "fakedev.node/dra-v1"
PREPARE_METHOD: Final = "NodePrepareResources"
UNPREPARE_METHOD: Final = "NodeUnprepareResources"


class DraObserver(Protocol):
    """Told of every NodePrepareResources / NodeUnprepareResources call the node makes (a fleet's metrics)."""

    def observe_dra_call(self, *, method: str, driver: str, seconds: float, ok: bool) -> None: ...


@dataclass(kw_only=True)
class ClaimInfo:
    uid: str
    namespace: str
    name: str
    drivers: list[str]
    pod_uids: set[str] = field(default_factory=set)
    devices: dict[str, list[PreparedDevice]] = field(default_factory=dict)
    """driver → devices, for every driver already prepared."""
    skip: dict[str, list[str]] = field(default_factory=dict)
    """driver → the node operations (gRPC calls) skipped for it (1.37 alpha skipNodeOperations)."""

    @property
    def ref(self) -> ClaimRef:
        return ClaimRef(uid=self.uid, namespace=self.namespace, name=self.name)

    @property
    def prepared(self) -> bool:
        return all(d in self.devices for d in self.drivers)

    def all_devices(self) -> list[PreparedDevice]:
        return [d for driver in self.drivers for d in self.devices.get(driver, [])]

    def to_json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "drivers": self.drivers,
            "podUIDs": sorted(self.pod_uids),
            "devices": {drv: [_device_json(d) for d in devs] for drv, devs in self.devices.items()},
            "skip": self.skip,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ClaimInfo:
        return cls(
            uid=doc["uid"],
            namespace=doc["namespace"],
            name=doc["name"],
            drivers=list(doc["drivers"]),
            pod_uids=set(doc["podUIDs"]),
            devices={drv: [_device_from_json(d) for d in devs] for drv, devs in doc["devices"].items()},
            skip={drv: list(ops) for drv, ops in (doc.get("skip") or {}).items()},
        )


def _device_json(d: PreparedDevice) -> dict[str, Any]:
    return {
        "requestNames": list(d.request_names),
        "pool": d.pool,
        "device": d.device,
        "cdiDeviceIDs": list(d.cdi_device_ids),
        "shareID": d.share_id,
    }


def _device_from_json(doc: Mapping[str, Any]) -> PreparedDevice:
    return PreparedDevice(
        request_names=tuple(doc["requestNames"]),
        pool=doc["pool"],
        device=doc["device"],
        cdi_device_ids=tuple(doc["cdiDeviceIDs"]),
        share_id=doc.get("shareID"),
    )


def is_reserved_for(reserved: Sequence[Mapping[str, Any]], *, pod_uid: str, pod_group: str | None) -> bool:
    """The pod may use the claim: it is reserved for the pod, or (1.37 beta DRAWorkloadResourceClaims) for the
    PodGroup the pod belongs to — one entry for the whole group, however many pods it has."""
    for r in reserved:
        if r.get("uid") == pod_uid and r.get("resource", "pods") == "pods":
            return True
        if pod_group and r.get("resource") == "podgroups" and r.get("name") == pod_group:
            return True
    return False


PREPARE: Final = "NodePrepareResources"
UNPREPARE: Final = "NodeUnprepareResources"


def compute_skipped_operations(results: Sequence[Mapping[str, Any]], *, driver: str) -> frozenset[str]:
    """The calls skipped for ``driver`` in a claim: those every one of its allocated devices skips ("*" is both;
    unknown values are ignored, as the API asks of the kubelet)."""
    sets = []
    for r in results:
        if r.get("driver") != driver:
            continue
        ops = set(r.get("skipNodeOperations") or ())
        sets.append({PREPARE, UNPREPARE} if "*" in ops else ops & {PREPARE, UNPREPARE})
    return frozenset(set.intersection(*sets)) if sets else frozenset()


def render_checkpoint(claims: Mapping[str, ClaimInfo]) -> bytes:
    data = json.dumps(
        {"version": CHECKPOINT_VERSION, "entries": [c.to_json() for c in claims.values()]}, sort_keys=True
    )
    return json.dumps({"Data": data, "Checksum": zlib.crc32(data.encode())}).encode()


def parse_checkpoint(raw: bytes, *, source: str) -> dict[str, ClaimInfo]:
    try:
        outer = json.loads(raw)
        data = outer["Data"]
        if zlib.crc32(data.encode()) != outer["Checksum"]:
            raise CheckpointCorruptError(f"{source}: checksum mismatch; refusing to start (as the kubelet does)")
        inner = json.loads(data)
        if inner.get("version") != CHECKPOINT_VERSION:
            raise CheckpointCorruptError(f"{source}: unknown version {inner.get('version')!r}")
        return {e["uid"]: ClaimInfo.from_json(e) for e in inner["entries"]}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointCorruptError(f"{source}: unreadable checkpoint: {exc}") from exc


@dataclass(kw_only=True)
class DraManager:
    node_name: str
    client: KubeClient
    plugins: PluginManager
    checkpoint_path: Path
    claims: dict[str, ClaimInfo] = field(default_factory=dict)
    calls: deque[tuple[str, str, list[str]]] = field(default_factory=lambda: deque(maxlen=CALLS_KEPT))
    """(method, driver, claim UIDs) of the latest gRPC calls, in order — what tests read; bounded, since a fleet's
    nodes run for days."""
    observer: DraObserver | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def load(self) -> None:
        try:
            raw = self.checkpoint_path.read_bytes()
        except FileNotFoundError:
            return
        self.claims = parse_checkpoint(raw, source=str(self.checkpoint_path))

    def _save(self) -> None:
        tmp = self.checkpoint_path.with_suffix(".tmp")
        tmp.write_bytes(render_checkpoint(self.claims))
        tmp.replace(self.checkpoint_path)

    def forget_prepared(self) -> None:
        """After a reboot: keep which pods use which claims, but treat every claim as not prepared."""
        for info in self.claims.values():
            info.devices.clear()
        if self.claims:
            self._save()

    def claims_of_pod(self, pod_uid: str) -> list[ClaimInfo]:
        return [c for c in self.claims.values() if pod_uid in c.pod_uids]

    async def prepare_pod(self, pod: Mapping[str, Any]) -> dict[str, list[PreparedDevice]]:
        """Prepare every claim of ``pod``; returns claim name → devices (all drivers)."""
        async with self._lock:
            return await self._prepare_pod(pod)

    async def _prepare_pod(self, pod: Mapping[str, Any]) -> dict[str, list[PreparedDevice]]:
        meta = pod["metadata"]
        pod_uid, namespace = meta["uid"], meta["namespace"]
        infos: list[ClaimInfo] = []
        for pc in compute_pod_claims(pod):
            if pc.claim_name is None:
                raise PrepareError(f"the ResourceClaim for pod claim {pc.pod_claim_name!r} was not created yet")
            claim = await self._get_claim(namespace, pc.claim_name)
            group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
            infos.append(self._claim_info(claim, pod_uid=pod_uid, pod_group=group))
        for driver in sorted({d for info in infos for d in info.drivers if PREPARE not in info.skip.get(d, ())}):
            if self.plugins.instance_for(driver) is None:
                raise PrepareError(f"DRA driver {driver} is not registered on node {self.node_name}")
        for info in infos:
            self.claims.setdefault(info.uid, info).pod_uids.add(pod_uid)
        self._save()
        for driver in sorted({d for info in infos for d in info.drivers}):
            pending = [
                self.claims[i.uid] for i in infos if driver in i.drivers and driver not in self.claims[i.uid].devices
            ]
            for info in [i for i in pending if PREPARE in i.skip.get(driver, ())]:
                info.devices[driver] = []  # every device of this driver says the call is not needed
            pending = [i for i in pending if PREPARE not in i.skip.get(driver, ())]
            if pending:
                await self._prepare_batch(driver, pending)
        self._save()
        return {i.name: self.claims[i.uid].all_devices() for i in infos}

    async def _get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return await asyncio.to_thread(self.client.get, RESOURCE_CLAIMS, name, namespace=namespace)
        except ApiError as exc:
            raise PrepareError(f"cannot get ResourceClaim {namespace}/{name}: {exc}") from exc

    def _claim_info(self, claim: Mapping[str, Any], *, pod_uid: str, pod_group: str | None = None) -> ClaimInfo:
        meta, status = claim["metadata"], claim.get("status") or {}
        if not is_reserved_for(status.get("reservedFor") or [], pod_uid=pod_uid, pod_group=pod_group):
            raise PrepareError(
                f"neither the pod nor its PodGroup is in status.reservedFor of ResourceClaim "
                f"{meta['namespace']}/{meta['name']}"
            )
        allocation = status.get("allocation")
        if not allocation:
            raise PrepareError(f"ResourceClaim {meta['namespace']}/{meta['name']} is not allocated")
        known = self.claims.get(meta["uid"])
        if known is not None:
            return known
        results = (allocation.get("devices") or {}).get("results") or []
        drivers = sorted({r["driver"] for r in results})
        skip = {d: sorted(ops) for d in drivers if (ops := compute_skipped_operations(results, driver=d))}
        return ClaimInfo(uid=meta["uid"], namespace=meta["namespace"], name=meta["name"], drivers=drivers, skip=skip)

    async def _prepare_batch(self, driver: str, infos: Sequence[ClaimInfo]) -> None:
        inst = self.plugins.instance_for(driver)
        if inst is None:
            raise PrepareError(f"DRA driver {driver} is not registered on node {self.node_name}")
        refs = [i.ref for i in infos]
        self.calls.append((PREPARE_METHOD, driver, [r.uid for r in refs]))
        started = time.perf_counter()
        try:
            answer = await inst.connection.prepare(refs, version=inst.registration.dra_version)
        except DraCallError as exc:
            self._observe(PREPARE_METHOD, driver=driver, started=started, ok=False)
            raise PrepareError(f"NodePrepareResources of {driver} failed: {exc}") from exc
        self._observe(PREPARE_METHOD, driver=driver, started=started, ok=all(not r.error for r in answer.values()))
        unknown = set(answer) - {r.uid for r in refs}
        if unknown:
            raise PrepareError(f"{driver} answered for claims it was not asked about: {sorted(unknown)}")
        for info in infos:
            result = answer.get(info.uid)
            if result is None:
                raise PrepareError(f"{driver} returned no result for claim {info.namespace}/{info.name}")
            if result.error:
                # The kubelet's words (the differential test compares them): the claim's name, the driver's error.
                raise PrepareError(f"NodePrepareResources failed for ResourceClaim {info.name}: {result.error}")
            info.devices[driver] = list(result.devices)

    async def unprepare_pod(self, pod_uid: str) -> None:
        """Release the pod's claims; unprepare (per driver) those no other pod uses. Raises PrepareError to retry."""
        async with self._lock:
            for info in self.claims_of_pod(pod_uid):
                info.pod_uids.discard(pod_uid)
            self._save()
            orphans = [c for c in self.claims.values() if not c.pod_uids]
            for driver in sorted({d for c in orphans for d in c.devices}):
                batch = [c for c in orphans if driver in c.devices]
                for c in [c for c in batch if UNPREPARE in c.skip.get(driver, ())]:
                    c.devices.pop(driver, None)
                batch = [c for c in batch if UNPREPARE not in c.skip.get(driver, ())]
                if batch:
                    await self._unprepare_batch(driver, batch)
            for c in orphans:
                if not c.devices:
                    del self.claims[c.uid]
            self._save()

    async def _unprepare_batch(self, driver: str, infos: Sequence[ClaimInfo]) -> None:
        inst = self.plugins.instance_for(driver)
        if inst is None:
            raise PrepareError(f"cannot unprepare: DRA driver {driver} is not registered on node {self.node_name}")
        refs = [i.ref for i in infos]
        self.calls.append((UNPREPARE_METHOD, driver, [r.uid for r in refs]))
        started = time.perf_counter()
        try:
            answer = await inst.connection.unprepare(refs, version=inst.registration.dra_version)
        except DraCallError as exc:
            self._observe(UNPREPARE_METHOD, driver=driver, started=started, ok=False)
            raise PrepareError(f"NodeUnprepareResources of {driver} failed: {exc}") from exc
        self._observe(UNPREPARE_METHOD, driver=driver, started=started, ok=not any(answer.values()))
        failed = []
        for info in infos:
            error = answer.get(info.uid)
            if error is None:
                failed.append(f"{info.namespace}/{info.name}: no result")
            elif error:
                failed.append(f"{info.namespace}/{info.name}: {error}")
            else:
                info.devices.pop(driver, None)
        self._save()
        if failed:
            raise PrepareError(f"unprepare by {driver} failed: {'; '.join(failed)}")

    def _observe(self, method: str, *, driver: str, started: float, ok: bool) -> None:
        if self.observer is not None:
            self.observer.observe_dra_call(method=method, driver=driver, seconds=time.perf_counter() - started, ok=ok)

    def device_users(self, *, driver: str, pool: str, device: str) -> list[tuple[ClaimInfo, PreparedDevice]]:
        """Claims (and the prepared device entry) that hold a device — to map health reports to pods."""
        found = []
        for info in self.claims.values():
            for d in info.devices.get(driver, []):
                if d.pool == pool and d.device == device:
                    found.append((info, d))
        return found
