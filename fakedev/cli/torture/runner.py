"""The torture run: a fake plugin under the node emulator's kubelet client, its claims allocated by the real
scheduler, killed over and over — at crash points and at random moments — and checked after every restart.

Set-up (:func:`torture_site`): a run directory (kubelet root, CDI dir, logs), the profile's hardware (its NICs
plugged in with ``--nics``), a registered Node nobody runs pods for, a namespace and a DeviceClass, claims with a
pod each pinned to the Node, so the scheduler allocates them and binds the pods, which then wait for a kubelet that
is this tool. Each plugin process (:meth:`Torture.lifetime`) is started — with a crash point armed, or not —, found
through the kubelet's registration handshake (:class:`~harness.node.plugins.PluginManager`), checked, given calls
until it dies or is killed, and classified by how it died. The end unprepares everything with an unarmed plugin and
checks that nothing is left. Tear-down removes every object and process even when the run is interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from fakedev.cli.rig import NodeHardware, plugin_driver, remove_fabric
from fakedev.cli.torture.choices import Op, OpKind, choose_crash, choose_op
from fakedev.cli.torture.invariants import (
    CheckScope,
    Rule,
    Violation,
    compute_final_violations,
    compute_violations,
    may_settle,
)
from fakedev.cli.torture.ledger import Belief, ClaimBelief, Ledger
from fakedev.cli.torture.observe import NodeFiles, read_snapshot
from fakedev.cli.torture.report import Tally, TortureSettings, render_progress
from fakedev.driver import metadata
from fakedev.driver.crash import CRASH_ENV, CRASH_LOGGED, CrashAt
from fakedev.errors import TortureError, ViolationFoundError
from fakedev.logs import TextFormatter
from fakedev.nics.ports import ifname_of
from fakedev.plugin.paths import PluginPaths
from fakedev.render import Schema, render_node
from harness.cluster.nodes import NodeHeartbeats, delete_node, register_node
from harness.errors import DraCallError, HarnessError
from harness.kube.waits import wait_list, wait_object
from harness.node.drivers import DriverContext, DriverProcess, DriverSpec
from harness.node.emulator import DECLARED_FEATURES
from harness.node.plugins import PluginInstance, PluginManager
from harness.procs import RunDir, open_run_dir, wait_for
from harness.runtime.netns import list_run_netns
from kubeclient import ApiError, JsonObj, KubeClient
from kubeclient.resources import DEVICE_CLASSES, NAMESPACES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from kubeletapi.types import ClaimRef

log = logging.getLogger("fakedev.torture")

REGISTER_SECONDS: Final = 30.0
ALLOCATE_SECONDS: Final = 60.0
DELETE_SECONDS: Final = 60.0
SETTLE_SECONDS: Final = 10.0
"""How long a violation that may settle (:data:`~fakedev.cli.torture.invariants.SETTLING_RULES`) is read again."""
CALL_SECONDS: Final = 20.0
EXIT_SECONDS: Final = 2.0
SETTLE_ATTEMPTS: Final = 20
MAX_OPS: Final = 8
"""Calls a plugin process killed at a random moment gets at most (the kill comes during one of them)."""
MAX_ARMED_OPS: Final = 20
"""Calls a plugin process with an armed crash point gets at most before it is killed anyway."""
Say = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Site:
    """Everything the run set up, for the loop and for the tear-down."""

    kube: KubeClient
    kubeconfig: Path
    run: RunDir
    node: str
    namespace: str
    device_class: str
    schema: Schema
    hardware: NodeHardware
    context: DriverContext

    @property
    def driver(self) -> str:
        return self.schema.driver

    @property
    def files(self) -> NodeFiles:
        plugin_dir = PluginPaths(kubelet_root=self.context.kubelet_root, driver=self.driver).plugin_dir
        return NodeFiles(
            driver=self.driver,
            cdi_dir=self.context.cdi_dir,
            metadata_root=plugin_dir / metadata.METADATA_DIR_NAME,
            checkpoint=plugin_dir / "checkpoint.json",
            writes_status=self.schema != Schema.NVIDIA,
        )

    @property
    def nic_netns(self) -> str | None:
        return self.hardware.nics.hardware.node_netns if self.hardware.nics is not None else None

    def scope(self) -> CheckScope:
        if self.hardware.nics is None:
            return CheckScope(driver=self.driver)
        rendered = render_node(self.hardware.inventory)
        ifnames = {ref.device: n for ref, p in rendered.devices.items() if (n := ifname_of(p.model)) is not None}
        return CheckScope(driver=self.driver, ports=self.hardware.nics.ports, device_ifnames=ifnames)


def _log_to(path: Path) -> None:
    """The harness's and the plugin client's logs go to a file in the run directory, not the console."""
    handler = logging.FileHandler(path)
    handler.setFormatter(TextFormatter())
    for name in ("harness", "fakedev"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel("INFO")
        logger.propagate = False


def _schema(hardware: NodeHardware, *, settings: TortureSettings) -> Schema:
    if settings.nics:
        if Schema.DRANET not in hardware.schemas:
            raise TortureError(f"--nics: profile {settings.profile} has no NICs for the dranet schema")
        return Schema.DRANET
    if settings.schema is not None:
        if Schema(settings.schema) not in hardware.schemas:
            raise TortureError(f"profile {settings.profile} has no devices for the {settings.schema} schema")
        return Schema(settings.schema)
    if len(hardware.schemas) != 1:
        found = ", ".join(s.value for s in hardware.schemas)
        raise TortureError(f"profile {settings.profile} has devices for {found}; choose one with --schema")
    return hardware.schemas[0]


def _device_class_body(*, name: str, schema: Schema) -> JsonObj:
    cel = f'device.driver == "{schema.driver}"'
    if schema is Schema.DRANET:
        cel += f' && device.attributes["{schema.driver}"].type != "ipoib"'  # fakedev's NICs are Ethernet veths
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": cel}}]},
    }


def _is_ipoib(device: JsonObj, *, driver: str) -> bool:
    """An InfiniBand port of the dranet schema (its type attribute, qualified by the driver's domain or not)."""
    attributes = device.get("attributes") or {}
    kind = attributes.get(f"{driver}/type") or attributes.get("type") or {}
    return bool(kind.get("string") == "ipoib")


@contextlib.contextmanager
def torture_site(settings: TortureSettings, *, kube: KubeClient, kubeconfig: Path, say: Say) -> Iterator[Site]:
    """Set up the run; on the way out remove the API objects, the Node, the NICs and the run directory, after
    copying the plugin's log and files out of it when the run found a violation (they are the evidence)."""
    run = open_run_dir(purpose="torture")
    _log_to(run.path / "torture.log")
    node = f"torture-{run.run_id}"
    heartbeats = NodeHeartbeats(client=kube)
    hardware: NodeHardware | None = None
    keep = False
    try:
        hardware = NodeHardware.install(profile=settings.profile, node_name=node, run_id=run.run_id, nics=settings.nics)
        schema = _schema(hardware, settings=settings)
        site = Site(
            kube=kube,
            kubeconfig=kubeconfig,
            run=run,
            node=node,
            namespace=node,
            device_class=node,
            schema=schema,
            hardware=hardware,
            context=DriverContext(
                node=node, kubelet_root=run.path / "k", cdi_dir=run.path / "cdi", kubeconfig=kubeconfig
            ),
        )
        register_node(kube, name=node, declared_features=DECLARED_FEATURES)
        heartbeats.add(node)
        heartbeats.start()
        kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": site.namespace}})
        kube.create(DEVICE_CLASSES, _device_class_body(name=site.device_class, schema=schema))
        say(f"node {node}: profile {settings.profile}, driver {site.driver}, files in {run.path}")
        try:
            yield site
        except ViolationFoundError:
            keep = True
            raise
    finally:
        heartbeats.stop()
        _delete_objects(kube, node=node)
        if hardware is not None:
            hardware.remove()
            if hardware.nics is not None:
                remove_fabric(run.run_id)
        if keep:
            evidence = settings.evidence_dir / run.run_id
            _copy_evidence(run.path, evidence)
            say(f"evidence kept in {evidence} (the plugin's log is logs/plugin.log, the tool's torture.log)")
        run.remove()


def _copy_evidence(source: Path, target: Path) -> None:
    """The run's logs and the plugin's files as the violation left them (sockets and device nodes left out); the
    run directory itself goes, since the reaper removes run directories whose owner is gone."""

    def special(directory: str, names: list[str]) -> list[str]:
        return [n for n in names if not (Path(directory, n).is_file() or Path(directory, n).is_dir())]

    with contextlib.suppress(OSError):
        shutil.copytree(source, target, ignore=special, symlinks=True, dirs_exist_ok=True)


def _delete_objects(kube: KubeClient, *, node: str) -> None:
    """Pods first, with no grace (no kubelet will confirm their end), then claims, the namespace, the class and the
    Node; each step is tried even when an earlier one failed (an interrupted run, an API hiccup)."""

    def delete_pods() -> None:
        for pod in kube.list(PODS, namespace=node):
            kube.delete(PODS, pod["metadata"]["name"], namespace=node, grace_seconds=0)

    steps: list[Callable[[], object]] = [
        delete_pods,
        lambda: kube.delete_collection(RESOURCE_CLAIMS, namespace=node),
        lambda: kube.delete(NAMESPACES, node),
        lambda: kube.delete(DEVICE_CLASSES, node),
        lambda: delete_node(kube, name=node),
    ]
    for step in steps:
        with contextlib.suppress(ApiError, HarnessError, OSError):
            step()


def _claim_body(*, name: str, device_class: str, requests: int) -> JsonObj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [{"name": f"r{i}", "exactly": {"deviceClassName": device_class}} for i in range(requests)]
            }
        },
    }


def _pod_body(*, name: str, node: str, claim: str) -> JsonObj:
    """A pod the scheduler binds to ``node``, where nothing runs it: the claim is allocated and reserved for it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": "dev", "resourceClaimName": claim}],
            "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "dev"}]}}],
        },
    }


def _pool_complete(slices: list[JsonObj]) -> bool:
    """Every slice of the pool is there (a pool with shared counters writes them in a slice of their own first)."""
    if not slices:
        return False
    counts = {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in slices}
    return len(counts) == 1 and len(slices) == next(iter(counts))[1]


@dataclass(kw_only=True)
class Torture:
    """One run's loop state. Mutable on purpose: the ledger, the tally and the current plugin process change as
    the run goes."""

    settings: TortureSettings
    site: Site
    say: Say
    rng: random.Random
    ledger: Ledger = field(default_factory=Ledger)
    tally: Tally = field(default_factory=Tally)
    scope: CheckScope | None = None
    manager: PluginManager | None = None
    process: DriverProcess | None = None
    instance: PluginInstance | None = None
    generations: dict[str, int] = field(default_factory=dict)
    call_seconds: float = 0.03
    """A running average of call durations: random kills land within one."""

    # -- claims --------------------------------------------------------------------------------------------------

    def _create_claim(self, slot: int) -> ClaimBelief:
        """Claim ``claim-<slot>`` (one or two requests) and a pod for it; returns it once allocated (blocking)."""
        name = f"claim-{slot}"
        generation = self.generations.get(name, 0) + 1
        self.generations[name] = generation
        kube, ns = self.site.kube, self.site.namespace
        kube.create(
            RESOURCE_CLAIMS,
            _claim_body(name=name, device_class=self.site.device_class, requests=1 + slot % 2),
            namespace=ns,
        )
        kube.create(PODS, _pod_body(name=f"{name}-pod-{generation}", node=self.site.node, claim=name), namespace=ns)
        try:
            claim = wait_object(
                kube,
                RESOURCE_CLAIMS,
                name,
                namespace=ns,
                timeout=ALLOCATE_SECONDS,
                predicate=lambda c: bool((c.get("status") or {}).get("reservedFor")),
                what=f"claim {name} allocated and reserved",
            )
        except HarnessError as exc:
            raise TortureError(
                f"{exc} — does profile {self.settings.profile} have devices for {self.settings.claims} claims "
                "of one or two devices each?"
            ) from exc
        results = claim["status"]["allocation"]["devices"]["results"]
        return ClaimBelief(
            uid=claim["metadata"]["uid"],
            namespace=ns,
            name=name,
            devices=tuple(r["device"] for r in results if r["driver"] == self.site.driver),
        )

    def _delete_claim(self, claim: ClaimBelief) -> None:
        kube, ns = self.site.kube, self.site.namespace
        pod = f"{claim.name}-pod-{self.generations[claim.name]}"
        kube.delete(PODS, pod, namespace=ns, grace_seconds=0)
        kube.delete(RESOURCE_CLAIMS, claim.name, namespace=ns)
        wait_for(
            lambda: (
                (kube.get_or_none(RESOURCE_CLAIMS, claim.name, namespace=ns) or {}).get("metadata", {}).get("uid")
                != claim.uid
            ),
            timeout=DELETE_SECONDS,
            what=f"claim {claim.name} deleted",
        )

    # -- plugin processes ----------------------------------------------------------------------------------------

    def _spec(self, crash: CrashAt | None) -> DriverSpec:
        base = plugin_driver(hardware=self.site.hardware, schema=self.site.schema)
        value = crash.render() if crash is not None else ""
        return DriverSpec(
            argv=base.argv, env=lambda ctx: {**base.env(ctx), CRASH_ENV: value}, description=base.description
        )

    async def _start(self, crash: CrashAt | None) -> float | None:
        """Start a plugin process and wait for the kubelet's registration of it; returns when it started. One that
        dies or never registers is a violation: a plugin must always come back — unless it died at its armed crash
        point before registering (start-up sends the status writes a killed predecessor owed: an instant like any
        other), which returns None."""
        assert self.manager is not None
        self.process = DriverProcess(
            name="plugin", spec=self._spec(crash), context=self.site.context, run=self.site.run
        )
        started = time.monotonic()
        self.process.start()
        self.tally.starts += 1
        deadline = started + REGISTER_SECONDS
        while time.monotonic() < deadline:
            fresh = [
                i
                for i in self.manager.instances.values()
                if i.driver == self.site.driver and i.registration.registered_at > started
            ]
            if fresh:
                self.instance = fresh[-1]
                return started
            if not self.process.alive():
                break
            await asyncio.sleep(0.02)
        if crash is not None and self._died_at_crash_point():
            return None
        tail = self.process.process.log_tail() if self.process.process is not None else ""
        raise self._violation(
            Violation(rule=Rule.PROCESS, detail=f"the plugin did not come back after a restart:\n{tail}")
        )

    def _died_at_crash_point(self) -> bool:
        assert self.process is not None and self.process.process is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.process.popen.wait(timeout=5)
        return self.process.process.popen.returncode == -signal.SIGKILL and CRASH_LOGGED in (
            self.process.process.log_tail()
        )

    def _kill(self) -> None:
        assert self.process is not None
        self.process.kill()

    def _await_exit(self) -> None:
        """A call lost its connection: if the plugin is dying (a crash point), let it finish dying, so the next
        call is not made to a process that is already gone."""
        assert self.process is not None and self.process.process is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.process.popen.wait(timeout=EXIT_SECONDS)

    # -- calls ---------------------------------------------------------------------------------------------------

    async def _call(self, op: Op, *, kill_after: float | None) -> bool:
        """Make the call (killing the plugin ``kill_after`` seconds into it); True when every claim was answered
        without an error."""
        assert self.instance is not None
        conn, version = self.instance.connection, self.instance.registration.dra_version
        refs = [ClaimRef(uid=c.uid, namespace=c.namespace, name=c.name) for c in op.claims]
        started = time.monotonic()
        call: asyncio.Task[Any] = asyncio.create_task(
            conn.unprepare(refs, version=version, timeout=CALL_SECONDS)
            if op.unprepares
            else conn.prepare(refs, version=version, timeout=CALL_SECONDS)
        )
        if kill_after is not None:
            await asyncio.wait({call}, timeout=kill_after)
            self._kill()
        try:
            answers = await call
        except DraCallError as exc:
            self.tally.call_failures += 1
            log.info("call cut short", extra={"fields": {"op": op.kind.value, "error": str(exc)}})
            await asyncio.to_thread(self._await_exit)
            for c in op.claims:
                self.ledger.doubted(c.uid, belief=Belief.DOUBT_UNPREPARE if op.unprepares else Belief.DOUBT_PREPARE)
            return False
        self.call_seconds = 0.8 * self.call_seconds + 0.2 * (time.monotonic() - started)
        ok = True
        for c in op.claims:
            answer = answers.get(c.uid)
            error = (answer if op.unprepares else getattr(answer, "error", "")) if answer is not None else "no answer"
            if error:
                ok = False
                self.tally.claim_errors += 1
                log.info("claim error", extra={"fields": {"claim": c.uid, "op": op.kind.value, "error": error}})
                self.ledger.doubted(c.uid, belief=Belief.DOUBT_UNPREPARE if op.unprepares else Belief.DOUBT_PREPARE)
            elif op.unprepares:
                self.ledger.unprepared(c.uid)
            elif (wrong := self.ledger.prepared(c.uid, answer.devices)) is not None:
                raise self._violation(Violation(rule=Rule.ANSWER, detail=wrong))
        return ok

    async def _do(self, op: Op, *, kill_after: float | None) -> bool:
        if op.kind is OpKind.RECREATE:
            (old,) = op.claims
            await asyncio.to_thread(self._delete_claim, old)
            self.ledger.retired(old.uid)
            slot = int(old.name.removeprefix("claim-"))
            self.ledger.add(await asyncio.to_thread(self._create_claim, slot))
            self.tally.recreated += 1
            if kill_after is not None:
                self._kill()
            return False
        count = len(op.claims)
        if op.kind is OpKind.LATE_UNPREPARE:
            self.tally.late_unprepares += count
        if op.unprepares:
            self.tally.unprepares += count
        else:
            self.tally.prepares += count
        return await self._call(op, kill_after=kill_after)

    # -- checks --------------------------------------------------------------------------------------------------

    def _violation(self, violation: Violation) -> ViolationFoundError:
        """Record ``violation``; the caller raises what this returns to stop the run."""
        self.tally.violations.append(violation.render())
        return ViolationFoundError(violation.render())

    async def _check(self, *, final: bool = False) -> None:
        """Snapshot and judge; a status that has not caught up yet, or a temp file the plugin is still writing, is
        read again until it settles."""
        assert self.scope is not None
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            snap = await asyncio.to_thread(
                read_snapshot,
                self.site.files,
                kube=self.site.kube,
                namespace=self.site.namespace,
                nic_netns=self.site.nic_netns,
            )
            found = compute_violations(snap, list(self.ledger), scope=self.scope)
            if final:
                found += compute_final_violations(snap)
            if not found:
                return
            if not may_settle(found) or time.monotonic() > deadline:
                self.tally.violations += [v.render() for v in found[1:]]
                raise self._violation(found[0])
            await asyncio.sleep(0.2)

    # -- the run -------------------------------------------------------------------------------------------------

    async def lifetime(self) -> None:
        """One plugin process: armed or not, started, checked, called until it dies or is killed."""
        crash = choose_crash(self.rng)
        started = await self._start(crash)
        if started is None:  # died at its crash point while starting: a kill like any other
            assert crash is not None
            self.tally.kills += 1
            self.tally.crash_point_kills += 1
            self.tally.points[crash.point.value] += 1
            return
        checking = time.monotonic()
        await self._check()
        started += time.monotonic() - checking  # the tool's own checking is no part of the plugin's recovery
        ops = MAX_ARMED_OPS if crash is not None else self.rng.randint(1, MAX_OPS)
        kill_at = None if crash is not None else self.rng.randrange(ops)
        killed = False
        recovered = False
        for i in range(ops):
            op = choose_op(self.ledger, rng=self.rng, settle_doubt=i == 0)
            kill_after = self.rng.uniform(0, 1.5) * self.call_seconds if i == kill_at else None
            ok = await self._do(op, kill_after=kill_after)
            killed = killed or kill_after is not None
            if ok and not recovered:
                recovered = True
                self.tally.recoveries.append(time.monotonic() - started)
            assert self.process is not None
            if not self.process.alive():
                break
        assert self.process is not None and self.process.process is not None
        if self.process.alive():
            self._kill()
            killed = True
        code = self.process.process.popen.wait()
        self.tally.kills += 1
        if killed:
            return
        if code != -signal.SIGKILL or crash is None:
            tail = self.process.process.log_tail()
            raise self._violation(
                Violation(rule=Rule.PROCESS, detail=f"the plugin exited by itself with {code}:\n{tail}")
            )
        self.tally.crash_point_kills += 1
        self.tally.points[crash.point.value] += 1

    async def finish(self) -> None:
        """An unarmed plugin unprepares every claim not released yet and stops; then nothing may be left anywhere."""
        await self._start(None)
        await self._check()
        for _ in range(SETTLE_ATTEMPTS):
            left = [c for c in self.ledger if c.belief is not Belief.RELEASED]
            if not left:
                break
            for i in range(0, len(left), 3):
                await self._do(Op(kind=OpKind.UNPREPARE, claims=tuple(left[i : i + 3])), kill_after=None)
        # Stopped first: an unprepare's forgetting of its record may be queued, and is on disk once the plugin stops.
        assert self.process is not None and self.process.process is not None
        self.process.stop()
        code = self.process.process.popen.returncode
        if code != 0:
            tail = self.process.process.log_tail()
            raise self._violation(
                Violation(rule=Rule.PROCESS, detail=f"the plugin did not stop cleanly on SIGTERM ({code}):\n{tail}")
            )
        await self._check(final=True)

    async def run(self) -> None:
        registry = self.site.context.kubelet_root / "plugins_registry"
        registry.mkdir(parents=True, exist_ok=True)
        self.manager = PluginManager(registry_dir=registry, on_health=lambda _driver, _devices: None)
        self.scope = self.site.scope()
        task = asyncio.create_task(self.manager.run(), name="plugin-manager")
        try:
            await self._run()
        finally:
            if self.process is not None:
                self.process.stop(timeout=5)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await self.manager.close()

    async def _run(self) -> None:
        settings, site = self.settings, self.site
        await self._start(None)
        slices = await asyncio.to_thread(
            wait_list,
            site.kube,
            RESOURCE_SLICES,
            field_selector=f"spec.nodeName={site.node},spec.driver={site.driver}",
            predicate=_pool_complete,
            timeout=REGISTER_SECONDS,
            what=f"every slice of {site.driver}'s pool on {site.node}",
        )
        available = sum(
            1 for piece in slices for d in piece["spec"].get("devices") or [] if not _is_ipoib(d, driver=site.driver)
        )
        needed = sum(1 + slot % 2 for slot in range(settings.claims))
        if needed > available:
            raise TortureError(
                f"--claims {settings.claims} needs {needed} devices (one or two per claim); profile "
                f"{settings.profile} publishes {available} of driver {site.driver}"
            )
        for slot in range(settings.claims):
            self.ledger.add(await asyncio.to_thread(self._create_claim, slot))
        self.say(f"{settings.claims} claims allocated by the scheduler; seed {settings.seed}")
        self._kill()  # the first process only published the slices; every later one is under torture
        every = max(1, settings.kills // 10)
        while self.tally.kills < settings.kills:
            await self.lifetime()
            if self.tally.kills % every == 0:
                self.say(render_progress(self.tally, target=settings.kills))
        await self.finish()


def leftover_namespaces(site: Site) -> list[Violation]:
    """After the tear-down: a namespace of the run still there is one a NIC claim (or the hardware) left behind."""
    return [Violation(rule=Rule.NICS, detail=f"namespace {n} left behind") for n in list_run_netns(site.run.run_id)]


def run_torture(settings: TortureSettings, *, kube: KubeClient, kubeconfig: Path, say: Say) -> Tally:
    """The whole run, set-up to tear-down; the tally carries the figures and the violations found."""
    began = time.monotonic()
    tally = Tally()
    try:
        with torture_site(settings, kube=kube, kubeconfig=kubeconfig, say=say) as site:
            torture = Torture(settings=settings, site=site, say=say, rng=random.Random(settings.seed), tally=tally)
            asyncio.run(torture.run())
        if settings.nics:
            tally.violations += [v.render() for v in leftover_namespaces(site)]
    except ViolationFoundError:
        pass
    tally.wall_seconds = time.monotonic() - began
    return tally
