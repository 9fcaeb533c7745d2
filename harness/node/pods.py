"""Pod lifecycle on an emulated node: sandbox, DRA prepare, containers under runc, status, termination.

One worker task per pod UID. The worker never blocks the event loop: API calls, runc and netlink run in threads.
On a node in status mode (:class:`PodMode.STATUS`) there is no sandbox and no runc: once its claims are prepared,
a pod's init containers are reported completed and its containers running (``marked``), until it is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import cdi
from harness.errors import ContainerStartError, HarnessError, PrepareError
from harness.node.events import FAILED_PREPARE, FAILED_PREPARE_PREFIX, FAILED_UNPREPARE, record_event
from harness.node.layout import NodeLayout, PodLayout
from harness.node.netdevices import hand_over_net_devices, release_net_devices
from harness.node.podclaims import compute_container_cdi_ids
from harness.node.podmode import PodMode
from harness.node.startreasons import explain_cdi_failure, read_runc_message, render_runc_failure
from harness.procs import RunDir, wait_for
from harness.runtime.netns import create_netns, delete_netns, netns_path
from harness.runtime.oci import render_container_spec
from harness.runtime.rootfs import clone_rootfs
from harness.runtime.runc import Container, Runc
from kubeclient import ApiError, KubeClient
from kubeclient.resources import PODS
from kubeclient.timestamps import render_time
from kubeletapi.types import PreparedDevice

log = logging.getLogger("harness.node.pods")

POLL_SECONDS: Final = 0.2
START_TIMEOUT: Final = 30.0
RUNC_FAILED: Final = "runc run failed"
BACKOFF_START: Final = 0.5
BACKOFF_MAX: Final = 10.0


class PodClaims(Protocol):
    """The node's DRA manager, as far as a pod needs it."""

    async def prepare_pod(self, pod: Mapping[str, Any]) -> dict[str, list[PreparedDevice]]: ...

    async def unprepare_pod(self, pod_uid: str) -> None: ...


class PodHost(Protocol):
    """What a pod worker needs of its node (the emulator provides it; the worker never reaches further)."""

    @property
    def name(self) -> str: ...

    @property
    def client(self) -> KubeClient: ...

    @property
    def layout(self) -> NodeLayout: ...

    @property
    def run(self) -> RunDir: ...

    @property
    def runtime(self) -> Runc: ...

    @property
    def claims(self) -> PodClaims: ...

    @property
    def cdi_dirs(self) -> tuple[Path, ...]: ...

    @property
    def node_netns(self) -> str | None:
        """The namespace holding the node's NICs, where netDevices come from (None: the emulator's own)."""
        ...

    @property
    def stopping(self) -> bool: ...

    @property
    def pod_mode(self) -> PodMode: ...

    def rootfs_for(self, image: str) -> Path: ...

    def health_status(self, *, pod: Mapping[str, Any], container: Mapping[str, Any]) -> list[dict[str, Any]]: ...

    def forget(self, uid: str) -> None:
        """The worker is done (the pod is gone and everything released)."""
        ...


@dataclass(kw_only=True)
class ContainerRun:
    name: str
    container: Container | None = None
    started_at: str = ""
    finished_at: str = ""
    exit_code: int | None = None
    restarts: int = 0
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    next_start: float = 0.0
    marked: bool = False
    """Reported running without a container (a node in status mode)."""

    @property
    def running(self) -> bool:
        return (self.container is not None or self.marked) and self.exit_code is None


@dataclass(kw_only=True)
class PodWorker:
    node: PodHost
    uid: str
    pod: dict[str, Any]
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    gone: bool = False
    """The pod object was deleted from the API (force delete, or we finished its termination)."""
    prepared: dict[str, list[PreparedDevice]] | None = None
    containers: dict[str, ContainerRun] = field(default_factory=dict)
    sandbox: str | None = None
    start_time: str = ""
    phase: str = "Pending"
    prepare_error: str = ""
    backoff: float = BACKOFF_START
    next_attempt: float = 0.0
    cleaned: bool = False
    last_status: dict[str, Any] | None = None
    transitions: dict[str, tuple[bool, str]] = field(default_factory=dict)
    adopted: bool = False
    sandbox_removed: bool = False
    status_backoff: float = BACKOFF_START
    next_status_attempt: float = 0.0
    status_failures: int = 0
    """Failed status writes since the last one that worked: the streak is logged once, when it starts and ends."""

    @property
    def name(self) -> str:
        return f"{self.pod['metadata']['namespace']}/{self.pod['metadata']['name']}"

    @property
    def files(self) -> PodLayout:
        return self.node.layout.pod(self.uid)

    def update(self, pod: dict[str, Any] | None) -> None:
        if pod is None:
            self.gone = True
        else:
            self.pod = pod
        self.changed.set()

    # -- the loop ------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            # Also watch the node's stopping flag: Python 3.11's wait_for can swallow a cancellation that arrives as
            # its inner wait completes, and a worker retrying unprepare against a gone driver would then never end.
            while not self.node.stopping:
                if self.gone or self.pod["metadata"].get("deletionTimestamp"):
                    await self._terminate()
                    return
                if self.phase in ("Succeeded", "Failed"):
                    await self._cleanup()
                elif self.prepared is None:
                    await self._try_prepare()
                else:
                    await self._drive_containers()
                await self._publish_status()
                with contextlib.suppress(TimeoutError):  # asyncio.timeout: see PluginManager.run
                    async with asyncio.timeout(POLL_SECONDS):
                        await self.changed.wait()
                self.changed.clear()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pod worker crashed", extra={"fields": {"pod": self.name}})
            raise

    async def _try_prepare(self) -> None:
        if time.monotonic() < self.next_attempt:
            return
        try:
            if self.sandbox is None and self.node.pod_mode is PodMode.CONTAINERS:
                self.sandbox = await asyncio.to_thread(self._create_sandbox)
            self.prepared = await self.node.claims.prepare_pod(self.pod)
            self.prepare_error = ""
            self.backoff = BACKOFF_START
            self.start_time = self.start_time or render_time()
            for c in self._init_containers() + self._containers():
                self.containers.setdefault(c["name"], ContainerRun(name=c["name"]))
            if not self.adopted and self.node.pod_mode is PodMode.CONTAINERS:
                self.adopted = True
                await asyncio.to_thread(self._adopt_existing)
        except PrepareError as exc:
            self.prepare_error = str(exc)
            self.next_attempt = time.monotonic() + self.backoff
            self.backoff = min(self.backoff * 2, BACKOFF_MAX)
            log.warning("prepare failed", extra={"fields": {"pod": self.name, "error": str(exc)}})
            await asyncio.to_thread(
                record_event,
                self.node.client,
                pod=self.pod,
                node=self.node.name,
                reason=FAILED_PREPARE,
                message=f"{FAILED_PREPARE_PREFIX}{exc}",
                warning=True,
            )

    def _adopt_existing(self) -> None:
        """After an emulator restart, take back the containers an earlier process started (newest attempt each)."""
        files = self.files
        for run in self.containers.values():
            latest = files.latest_run(run.name)
            if latest is None:
                continue
            container = self.node.runtime.adopt(
                container_id=files.container_id(container=run.name, attempt=latest.attempt), bundle=latest.bundle
            )
            if container.exit_code() is None and not container.running():
                continue  # never started, or lost with a node reboot: start afresh
            run.container, run.restarts = container, latest.attempt
            run.started_at = run.started_at or render_time()
            run.waiting_reason = ""
            code = container.exit_code()
            if code is not None:
                run.exit_code, run.finished_at = code, render_time()

    def _create_sandbox(self) -> str:
        name = self.files.sandbox_netns
        if not netns_path(name).exists():
            create_netns(name)
        return name

    def _init_containers(self) -> list[dict[str, Any]]:
        return list(self.pod["spec"].get("initContainers") or [])

    def _containers(self) -> list[dict[str, Any]]:
        return list(self.pod["spec"].get("containers") or [])

    async def _drive_containers(self) -> None:
        if self.node.pod_mode is PodMode.STATUS:
            self._mark_containers()
            return
        restart = self.pod["spec"].get("restartPolicy", "Always")
        inits = self._init_containers()
        for spec in inits:
            run = self.containers[spec["name"]]
            await self._observe(run)
            if run.exit_code == 0:
                continue
            if run.container is None or (run.exit_code is not None and restart != "Never"):
                await self._start(spec, run)
                return
            if run.exit_code is not None:
                self.phase = "Failed"
            return  # init containers run one at a time, in order
        for spec in self._containers():
            run = self.containers[spec["name"]]
            await self._observe(run)
            wants_restart = run.exit_code is not None and (
                restart == "Always" or (restart == "OnFailure" and run.exit_code != 0)
            )
            if run.container is None or wants_restart:
                await self._start(spec, run)
        self.phase = compute_pod_phase([self.containers[c["name"]] for c in self._containers()], restart=restart)

    def _mark_containers(self) -> None:
        """Status mode: init containers completed in order, then every container running, none of them real."""
        now = render_time()
        for spec in self._init_containers():
            run = self.containers[spec["name"]]
            if run.exit_code is None:
                run.started_at, run.finished_at, run.exit_code, run.waiting_reason = now, now, 0, ""
        for spec in self._containers():
            run = self.containers[spec["name"]]
            if not run.marked:
                run.marked, run.started_at, run.waiting_reason = True, now, ""
        restart = self.pod["spec"].get("restartPolicy", "Always")
        self.phase = compute_pod_phase([self.containers[c["name"]] for c in self._containers()], restart=restart)

    async def _observe(self, run: ContainerRun) -> None:
        if run.container is None or run.exit_code is not None:
            return
        code = await asyncio.to_thread(run.container.exit_code)
        if code is not None:
            run.exit_code = code
            run.finished_at = render_time()
            await asyncio.to_thread(run.container.runtime.delete, run.container.container_id)

    async def _start(self, spec: Mapping[str, Any], run: ContainerRun) -> None:
        if time.monotonic() < run.next_start:
            return
        if run.container is not None:
            run.restarts += 1
        try:
            run.container = await asyncio.to_thread(self._launch, spec, run.restarts)
            run.exit_code, run.started_at, run.finished_at = None, render_time(), ""
            run.waiting_reason = run.waiting_message = ""
        except (cdi.CdiError, OSError, ValueError, HarnessError) as exc:
            run.container = None
            run.waiting_reason, run.waiting_message = "CreateContainerError", str(exc)
            run.next_start = time.monotonic() + BACKOFF_MAX / 2
            log.warning(
                "container start failed", extra={"fields": {"pod": self.name, "container": run.name, "error": str(exc)}}
            )

    def _launch(self, spec: Mapping[str, Any], attempt: int) -> Container:
        assert self.prepared is not None and self.sandbox is not None
        name = spec["name"]
        files = self.files
        cid = files.container_id(container=name, attempt=attempt)
        bundle = files.bundle(container=name, attempt=attempt).bundle
        rootfs = bundle / "rootfs"
        if not rootfs.exists():
            clone_rootfs(template=self.node.rootfs_for(str(spec.get("image", ""))), destination=rootfs)
        args = [*(spec.get("command") or []), *(spec.get("args") or [])] or ["sh"]
        oci = render_container_spec(
            args=args,
            env=render_container_env(spec, pod=self.pod, node=self.node.name),
            rootfs=rootfs,
            hostname=self.pod["metadata"]["name"][:63],
            netns_path=netns_path(self.sandbox),
            cwd=spec.get("workingDir") or "/",
        )
        ids = compute_container_cdi_ids(pod=self.pod, container=spec, prepared=self.prepared)
        specs: list[Path] = []
        if ids:
            registry = cdi.load_registry(spec_dirs=list(self.node.cdi_dirs))
            try:
                injected = cdi.inject_devices(oci_spec=oci, registry=registry, device_ids=ids)
            except cdi.CdiError as exc:
                raise ContainerStartError(
                    explain_cdi_failure(oci=oci, registry=registry, device_ids=ids, error=exc)
                ) from exc
            oci = injected
            specs = sorted({registry.devices[i].source.path for i in ids if i in registry.devices})
        handover = hand_over_net_devices(
            oci,
            runc_moves=self.node.runtime.moves_net_devices,
            sandbox=self.sandbox,
            node_netns=self.node.node_netns,
            record=files.net_devices_record,
        )
        ids_file = files.cdi_ids_file(name)
        ids_file.parent.mkdir(parents=True, exist_ok=True)
        ids_file.write_text("\n".join(ids) + ("\n" if ids else ""))
        container = self.node.runtime.run(
            container_id=cid, bundle=bundle, spec=handover.spec, run=self.node.run, netns=handover.runc_netns
        )
        # Running means started: wait for runc to report it (or to fail creating it, e.g. a bad CDI mount).
        wait_for(
            lambda: container.exit_code() is not None or container.running(),
            timeout=START_TIMEOUT,
            what=f"container {name} to start",
        )
        log_text = container.log_path.read_text(errors="replace") if container.log_path.exists() else ""
        if container.exit_code() is not None and RUNC_FAILED in log_text:
            container.runtime.delete(cid)
            said = read_runc_message(next(ln for ln in reversed(log_text.splitlines()) if RUNC_FAILED in ln))[:500]
            raise ContainerStartError(render_runc_failure(message=said, device_ids=ids, specs=specs))
        return container

    # -- termination ---------------------------------------------------------------------------------------------

    async def stop_containers(self, *, grace: float) -> None:
        for run in self.containers.values():
            if run.marked and run.exit_code is None:
                run.exit_code, run.finished_at = 0, render_time()  # nothing to stop: it ends as asked
            if run.container is not None and run.exit_code is None:
                code = await asyncio.to_thread(run.container.stop, timeout=grace)
                run.exit_code = 137 if code is None else code
                run.finished_at = render_time()

    async def _cleanup(self) -> bool:
        """Containers stopped, claims unprepared (retried until it works), sandbox removed. True when done."""
        if self.cleaned:
            return True
        meta, spec = self.pod["metadata"], self.pod["spec"]
        grace = meta.get("deletionGracePeriodSeconds")
        await self.stop_containers(
            grace=float(spec.get("terminationGracePeriodSeconds", 30) if grace is None else grace)
        )
        if self.sandbox is not None and not self.sandbox_removed:
            # The runtime hands network devices back to the node before the driver unprepares them.
            await asyncio.to_thread(
                release_net_devices,
                sandbox=self.sandbox,
                node_netns=self.node.node_netns,
                record=self.files.net_devices_record,
            )
            await asyncio.to_thread(delete_netns, self.sandbox)
            self.sandbox_removed = True
        if time.monotonic() < self.next_attempt:
            return False
        try:
            await self.node.claims.unprepare_pod(self.uid)
        except PrepareError as exc:
            self.next_attempt = time.monotonic() + self.backoff
            self.backoff = min(self.backoff * 2, BACKOFF_MAX)
            if not self.gone:
                await asyncio.to_thread(
                    record_event,
                    self.node.client,
                    pod=self.pod,
                    node=self.node.name,
                    reason=FAILED_UNPREPARE,
                    message=str(exc),
                    warning=True,
                )
            return False
        self.cleaned = True
        return True

    async def _terminate(self) -> None:
        """The kubelet's part of deletion: stop, unprepare until it succeeds, then remove the pod object."""
        while not await self._cleanup():
            if self.node.stopping:
                return  # the next start resumes from the checkpoint, as after a kubelet restart
            with contextlib.suppress(TimeoutError):  # asyncio.timeout: see PluginManager.run
                async with asyncio.timeout(POLL_SECONDS):
                    await self.changed.wait()
            self.changed.clear()
        if self.phase not in ("Succeeded", "Failed"):
            self.phase = (
                "Failed" if any(r.exit_code not in (0, None) for r in self.containers.values()) else "Succeeded"
            )
        if not self.gone:
            await self._publish_status()
            with contextlib.suppress(ApiError):
                await asyncio.to_thread(self._final_delete)
        self.node.forget(self.uid)

    def _final_delete(self) -> None:
        meta = self.pod["metadata"]
        self.node.client.request(
            "DELETE",
            PODS.path(namespace=meta["namespace"], name=meta["name"]),
            body={"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}},
        )

    # -- status --------------------------------------------------------------------------------------------------

    def render_status(self) -> dict[str, Any]:
        ready = self.phase == "Running" and all(
            r.running for r in (self.containers.get(c["name"]) for c in self._containers()) if r is not None
        )
        inits_done = all(
            (self.containers.get(c["name"]) or ContainerRun(name="")).exit_code == 0 for c in self._init_containers()
        )
        started = self.prepared is not None
        conditions = [
            self._condition("PodReadyToStartContainers", value=started),
            self._condition("Initialized", value=started and inits_done),
            self._condition("ContainersReady", value=ready),
            self._condition("Ready", value=ready),
        ]
        status: dict[str, Any] = {
            "phase": self.phase,
            "conditions": conditions,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "containerStatuses": [self._container_status(c) for c in self._containers()],
        }
        if self._init_containers():
            status["initContainerStatuses"] = [self._container_status(c) for c in self._init_containers()]
        if self.start_time:
            status["startTime"] = self.start_time
        if self.prepare_error and self.prepared is None:
            status["message"] = self.prepare_error[:1000]
            status["reason"] = FAILED_PREPARE
        else:
            # Null deletes in a strategic merge patch: a prepare that failed before must not stay in the status.
            status["message"] = status["reason"] = None
        return status

    def _container_status(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        run = self.containers.get(spec["name"]) or ContainerRun(name=spec["name"])
        entry = render_container_status(spec, run=run)
        health = self.node.health_status(pod=self.pod, container=spec)
        if health:
            entry["allocatedResourcesStatus"] = health
        return entry

    async def _publish_status(self) -> None:
        if self.gone:
            return
        status = self.render_status()
        # Like the kubelet's status manager, a write that failed is retried on a back-off, not on every pass of
        # the loop: during a five-minute API outage that was a warning every 200 ms for every pod.
        if status == self.last_status or time.monotonic() < self.next_status_attempt:
            return
        meta = self.pod["metadata"]
        try:
            await asyncio.to_thread(
                self.node.client.patch,
                PODS,
                meta["name"],
                {"status": status},
                namespace=meta["namespace"],
                subresource="status",
                patch_type="strategic",
            )
            self.last_status = status
        except ApiError as exc:
            if exc.status == 404:
                self.gone = True
                return
            if self.status_failures == 0:
                log.warning(
                    "pod status update failed, retrying with back-off",
                    extra={"fields": {"pod": self.name, "error": str(exc)}},
                )
            self.status_failures += 1
            self.next_status_attempt = time.monotonic() + self.status_backoff
            self.status_backoff = min(self.status_backoff * 2, BACKOFF_MAX)
            return
        if self.status_failures:
            fields = {"pod": self.name, "failed": self.status_failures}
            log.info("pod status update succeeded again", extra={"fields": fields})
        self.status_failures = 0
        self.status_backoff = BACKOFF_START
        self.next_status_attempt = 0.0

    def _condition(self, kind: str, *, value: bool) -> dict[str, Any]:
        """A pod condition whose lastTransitionTime moves only when its status does."""
        previous = self.transitions.get(kind)
        if previous is None or previous[0] != value:
            previous = (value, render_time())
            self.transitions[kind] = previous
        return {"type": kind, "status": "True" if value else "False", "lastTransitionTime": previous[1]}

    def container_logs(self, container: str | None = None) -> str:
        names = [container] if container else [c["name"] for c in self._containers()]
        out = []
        for n in names:
            run = self.containers.get(n)
            if run and run.container is not None and run.container.log_path.exists():
                out.append(run.container.log_path.read_text(errors="replace"))
        return "".join(out)


# -- pure parts of a pod's status -----------------------------------------------------------------------------------


def compute_pod_phase(runs: Sequence[ContainerRun], *, restart: str) -> str:
    """The phase of a pod whose init containers are done, from its containers' runs and its ``restartPolicy``."""
    if any(r.running for r in runs):
        return "Running"
    if runs and all(r.exit_code is not None for r in runs):
        if restart == "Never" or (restart == "OnFailure" and all(r.exit_code == 0 for r in runs)):
            return "Succeeded" if all(r.exit_code == 0 for r in runs) else "Failed"
        return "Running"  # about to be restarted
    return "Pending"


def render_container_status(spec: Mapping[str, Any], *, run: ContainerRun) -> dict[str, Any]:
    """One ``containerStatuses`` entry: running, terminated (with its exit code) or waiting (with the reason).

    A restart that could not be created (``container`` None, the previous run's ``exit_code`` kept) is waiting,
    with that run as ``lastState``, as the kubelet shows it."""
    state: dict[str, Any]
    last: dict[str, Any] | None = None
    terminated = (
        {
            "terminated": {
                "exitCode": run.exit_code,
                "reason": "Completed" if run.exit_code == 0 else "Error",
                "startedAt": run.started_at,
                "finishedAt": run.finished_at,
            }
        }
        if run.exit_code is not None
        else None
    )
    waiting = {
        "waiting": {
            "reason": run.waiting_reason or "ContainerCreating",
            **({"message": run.waiting_message} if run.waiting_message else {}),
        }
    }
    if run.running:
        state = {"running": {"startedAt": run.started_at}}
    elif terminated is not None and run.container is None and run.waiting_reason:
        state, last = waiting, terminated
    elif terminated is not None:
        state = terminated
    else:
        state = waiting
    entry: dict[str, Any] = {
        "name": spec["name"],
        "state": state,
        "ready": "running" in state,
        "started": "running" in state,
        "restartCount": run.restarts,
        "image": spec.get("image", ""),
        "imageID": "",
    }
    if last is not None:
        entry["lastState"] = last
    if run.container is not None:
        entry["containerID"] = f"runc://{run.container.container_id}"
    return entry


def render_container_env(spec: Mapping[str, Any], *, pod: Mapping[str, Any], node: str) -> dict[str, str]:
    """A container's environment: plain values, and the downward-API fields an emulated node can tell."""
    meta = pod["metadata"]
    fields = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": node,
        "status.hostIP": "127.0.0.1",
    }
    env: dict[str, str] = {}
    for e in spec.get("env") or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif (ref := (e.get("valueFrom") or {}).get("fieldRef")) and ref.get("fieldPath") in fields:
            env[e["name"]] = fields[ref["fieldPath"]]
    return env
