"""The conformance catalogue: named checks of a DRA driver's kubelet plugin, each citing the contract it verifies.

Clauses refer to ``shared/reference/kubelet-contract.md`` (§1 services and messages, §2 kubelet behaviour, §3 what
the Go helper library gives every driver, §4 device metadata, §5 claim status) and to the CDI specification. A
*required* check is behaviour a kubelet depends on; a *recommended* one is expected of a 1.37 driver but optional
(KEP-5304 metadata, ``status.devices``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc

import cdi
from harness.conformance.context import POD_START_TIMEOUT, ConformanceContext
from harness.conformance.verdicts import CheckError, CheckFailed, CheckSkipped, Need, NeedKind
from harness.errors import DraCallError, NotReadyError
from harness.kube.podstart import StartFailure
from harness.procs import wait_for
from kubeclient import JsonObj
from kubeclient.resources import PODS, RESOURCE_CLAIMS
from kubeletapi import DRA_V1_VERSION, HEALTH_V1_VERSION, HEALTH_V1ALPHA1_VERSION
from kubeletapi import health_v1_pb2 as h1
from kubeletapi import health_v1_pb2_grpc as h1_grpc
from kubeletapi.types import ClaimRef, DeviceHealth, PreparedDevice, PrepareResult

EVENT_PATIENCE: Final = 30.0
"""How long a prepare failure the node reported once may wait for its retry (a kubelet backs off 10–15 s)."""
FETCH_FAILED: Final = "fetch ResourceClaim"
"""The kubelet's words when it could not read the claim itself: not the driver's doing."""
STATUS_GRACE: Final = 5.0
"""How long after a successful prepare the driver's status.devices entries may take to appear."""
METADATA_VERSIONS: Final = ("metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1")


__all__ = ["CATALOG", "Check", "CheckError", "CheckFailed", "CheckSkipped", "select"]

ONE_DEVICE: Final = (Need(kind=NeedKind.DEVICES, count=1),)


@dataclass(frozen=True, kw_only=True)
class Check:
    id: str
    title: str
    clause: str
    required: bool
    run: Callable[[ConformanceContext], None]
    after: tuple[str, ...] = ("registration.handshake",)
    """Checks that must have passed first (else this one is BLOCKED)."""
    needs: tuple[Need, ...] = ()
    """What the driver must give (compared with its offer before the check runs; unmet: SKIPPED)."""
    calls_driver: bool = True
    """Makes DRA calls: skipped at once after the driver left one unanswered until its deadline."""


def _fail(message: str) -> CheckFailed:
    return CheckFailed(message)


def _expect(condition: object, message: str) -> None:
    if not condition:
        raise _fail(message)


# -- registration --------------------------------------------------------------------------------------------------


def check_handshake(ctx: ConformanceContext) -> None:
    try:
        inst = ctx.wait_registered()
    except AssertionError as exc:
        raise _fail(str(exc)) from None
    reg = inst.registration
    ctx.note("sent", "GetInfo and NotifyRegistrationStatus on the registration socket, as the kubelet's plugin watcher")
    ctx.note("received", f"driver {reg.driver!r}, endpoint {reg.endpoint}, versions {list(reg.advertised)}")
    _expect(bool(reg.driver), "PluginInfo.name (the driver name) is empty")
    _expect(reg.endpoint.is_absolute(), f"endpoint {reg.endpoint} is not an absolute path")
    _expect(reg.endpoint.exists(), f"the advertised endpoint {reg.endpoint} does not exist")
    refused = ctx.node.refusals()
    _expect(not refused, f"an earlier registration attempt was refused: {refused[0] if refused else ''}")


def check_versions(ctx: ConformanceContext) -> None:
    advertised = ctx.wait_registered().registration.advertised
    dra = [v for v in advertised if v.endswith(".DRAPlugin")]
    _expect(DRA_V1_VERSION in dra, f"v1.DRAPlugin is not advertised (advertised: {list(advertised)})")
    _expect(
        dra[0] == DRA_V1_VERSION,
        f"the kubelet takes the first DRA version it knows; {dra[0]} is listed before v1.DRAPlugin",
    )


# -- slices --------------------------------------------------------------------------------------------------------


def check_slices(ctx: ConformanceContext) -> None:
    ctx.offer()  # waits for the first slice once; the checks' needs use the same look
    slices = ctx.slices()
    ctx.note("sent", f"list ResourceSlices with spec.nodeName={ctx.node_name}, spec.driver={ctx.driver_name}")
    ctx.note(
        "received",
        "; ".join(f"{s['metadata']['name']}: {len(s['spec'].get('devices') or [])} devices" for s in slices) or "none",
    )
    _expect(bool(slices), f"the driver published no ResourceSlice for node {ctx.node_name} within 30s")
    for s in slices:
        owners = [o for o in s["metadata"].get("ownerReferences") or [] if o.get("kind") == "Node"]
        _expect(
            bool(owners) and owners[0].get("name") == ctx.node_name,
            f"slice {s['metadata']['name']} is not owned by Node {ctx.node_name}",
        )
        _expect(int(s["spec"]["pool"].get("generation", 0)) >= 1, f"slice {s['metadata']['name']} has no generation")
    pools: dict[str, list[JsonObj]] = {}
    for s in slices:
        pools.setdefault(s["spec"]["pool"]["name"], []).append(s)
    for pool, members in pools.items():
        counts = {int(m["spec"]["pool"]["resourceSliceCount"]) for m in members}
        gens = {int(m["spec"]["pool"]["generation"]) for m in members}
        _expect(len(gens) == 1, f"pool {pool} mixes generations {sorted(gens)}")
        _expect(counts == {len(members)}, f"pool {pool}: resourceSliceCount {sorted(counts)} but {len(members)} slices")
    _expect(any(s["spec"].get("devices") for s in slices), "no slice publishes any device")


# -- prepare / unprepare -------------------------------------------------------------------------------------------


def _prepared_ok(ctx: ConformanceContext, claim: JsonObj) -> tuple[ClaimRef, list[PreparedDevice]]:
    ref = ctx.ref(claim)
    try:
        result = ctx.prepare([ref])
    except DraCallError as exc:
        raise _fail(f"NodePrepareResources failed as an RPC: {exc}") from None
    _expect(ref.uid in result, f"the answer has no entry for claim {ref.uid}")
    _expect(not result[ref.uid].error, f"prepare of an allocated claim failed: {result[ref.uid].error}")
    return ref, list(result[ref.uid].devices)


def check_prepare(ctx: ConformanceContext) -> None:
    claim = ctx.allocated_claim()
    ref, devices = _prepared_ok(ctx, claim)
    results = claim["status"]["allocation"]["devices"]["results"]
    got = sorted((d.pool, d.device) for d in devices)
    want = sorted((r["pool"], r["device"]) for r in results if r["driver"] == ctx.driver_name)
    _expect(got == want, f"prepared devices {got} do not match the allocation {want}")
    _expect(all(d.cdi_device_ids for d in devices), "a prepared device has no CDI device ID")
    ctx.unprepare([ref])


def check_prepare_idempotent(ctx: ConformanceContext) -> None:
    claim = ctx.allocated_claim()
    ref, first = _prepared_ok(ctx, claim)
    _, second = _prepared_ok(ctx, claim)
    _expect(first == second, f"a second prepare of the same claim answered differently:\n{first}\n{second}")
    ctx.unprepare([ref])


def check_unprepare_idempotent(ctx: ConformanceContext) -> None:
    claim = ctx.allocated_claim()
    ref, _ = _prepared_ok(ctx, claim)
    for attempt in ("first", "second"):
        try:
            answer = ctx.unprepare([ref])
        except DraCallError as exc:
            raise _fail(f"the {attempt} unprepare failed as an RPC: {exc}") from None
        _expect(answer.get(ref.uid) == "", f"the {attempt} unprepare answered {answer.get(ref.uid)!r}")


def check_unprepare_unknown(ctx: ConformanceContext) -> None:
    ref = ClaimRef(uid=f"00000000-0000-4000-8000-{os.urandom(6).hex()}", namespace=ctx.namespace, name="never-seen")
    try:
        answer = ctx.unprepare([ref])
    except DraCallError as exc:
        raise _fail(f"unprepare of an unknown claim failed as an RPC: {exc}") from None
    _expect(answer.get(ref.uid) == "", f"unprepare of an unknown claim must succeed; answered {answer.get(ref.uid)!r}")


def check_per_claim_errors(ctx: ConformanceContext) -> None:
    good = ctx.allocated_claim()
    missing = ClaimRef(
        uid=f"00000000-0000-4000-8000-{os.urandom(6).hex()}", namespace=ctx.namespace, name="does-not-exist"
    )
    refs = [ctx.ref(good), missing]
    try:
        answer = ctx.prepare(refs)
    except DraCallError as exc:
        raise _fail(f"one bad claim failed the whole call ({exc}); errors must be per claim") from None
    _expect(set(answer) == {r.uid for r in refs}, f"entries for {sorted(answer)}, expected both claims")
    _expect(not answer[refs[0].uid].error, f"the good claim failed: {answer[refs[0].uid].error}")
    _expect(bool(answer[refs[1].uid].error), "the claim that does not exist got no error")
    ctx.unprepare(refs[:1])


def _expect_refused(ctx: ConformanceContext, ref: ClaimRef, what: str) -> None:
    try:
        answer = ctx.prepare([ref])
    except DraCallError:
        return  # refusing the whole call is allowed here; per-claim-errors checks the finer behaviour
    entry = answer.get(ref.uid)
    _expect(
        entry is not None and bool(entry.error) and not entry.devices,
        f"{what} was prepared: {entry.devices if entry else 'no entry'}",
    )


def check_rejects_unallocated(ctx: ConformanceContext) -> None:
    _expect_refused(ctx, ctx.ref(ctx.unallocated_claim()), "an unallocated claim")


def check_rejects_replaced(ctx: ConformanceContext) -> None:
    claim = ctx.allocated_claim()
    stale = ClaimRef(
        uid=f"00000000-0000-4000-8000-{os.urandom(6).hex()}",
        namespace=claim["metadata"]["namespace"],
        name=claim["metadata"]["name"],
    )
    _expect_refused(ctx, stale, "a claim whose UID does not match the API object (a replaced claim)")


def check_concurrent(ctx: ConformanceContext) -> None:
    claims = [ctx.allocated_claim() for _ in range(3)]
    refs = [ctx.ref(c) for c in claims]

    inst = ctx.wait_registered()

    async def together() -> list[dict[str, PrepareResult] | BaseException]:
        calls = [inst.connection.prepare([r], version=inst.registration.dra_version) for r in refs]
        return list(await asyncio.gather(*calls, return_exceptions=True))

    ctx.note("sent", f"{len(refs)} concurrent NodePrepareResources calls, one claim each")
    answers = ctx.loop.call(together())
    ctx.note("received", "; ".join(str(a) if isinstance(a, BaseException) else "answered" for a in answers))
    for ref, answer in zip(refs, answers, strict=True):
        if isinstance(answer, BaseException):
            raise _fail(f"a concurrent prepare failed: {answer}")
        _expect(not answer[ref.uid].error, f"a concurrent prepare failed: {answer[ref.uid].error}")
    ctx.unprepare(refs)


def check_shared_claim(ctx: ConformanceContext) -> None:
    claim = ctx.allocated_claim(pods=2)
    ref, devices = _prepared_ok(ctx, claim)
    _expect(bool(devices), "a claim reserved for two pods was prepared without devices")
    ctx.unprepare([ref])


# -- what prepare leaves on the node -------------------------------------------------------------------------------


def check_cdi(ctx: ConformanceContext) -> None:
    claim = ctx.allocated_claim()
    ref, devices = _prepared_ok(ctx, claim)
    registry = cdi.load_registry(spec_dirs=[ctx.cdi_dir])
    _expect(not registry.errors, f"unreadable CDI specs: {registry.errors}")
    for loaded in cdi.scan_spec_dirs(spec_dirs=[ctx.cdi_dir]).specs:
        try:
            cdi.validate_spec(loaded.spec, source=str(loaded.path))
        except cdi.CdiError as exc:
            raise _fail(f"invalid CDI spec: {exc}") from None
    for d in devices:
        for cid in d.cdi_device_ids:
            try:
                resolved = registry.resolve(cid)
            except cdi.CdiError as exc:
                raise _fail(f"CDI ID {cid} does not resolve in {ctx.cdi_dir}: {exc}") from None
            _expect(not resolved.device.container_edits.is_empty(), f"CDI device {cid} has empty container edits")
    ctx.unprepare([ref])


def check_metadata(ctx: ConformanceContext) -> None:
    claim = ctx.allocated_claim()
    ref, devices = _prepared_ok(ctx, claim)
    meta_ids = [i for d in devices for i in d.cdi_device_ids if "/metadata=" in i]
    if not meta_ids:
        ctx.unprepare([ref])
        raise CheckSkipped("the driver publishes no KEP-5304 device metadata (no <driver>/metadata CDI ID)")
    first_ids = devices[0].cdi_device_ids
    _expect(meta_ids[0] in first_ids, "the metadata CDI ID must ride on the first device of its request")
    registry = cdi.load_registry(spec_dirs=[ctx.cdi_dir])
    mounts = registry.resolve(meta_ids[0]).device.container_edits.mounts
    _expect(len(mounts) == 1, f"the metadata CDI device {meta_ids[0]} must have one mount; it has {len(mounts)}")
    (mount,) = mounts
    expected = (
        f"/var/run/kubernetes.io/dra-device-attributes/resourceclaims/{ref.name}/dev/{ctx.driver_name}-metadata.json"
    )
    _expect(mount.container_path == expected, f"metadata mounted at {mount.container_path}, expected {expected}")
    _expect(set(mount.options) >= {"ro", "bind"}, f"metadata mount options {mount.options} lack ro,bind")
    docs = [json.loads(line) for line in Path(mount.host_path).read_text().splitlines() if line.strip()]
    _expect(
        [d.get("apiVersion") for d in docs][:2] == list(METADATA_VERSIONS),
        f"the stream must carry {METADATA_VERSIONS}, newest first; got {[d.get('apiVersion') for d in docs]}",
    )
    _expect(docs[0]["metadata"]["uid"] == ref.uid, "metadata.uid is not the claim's UID")
    names = {d["name"] for r in docs[0]["requests"] for d in r["devices"]}
    _expect(names == {d.device for d in devices}, f"metadata lists {names}")
    ctx.unprepare([ref])


def _own_status_entries(claim: JsonObj, *, driver: str) -> list[JsonObj]:
    return [e for e in (claim.get("status") or {}).get("devices") or [] if e.get("driver") == driver]


def check_status(ctx: ConformanceContext) -> None:
    claim = ctx.allocated_claim()
    ref, _ = _prepared_ok(ctx, claim)
    # A driver may write status.devices after answering (fakedev does, off the reply's critical path): wait a little.
    stored: JsonObj = {}

    def written() -> bool:
        nonlocal stored
        stored = ctx.client.get(RESOURCE_CLAIMS, ref.name, namespace=ref.namespace)
        return bool(_own_status_entries(stored, driver=ctx.driver_name))

    with contextlib.suppress(NotReadyError):
        wait_for(written, timeout=STATUS_GRACE, what="status.devices")
    entries = _own_status_entries(stored, driver=ctx.driver_name)
    if not entries:
        ctx.unprepare([ref])
        raise CheckSkipped(f"the driver wrote no status.devices entries within {STATUS_GRACE:.0f}s of its answer")
    results = {
        (r["pool"], r["device"])
        for r in stored["status"]["allocation"]["devices"]["results"]
        if r["driver"] == ctx.driver_name
    }
    _expect({(e["pool"], e["device"]) for e in entries} <= results, "a status entry names a device not allocated")
    managers = {m["manager"] for m in stored["metadata"].get("managedFields") or [] if m.get("subresource") == "status"}
    _expect(bool(managers - {"kube-scheduler", "fakedev-harness"}), "no driver field manager owns status.devices")
    ctx.unprepare([ref])


def check_cleanup(ctx: ConformanceContext) -> None:
    claim = ctx.allocated_claim()
    ref, _ = _prepared_ok(ctx, claim)
    # The claim's pod goes first: a real kubelet runs it too and would prepare the claim again right after the
    # unprepare whose leftovers are checked (seen once in CI: prepare, unprepare, the kubelet's prepare, in 20 ms).
    ctx.delete_pods()
    ctx.unprepare([ref])
    left = [p.name for p in ctx.cdi_files() if ref.uid in p.read_text(errors="replace") or ref.uid in p.name]
    _expect(not left, f"CDI specs still name claim {ref.uid} after unprepare: {left}")


def check_restart(ctx: ConformanceContext) -> None:
    claim = ctx.allocated_claim()
    ref, before = _prepared_ok(ctx, claim)
    ctx.restart_driver(kill=True)
    _, after = _prepared_ok(ctx, claim)
    _expect(before == after, f"after kill -9 and restart, prepare answered differently:\n{before}\n{after}")
    answer = ctx.unprepare([ref])
    _expect(answer.get(ref.uid) == "", f"unprepare after restart answered {answer.get(ref.uid)!r}")


# -- connection and health -----------------------------------------------------------------------------------------


def _accepted(endpoint: Path) -> set[str]:
    """Inodes of the server side of connections accepted on ``endpoint`` (state 03 in /proc/net/unix)."""
    found = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 8 and os.path.normpath(cols[7]) == str(endpoint) and cols[5] == "03":
            found.add(cols[6])
    return found


async def _watch_connection(channel: grpc.aio.Channel, states: list[grpc.ChannelConnectivity]) -> None:
    """Append every change after the last state in ``states``: a channel served on one connection has none."""
    state = states[-1]
    while True:
        await channel.wait_for_state_change(state)
        state = channel.get_state(try_to_connect=False)
        # A change is a change even when READY again by the time we look: the connection was replaced.
        states.append(state)


def check_single_connection(ctx: ConformanceContext) -> None:
    inst = ctx.wait_registered()

    async def settled() -> None:
        # The node's own connection to a just (re-)registered driver may still be coming up (restart.recovery runs
        # just before); it must be counted before the check starts, not mistaken for a second connection of ours.
        await asyncio.wait_for(inst.connection.channel.channel_ready(), 10)

    try:
        ctx.loop.call(settled())
    except (TimeoutError, concurrent.futures.TimeoutError):
        raise _fail(f"the driver's endpoint {inst.registration.endpoint} accepted no connection within 10s") from None
    conn = ctx.fresh_connection()
    claim = ctx.allocated_claim()
    ref = ctx.ref(claim)
    endpoint = inst.registration.endpoint
    before = _accepted(endpoint)
    seen: set[str] = set()
    states: list[grpc.ChannelConnectivity] = []
    version = inst.registration.dra_version

    async def session() -> None:
        # The verdict is our channel's: a driver that closes or replaces connections (GOAWAY, max connection age,
        # a server per call) takes it out of READY. Accepted sockets are only the evidence quoted: gRPC's client
        # has been seen (3 suite runs in ~20 under load) to open a second socket of its own with the first READY.
        await conn.prepare([ref], version=version)
        seen.update(_accepted(endpoint) - before)
        # The first state is taken here, not in the task: a watcher cancelled before its first step must not leave
        # the list empty (an empty list would read as a dropped connection).
        states.append(conn.channel.get_state(try_to_connect=False))
        watcher = asyncio.create_task(_watch_connection(conn.channel, states))
        try:
            if inst.registration.health_version:
                stream = conn.watch_health(version=inst.registration.health_version)
                await asyncio.wait_for(anext(stream), 10)
                await stream.aclose()
            for call in (conn.unprepare, conn.prepare, conn.unprepare, conn.prepare):
                await call([ref], version=version)
                seen.update(_accepted(endpoint) - before)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    try:
        ctx.loop.call(session())
    except (TimeoutError, concurrent.futures.TimeoutError):
        raise _fail("the driver advertises health but sent no first report within 10s of subscribing") from None
    finally:
        ctx.loop.call(conn.close())
    ctx.unprepare([ref])
    _expect(
        states == [grpc.ChannelConnectivity.READY],
        f"the driver did not keep one connection: our channel went {' → '.join(c.name for c in states)} during a "
        f"session of 5 calls (the endpoint {endpoint} accepted {len(seen)} connections from it)",
    )


def check_health(ctx: ConformanceContext) -> None:
    inst = ctx.wait_registered()
    version = inst.registration.health_version
    if version is None:
        # 1.37: a driver that does not implement health must say Unimplemented when asked anyway.
        async def ask() -> grpc.StatusCode | None:
            async with grpc.aio.insecure_channel(f"unix:{inst.registration.endpoint}") as ch:
                try:
                    stream = h1_grpc.DRAResourceHealthStub(ch).NodeWatchResources(h1.NodeWatchResourcesRequest())
                    await asyncio.wait_for(anext(aiter(stream)), 5)
                except grpc.aio.AioRpcError as exc:
                    return exc.code()
                except TimeoutError:
                    return None  # neither a report nor an error: named below
                return None

        code = ctx.loop.call(ask())
        _expect(
            code == grpc.StatusCode.UNIMPLEMENTED,
            "health is not advertised, so NodeWatchResources must be Unimplemented; "
            + (f"it answered {code.name}" if code is not None else "it neither failed nor reported within 5s"),
        )
        return
    _expect(version in (HEALTH_V1_VERSION, HEALTH_V1ALPHA1_VERSION), f"unknown health version {version}")
    published = {(s["spec"]["pool"]["name"], d["name"]) for s in ctx.slices() for d in s["spec"].get("devices") or []}
    conn = ctx.fresh_connection()

    async def first() -> list[DeviceHealth]:
        stream = conn.watch_health(version=version)
        report = await asyncio.wait_for(anext(stream), 10)
        await stream.aclose()
        return list(report)

    try:
        report = ctx.loop.call(first())
    except (TimeoutError, DraCallError, concurrent.futures.TimeoutError) as exc:
        raise _fail(f"no health report within 10 s of subscribing: {exc!r}") from None
    finally:
        ctx.loop.call(conn.close())
    _expect(bool(report), "the first health report is empty; it must describe the devices")
    unknown = {(d.pool, d.device) for d in report} - published
    _expect(not unknown, f"health reports devices the driver never published: {sorted(unknown)[:5]}")


# -- a pod, end to end ---------------------------------------------------------------------------------------------


def check_pod(ctx: ConformanceContext) -> None:
    claim = ctx.allocated_claim(managed=True, command="env; sleep 3600")
    pod_name = claim["status"]["reservedFor"][0]["name"]
    deadline = time.monotonic() + POD_START_TIMEOUT
    first_event: float | None = None
    while True:
        pod = ctx.client.get(PODS, pod_name, namespace=ctx.namespace)
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Running":
            break
        failure = ctx.start_failure(pod_name)
        if failure is not None and not failure.container:
            # A failed prepare is retried by the node (and an event is history): the verdict is a failure the node
            # repeated, or one no retry overcame within the patience. A container the runtime cannot create says
            # so in its current state.
            first_event = first_event or time.monotonic()
            repeated = failure.attempts >= 2 or time.monotonic() - first_event >= EVENT_PATIENCE
            failure = failure if repeated else None
        if failure is not None or phase == "Failed":
            ctx.note("received", f"pod {pod_name}: {failure.describe() if failure else phase}")
            raise _start_verdict(failure, pod=pod_name)
        if time.monotonic() >= deadline:
            raise CheckError(
                f"pod {pod_name} was neither Running nor failing to start after {POD_START_TIMEOUT:.0f}s "
                f"(phase {phase}); check the node's log for its container runtime"
            )
        time.sleep(0.2)
    ctx.note("received", f"pod {pod_name} Running")
    try:
        wait_for(
            lambda: bool(ctx.node.container_output(namespace=ctx.namespace, pod=pod_name)),
            timeout=20,
            what="container output",
        )
    except NotReadyError:
        raise CheckError(
            f"pod {pod_name} runs but no output of its container reached the harness within 20s; "
            "check the node's container log capture"
        ) from None
    ctx.client.delete(PODS, pod_name, namespace=ctx.namespace, grace_seconds=1)
    try:
        wait_for(lambda: ctx.node.torn_down(namespace=ctx.namespace, pod=pod_name), timeout=45, what="teardown")
    except NotReadyError:
        raise _fail(
            f"pod {pod_name} was not torn down within 45s of its deletion (unprepare did not succeed)"
        ) from None
    ctx.note("received", f"pod {pod_name} torn down, its claim unprepared")


def _start_verdict(failure: StartFailure | None, *, pod: str) -> Exception:
    """A pod that cannot start: the driver's fault when its prepare or its CDI edits are what failed."""
    if failure is None:
        return _fail(f"pod {pod} failed instead of running; its container exited")
    said = failure.describe()[:900]
    if FETCH_FAILED in failure.message:
        return CheckError(f"pod {pod} cannot start: {said}; the node could not read the claim (its authorization)")
    if failure.reason == "FailedPrepareDynamicResources" or "CDI" in failure.message:
        return _fail(f"pod {pod} cannot start: {said}")
    return CheckError(f"pod {pod} cannot start: {said}; check the node's container runtime")


CATALOG: Final = (
    Check(
        id="registration.handshake",
        calls_driver=False,
        title="registers through the kubelet handshake",
        after=(),
        clause="§2 Handshake, §1 Registration",
        required=True,
        run=check_handshake,
    ),
    Check(
        id="registration.versions",
        calls_driver=False,
        title="advertises v1.DRAPlugin as its first DRA version",
        clause="§2 Version choice, §3 GetInfo",
        required=True,
        run=check_versions,
    ),
    Check(
        id="slices.published",
        calls_driver=False,
        title="publishes node slices owned by the Node, consistent pools",
        clause="§3 ResourceSlices",
        required=True,
        run=check_slices,
    ),
    Check(
        id="prepare.basic",
        needs=ONE_DEVICE,
        title="prepares an allocated claim with its allocated devices",
        clause="§1 NodePrepareResources",
        required=True,
        run=check_prepare,
    ),
    Check(
        id="prepare.idempotent",
        needs=ONE_DEVICE,
        title="preparing twice gives the same answer",
        clause="§3 prepare is idempotent",
        required=True,
        run=check_prepare_idempotent,
    ),
    Check(
        id="unprepare.idempotent",
        needs=ONE_DEVICE,
        title="unpreparing twice succeeds",
        clause="§3 unprepare is idempotent",
        required=True,
        run=check_unprepare_idempotent,
    ),
    Check(
        id="unprepare.unknown-claim",
        title="unpreparing an unknown claim succeeds",
        clause="§3 unknown claim unprepare is success",
        required=True,
        run=check_unprepare_unknown,
    ),
    # Recommended, not required: the kubelet fails the pod start on an RPC error just as on a per-claim error, and
    # upstream's helper library itself fails the whole call when it cannot fetch or validate one claim.
    Check(
        id="errors.per-claim",
        needs=ONE_DEVICE,
        title="one bad claim gets a per-claim error, not an RPC error",
        clause="§1 NodePrepareResourceResponse.error, §3 errors are per claim",
        required=False,
        run=check_per_claim_errors,
    ),
    Check(
        id="prepare.rejects-unallocated",
        title="refuses to prepare an unallocated claim",
        clause="§3 rejects unallocated claims",
        required=True,
        run=check_rejects_unallocated,
    ),
    Check(
        id="prepare.rejects-replaced",
        needs=ONE_DEVICE,
        title="refuses a claim whose UID no longer matches (replaced claim)",
        clause="§3 rejects UID mismatches",
        required=True,
        run=check_rejects_replaced,
    ),
    Check(
        id="prepare.concurrent",
        needs=(Need(kind=NeedKind.DEVICES, count=3),),
        title="prepares different claims in concurrent calls",
        clause="§2 batches per pod run independently",
        required=True,
        run=check_concurrent,
    ),
    Check(
        id="claim.shared",
        needs=ONE_DEVICE,
        title="prepares a claim reserved for several pods",
        clause="§2 Prepare (shared claims)",
        required=True,
        run=check_shared_claim,
    ),
    Check(
        id="cdi.valid",
        needs=ONE_DEVICE,
        title="every returned CDI ID resolves to a valid spec with non-empty edits",
        clause="§3 CDI names, CDI spec (no empty edits)",
        required=True,
        run=check_cdi,
    ),
    Check(
        id="cleanup.nothing-left",
        needs=ONE_DEVICE,
        title="unprepare removes every CDI spec of the claim",
        clause="§3 Unprepare",
        required=True,
        run=check_cleanup,
    ),
    Check(
        id="restart.recovery",
        needs=ONE_DEVICE,
        title="after kill -9 and restart, prepare and unprepare still work",
        clause="§3 checkpoint, §7 plugin restart",
        required=True,
        run=check_restart,
    ),
    Check(
        id="connection.single",
        needs=ONE_DEVICE,
        title="serves DRA and health over one long-lived connection",
        clause="§2 Connection",
        required=True,
        run=check_single_connection,
    ),
    Check(
        id="health.stream",
        needs=(Need(kind=NeedKind.HEALTH_DEVICES),),
        title="health: a first report of published devices, or Unimplemented",
        clause="§2 Health, §3 health or Unimplemented",
        required=True,
        run=check_health,
    ),
    Check(
        id="metadata.kep5304",
        needs=ONE_DEVICE,
        title="writes KEP-5304 device metadata with both API versions",
        clause="§4 device metadata",
        required=False,
        run=check_metadata,
    ),
    Check(
        id="status.devices",
        needs=ONE_DEVICE,
        title="reports status.devices for allocated devices under its own field manager",
        clause="§5 claim status",
        required=False,
        run=check_status,
    ),
    Check(
        id="pod.end-to-end",
        needs=(Need(kind=NeedKind.RUNNABLE_POD),),
        title="a pod using a claim runs under runc with the CDI edits and is torn down",
        clause="§2 Prepare/Unprepare, CDI injection",
        required=True,
        run=check_pod,
    ),
)


def select(*, only: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> list[Check]:
    known = {c.id for c in CATALOG}
    unknown = sorted((set(only) | set(skip)) - known)
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; see --list")
    return [c for c in CATALOG if (not only or c.id in only) and c.id not in skip]
