"""A deliberately faulty DRA driver: fakedev's plugin with exactly one contract violation switched on.

Usage: ``python -m tests.drivers.faulty_plugin --defect NAME -- <arguments of fakedev plugin>``. Each defect breaks the
one conformance check named in :data:`DEFECTS`, so the suite can show that every check is able to fail;
:data:`VARIANTS` are behaviours that are not one check's defect (one device only, a CDI spec naming a missing device
node, no slices, no answers) for the tests of the verdicts themselves. This is a test program, not part of the
product: it rewires the plugin's own classes in this process only.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

import cdi
import fakedev.driver.claims as claims_mod
import fakedev.driver.metadata as metadata_mod
import fakedev.driver.plan as plan_mod
import fakedev.driver.state as state_mod
import fakedev.plugin.registration as registration_mod
from fakedev.driver.core import ConcurrentDriver
from fakedev.driver.state import ClaimState
from fakedev.errors import ClaimError
from fakedev.kube import DriverApi, PendingClaim
from fakedev.plugin.health import HealthBoard
from kubeletapi.types import ClaimRef, DeviceHealth, Health, PreparedDevice, PrepareResult

_seen: dict[str, int] = {}
_unprepared: set[str] = set()


def wrong_type() -> None:
    setattr(registration_mod, "DRA_PLUGIN_TYPE", "CSIPlugin")  # noqa: B010 - rewiring a module on purpose


def v1beta1_first() -> None:
    original = registration_mod.RegistrationServicer.__init__

    def init(self: Any, **kw: Any) -> None:
        kw["versions"] = ["v1beta1.DRAPlugin", "v1.DRAPlugin", *kw["versions"][2:]]
        original(self, **kw)

    registration_mod.RegistrationServicer.__init__ = init  # type: ignore[method-assign]


def no_owner() -> None:
    DriverApi.node_owner = lambda self: None  # type: ignore[method-assign]


def _wrap_prepare(change: Callable[[ClaimRef, PrepareResult], PrepareResult]) -> None:
    """Change every prepare answer: the real prepare's and the one given for a claim already held (which the
    driver answers from its checkpoint without a prepare)."""
    original, original_held = ClaimState.prepare, ClaimState.held

    def prepare(self: ClaimState, ref: ClaimRef, *, ahead: PendingClaim | None = None) -> PrepareResult:
        return change(ref, original(self, ref, ahead=ahead))

    def held(self: ClaimState, ref: ClaimRef) -> PrepareResult | None:
        answer = original_held(self, ref)
        return None if answer is None else change(ref, answer)

    ClaimState.prepare = prepare  # type: ignore[method-assign]
    ClaimState.held = held  # type: ignore[method-assign]


def wrong_pool() -> None:
    def change(ref: ClaimRef, result: PrepareResult) -> PrepareResult:
        return PrepareResult(
            devices=tuple(
                PreparedDevice(
                    request_names=d.request_names,
                    pool="bogus-pool",
                    device=d.device,
                    cdi_device_ids=d.cdi_device_ids,
                    share_id=d.share_id,
                )
                for d in result.devices
            ),
            error=result.error,
        )

    _wrap_prepare(change)


def unstable_answer() -> None:
    def change(ref: ClaimRef, result: PrepareResult) -> PrepareResult:
        _seen[ref.uid] = _seen.get(ref.uid, 0) + 1
        if _seen[ref.uid] < 2 or result.error:
            return result
        return PrepareResult(
            devices=tuple(
                PreparedDevice(
                    request_names=d.request_names,
                    pool=d.pool,
                    device=d.device,
                    cdi_device_ids=tuple(reversed(d.cdi_device_ids)),
                    share_id=d.share_id,
                )
                for d in result.devices
            )
        )

    _wrap_prepare(change)


def _wrap_unprepare(check: Callable[[ClaimState, ClaimRef], str | None]) -> None:
    original = ClaimState.unprepare

    def unprepare(self: ClaimState, ref: ClaimRef) -> str:
        return check(self, ref) or original(self, ref)

    ClaimState.unprepare = unprepare  # type: ignore[method-assign]


def second_unprepare_fails() -> None:
    def check(state: ClaimState, ref: ClaimRef) -> str | None:
        if ref.uid in _unprepared:
            return "already unprepared"
        if ref.uid in state.claims:
            _unprepared.add(ref.uid)
        return None

    _wrap_unprepare(check)


def unknown_unprepare_fails() -> None:
    def remember(ref: ClaimRef, result: PrepareResult) -> PrepareResult:
        _seen[ref.uid] = _seen.get(ref.uid, 0) + 1
        return result

    _wrap_prepare(remember)
    _wrap_unprepare(lambda state, ref: None if ref.uid in state.claims or ref.uid in _seen else "no such claim")


def abort_on_claim_error() -> None:
    import fakedev.plugin.dra as dra_mod

    original = dra_mod.DraV1Servicer.NodePrepareResources

    def prepare(self: Any, request: Any, context: Any) -> Any:
        response = original(self, request, context)
        if any(entry.error for entry in response.claims.values()):
            context.abort(grpc.StatusCode.INTERNAL, "one claim failed, so the whole call fails")
        return response

    dra_mod.DraV1Servicer.NodePrepareResources = prepare  # type: ignore[method-assign]


def _wrap_plan(check: Callable[[Mapping[str, Any], str], Mapping[str, Any]]) -> None:
    original = claims_mod.compute_claim_plan

    def plan(claim: Mapping[str, Any], *, uid: str, driver: str, node_name: str) -> claims_mod.ClaimPlan:
        return original(check(claim, uid), uid=uid, driver=driver, node_name=node_name)

    setattr(state_mod, "compute_claim_plan", plan)  # noqa: B010


def prepare_unallocated() -> None:
    original = ClaimState.prepare

    def prepare(self: ClaimState, ref: ClaimRef, *, ahead: PendingClaim | None = None) -> PrepareResult:
        result = original(self, ref, ahead=ahead)
        return PrepareResult() if "is not allocated" in result.error else result

    ClaimState.prepare = prepare  # type: ignore[method-assign]


def ignore_uid() -> None:
    real_uids: dict[str, str] = {}

    def check(claim: Mapping[str, Any], uid: str) -> Mapping[str, Any]:
        real_uids[uid] = claim["metadata"]["uid"]
        return {**claim, "metadata": {**claim["metadata"], "uid": uid}}

    _wrap_plan(check)
    original = DriverApi.apply_claim_status

    def apply(self: DriverApi, *, namespace: str, name: str, uid: str, devices: Any) -> None:
        original(self, namespace=namespace, name=name, uid=real_uids.get(uid, uid), devices=devices)

    DriverApi.apply_claim_status = apply  # type: ignore[method-assign]


def busy() -> None:
    original = ConcurrentDriver.prepare
    running = threading.Lock()

    def prepare(self: ConcurrentDriver, claims: Any) -> Any:
        if not running.acquire(blocking=False):
            return {c.uid: PrepareResult(error="busy: another prepare is running") for c in claims}
        try:
            time.sleep(0.3)  # long enough for concurrent calls to meet
        finally:
            running.release()
        return original(self, claims)

    ConcurrentDriver.prepare = prepare  # type: ignore[method-assign]


def reject_shared() -> None:
    def check(claim: Mapping[str, Any], uid: str) -> Mapping[str, Any]:
        if len((claim.get("status") or {}).get("reservedFor") or []) > 1:
            raise ClaimError("this driver refuses claims shared by several pods")
        return claim

    _wrap_plan(check)


def junk_cdi_spec() -> None:
    original = ClaimState.load

    def load(self: ClaimState) -> list[Path]:
        collected = original(self)
        spec = cdi.Spec(
            version="0.5.0",
            kind="k8s.junk.example.com/junk",
            devices=(cdi.Device(name="empty", container_edits=cdi.ContainerEdits()),),
        )
        (self.paths.cdi_dir / "k8s.junk.example.com-junk.json").write_text(__import__("json").dumps(spec.to_json()))
        return collected

    ClaimState.load = load  # type: ignore[method-assign]


def leave_specs() -> None:
    setattr(cdi, "remove_spec", lambda **_: False)  # noqa: B010 - state.py calls cdi.remove_spec


def forget_on_restart() -> None:
    original_load, original_prepare = ClaimState.load, ClaimState.prepare

    def load(self: ClaimState) -> list[Path]:
        self.paths.checkpoint.unlink(missing_ok=True)
        return original_load(self)

    def prepare(self: ClaimState, ref: ClaimRef, *, ahead: PendingClaim | None = None) -> PrepareResult:
        leftover = any(ref.uid in p.name for p in self.paths.cdi_dir.iterdir())
        if leftover and ref.uid not in self.claims:
            return PrepareResult(error="stale state on disk for a claim this process does not know")
        return original_prepare(self, ref, ahead=ahead)

    ClaimState.load, ClaimState.prepare = load, prepare  # type: ignore[method-assign]


def connection_per_call() -> None:
    def aged(original: Any) -> Any:
        def server(*args: Any, **kw: Any) -> Any:
            # Connections older than 300 ms are told to go away; a kubelet session then needs several connections.
            kw["options"] = [("grpc.max_connection_age_ms", 300), ("grpc.max_connection_age_grace_ms", 10000)]
            return original(*args, **kw)

        return server

    grpc.aio.server = aged(grpc.aio.server)
    grpc.server = aged(grpc.server)  # the DRA socket's threaded server

    def slow(ref: ClaimRef, result: PrepareResult) -> PrepareResult:
        time.sleep(0.4)
        return result

    _wrap_prepare(slow)


def bogus_health() -> None:
    original = HealthBoard.snapshot

    def snapshot(self: HealthBoard) -> Any:
        ghost = DeviceHealth(
            pool="ghost-pool",
            device="ghost-device",
            health=Health.HEALTHY,
            last_updated=int(time.time()),
            timeout_seconds=30,
        )
        return [*original(self), ghost]

    HealthBoard.snapshot = snapshot  # type: ignore[method-assign]


def metadata_one_version() -> None:
    setattr(metadata_mod, "METADATA_API_VERSIONS", ("metadata.resource.k8s.io/v1beta1",))  # noqa: B010


def status_foreign_manager() -> None:
    DriverApi.field_manager = property(lambda self: "kube-scheduler")  # type: ignore[assignment, method-assign]


def broken_mount() -> None:
    original = plan_mod.compute_prepare_plan

    def plan(**kw: Any) -> plan_mod.PreparePlan:
        base = original(**kw)
        assert base.claim_spec is not None  # the faulty plugin serves the example schema: always a claim spec
        bad = cdi.Mount(host_path="/nonexistent/fakedev/broken", container_path="/broken", options=("ro", "bind"))
        spec = base.claim_spec.spec
        devices = tuple(
            replace(d, container_edits=replace(d.container_edits, mounts=(*d.container_edits.mounts, bad)))
            for d in spec.devices
        )
        claim_spec = replace(base.claim_spec, spec=replace(spec, devices=devices))
        return replace(base, claim_spec=claim_spec)

    setattr(state_mod, "compute_prepare_plan", plan)  # noqa: B010


def health_v1alpha1_only() -> None:
    """Not a defect: a 1.36-era driver that serves health only as v1alpha1 (the kubelet must fall back to it)."""
    original = registration_mod.RegistrationServicer.__init__

    def init(self: Any, **kw: Any) -> None:
        kw["versions"] = [v for v in kw["versions"] if v != "v1.DRAResourceHealth"]
        original(self, **kw)

    registration_mod.RegistrationServicer.__init__ = init  # type: ignore[method-assign]


def single_device() -> None:
    """Not a defect: the profile's devices cut to one, so checks that need several meet a driver that has one."""
    import fakedev.plugin.app as app_mod

    original = getattr(app_mod, "load_profile")  # noqa: B009 - the name app.py imported, not a public one

    def load(name_or_path: Any) -> Any:
        profile = original(name_or_path)
        if profile.example is None:
            raise SystemExit("faulty_plugin --defect single-device needs a profile with example devices (seed-example)")
        return replace(profile, example=replace(profile.example, count=1))

    setattr(app_mod, "load_profile", load)  # noqa: B010


def missing_device_node() -> None:
    """Every claim's CDI spec names a device node no host has: prepare succeeds, the container cannot start."""
    original = plan_mod.compute_prepare_plan

    def plan(**kw: Any) -> plan_mod.PreparePlan:
        base = original(**kw)
        assert base.claim_spec is not None  # the faulty plugin serves the example schema: always a claim spec
        spec = base.claim_spec.spec
        devices = tuple(
            replace(
                d,
                container_edits=replace(
                    d.container_edits,
                    device_nodes=(*d.container_edits.device_nodes, cdi.DeviceNode(path=f"/dev/fakedev-missing-{i}")),
                ),
            )
            for i, d in enumerate(spec.devices)
        )
        return replace(base, claim_spec=replace(base.claim_spec, spec=replace(spec, devices=devices)))

    setattr(state_mod, "compute_prepare_plan", plan)  # noqa: B010


def publish_nothing() -> None:
    """The plugin registers and serves, but no ResourceSlice ever reaches the API server."""
    DriverApi.create_slice = lambda self, body: None  # type: ignore[method-assign]
    DriverApi.replace_slice = lambda self, body: None  # type: ignore[method-assign]


class _Mute(grpc.aio.ServerInterceptor):
    """Takes every call in and never answers it (the caller's deadline ends it)."""

    async def intercept_service(self, continuation: Any, handler_call_details: Any) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None

        async def hang(request: Any, context: Any) -> Any:
            await asyncio.Event().wait()

        async def hang_stream(request: Any, context: Any) -> AsyncIterator[Any]:
            await asyncio.Event().wait()
            yield None  # never reached: makes this an async generator, what a streaming handler must be

        wire = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(hang_stream, **wire)
        return grpc.unary_unary_rpc_method_handler(hang, **wire)


class _ThreadedMute(grpc.ServerInterceptor):
    """The same on a threaded server: a worker waits until the caller's deadline has ended the call."""

    def intercept_service(self, continuation: Any, handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None

        def hang(request: Any, context: Any) -> Any:
            ended = threading.Event()
            if context.add_callback(ended.set):
                ended.wait()

        def hang_stream(request: Any, context: Any) -> Iterator[Any]:
            hang(request, context)
            yield from ()

        wire = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(hang_stream, **wire)
        return grpc.unary_unary_rpc_method_handler(hang, **wire)


def never_answer() -> None:
    """Every gRPC call — registration, DRA, health — is accepted and never answered."""
    original, original_threaded = grpc.aio.server, grpc.server

    def server(*args: Any, **kw: Any) -> Any:
        kw["interceptors"] = [_Mute(), *(kw.get("interceptors") or [])]
        return original(*args, **kw)

    def threaded(*args: Any, **kw: Any) -> Any:
        kw["interceptors"] = [_ThreadedMute(), *(kw.get("interceptors") or [])]
        return original_threaded(*args, **kw)

    grpc.aio.server = server
    grpc.server = threaded


VARIANTS: dict[str, Callable[[], None]] = {
    "health-v1alpha1-only": health_v1alpha1_only,
    # The behaviours the conformance verdict tests meet (the Go test driver minidra has the same four).
    "single-device": single_device,
    "missing-device-node": missing_device_node,
    "publish-nothing": publish_nothing,
    "never-answer": never_answer,
}

DEFECTS: dict[str, tuple[str, Callable[[], None]]] = {
    "wrong-type": ("registration.handshake", wrong_type),
    "v1beta1-first": ("registration.versions", v1beta1_first),
    "no-owner": ("slices.published", no_owner),
    "wrong-pool": ("prepare.basic", wrong_pool),
    "unstable-answer": ("prepare.idempotent", unstable_answer),
    "second-unprepare-fails": ("unprepare.idempotent", second_unprepare_fails),
    "unknown-unprepare-fails": ("unprepare.unknown-claim", unknown_unprepare_fails),
    "abort-on-claim-error": ("errors.per-claim", abort_on_claim_error),
    "prepare-unallocated": ("prepare.rejects-unallocated", prepare_unallocated),
    "ignore-uid": ("prepare.rejects-replaced", ignore_uid),
    "busy": ("prepare.concurrent", busy),
    "reject-shared": ("claim.shared", reject_shared),
    "junk-cdi-spec": ("cdi.valid", junk_cdi_spec),
    "leave-specs": ("cleanup.nothing-left", leave_specs),
    "forget-on-restart": ("restart.recovery", forget_on_restart),
    "connection-per-call": ("connection.single", connection_per_call),
    "bogus-health": ("health.stream", bogus_health),
    "metadata-one-version": ("metadata.kep5304", metadata_one_version),
    "status-foreign-manager": ("status.devices", status_foreign_manager),
    "broken-mount": ("pod.end-to-end", broken_mount),
}


def main() -> int:
    parser = argparse.ArgumentParser(prog="faulty_plugin")
    parser.add_argument("--defect", required=True, choices=sorted([*DEFECTS, *VARIANTS]))
    parser.add_argument("plugin_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    (VARIANTS[args.defect] if args.defect in VARIANTS else DEFECTS[args.defect][1])()
    from fakedev.cli import main as fakedev_main

    return fakedev_main(["plugin", *[a for a in args.plugin_args if a != "--"]])


if __name__ == "__main__":
    sys.exit(main())
