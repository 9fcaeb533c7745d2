"""Prepare/unprepare latency and throughput, fakedev's plugin against dra-example-driver's, through one client.

Every subject is a driver process on its own emulated node (its own kubelet root and CDI dir), registered through
the node emulator's plugin manager; calls go over the connection the emulator itself uses (``PluginInstance``).
Claims are real ResourceClaims whose allocation is written to their status, as the scheduler would write it, so
both drivers read exactly what they read in a cluster; the scheduler is not part of this figure.

Latency: each claim is prepared and then unprepared before the next (one pod at a time on the node); the drivers
take turns of :data:`LATENCY_CHUNK` claims, so each meets the machine's drift at the same times. Throughput: all
claims are prepared with ``c`` calls in flight, each for one claim (different pods, so the kubelet would send them
separately), then unprepared the same way, one driver after the other.

Idle drivers (:data:`IDLE_DRIVERS`): by default every driver but the one being called is stopped (SIGSTOP) for the
length of the other's turn, so work a driver defers — a status write, a deletion, a compaction, a Go collection —
runs in its own turns and is paid for in its own figures, never in another driver's calls nor in an idle pause.
A driver continued for its turn is first let catch up, untimed (:func:`settled`): what it was sent while stopped
(a watch's events of the other drivers' claims) would otherwise weigh on its first calls.
``running`` leaves them all running (the method of the passes before 2026-12-06, kept for comparison). Each
driver's CPU per claim over the latency run, and the control plane's in its turns, are figures too: work moved off a
call's path still shows there.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from fakedev.cli.procfs import cpu_seconds, memory_mib
from harness.cluster.nodes import register_node
from harness.node.drivers import DriverContext, DriverProcess, DriverSpec
from harness.node.emulator import DECLARED_FEATURES
from harness.node.plugins import PluginInstance, PluginManager
from harness.procs import RunDir, wait_for
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES
from kubeletapi.types import ClaimRef

from .stats import Latency

NAMESPACE: Final = "default"
CLASS: Final = "bench-any"
REGISTER_TIMEOUT: Final = 60.0
DEVICES: Final = 8
LATENCY_CHUNK: Final = 50
"""Claims per turn of one driver in the latency run."""
SETTLE_WINDOW_S: Final = 0.02
SETTLE_BUSY_SHARE: Final = 0.05
SETTLE_CAP_S: Final = 1.0
IdleDrivers = Literal["stopped", "running"]
IDLE_DRIVERS: Final[tuple[IdleDrivers, ...]] = ("stopped", "running")
"""What the drivers not being called do meanwhile: stopped with SIGSTOP (default) or left running."""
Say = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Subject:
    """One driver under test on one node."""

    key: str
    """Prefix of its figures in results.json (``gpu``, ``exdrv_gpu`` …)."""
    title: str
    node: str
    driver: str
    spec: DriverSpec
    pick: Callable[[JsonObj], bool] = lambda _device: True
    """Which published devices its claims are allocated (round-robin over at most :data:`DEVICES`)."""
    claims: int | None = None
    """Fewer claims than the run's (a driver throttled to a few calls per second would take many minutes)."""
    exclusive: bool = False
    """A device can back only one prepared claim at a time (NICs): no throughput run with all claims held."""


@dataclass(kw_only=True)
class SubjectResult:
    prepare: Latency
    unprepare: Latency
    prepare_per_s: dict[int, float] = field(default_factory=dict)
    unprepare_per_s: dict[int, float] = field(default_factory=dict)
    rss_mb: float = 0.0
    samples_ms: list[float] = field(default_factory=list)
    """Each prepare's latency in the latency run, in call order (the unprepares' in ``unprepare_samples_ms``)."""
    unprepare_samples_ms: list[float] = field(default_factory=list)
    cpu_ms_per_claim: float = 0.0
    """The driver process's CPU over the latency run, per claim prepared and unprepared."""
    control_plane_cpu_ms_per_claim: float | None = None
    """The control plane's CPU in this driver's latency turns, per claim; None when other drivers ran meanwhile
    (their work would be counted too)."""


def render_claim(*, name: str) -> JsonObj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": CLASS}}]}},
    }


def render_allocation(*, driver: str, pool: str, device: str, node: str) -> JsonObj:
    """The status the scheduler would write: the device, the node it is on, and the pod it is reserved for."""
    return {
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "dev", "driver": driver, "pool": pool, "device": device}]},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": f"bench-{uuid.uuid4().hex[:8]}", "uid": str(uuid.uuid4())}],
        }
    }


def ensure_class(kube: KubeClient) -> None:
    if kube.get_or_none(DEVICE_CLASSES, CLASS) is None:
        kube.create(
            DEVICE_CLASSES,
            {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS}, "spec": {}},
        )


def published_devices(kube: KubeClient, subject: Subject) -> list[tuple[str, str]]:
    """(pool, device) of the subject's published devices it may use, at most :data:`DEVICES`."""
    found = []
    slices = kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={subject.node},spec.driver={subject.driver}")
    for s in slices:
        pool = s["spec"]["pool"]
        if sum(1 for o in slices if o["spec"]["pool"]["name"] == pool["name"]) < pool["resourceSliceCount"]:
            return []  # the pool is still being published: wait for all of it
        found += [(pool["name"], d["name"]) for d in s["spec"].get("devices") or [] if subject.pick(d)]
    return sorted(found)[:DEVICES]


def make_claims(
    kube: KubeClient, subject: Subject, *, devices: Sequence[tuple[str, str]], count: int
) -> list[ClaimRef]:
    refs = []
    for i in range(count):
        name = f"{subject.key.replace('_', '-')}-{i:04d}"
        claim = kube.create(RESOURCE_CLAIMS, render_claim(name=name), namespace=NAMESPACE)
        pool, device = devices[i % len(devices)]
        status = render_allocation(driver=subject.driver, pool=pool, device=device, node=subject.node)
        kube.patch(RESOURCE_CLAIMS, name, status, namespace=NAMESPACE, subresource="status", patch_type="merge")
        refs.append(ClaimRef(uid=claim["metadata"]["uid"], namespace=NAMESPACE, name=name))
    return refs


def _check(method: str, answers: dict[str, Any], ref: ClaimRef) -> None:
    answer = answers.get(ref.uid)
    error = getattr(answer, "error", answer) if answer is not None else f"no answer for claim {ref.uid}"
    if error:
        raise RuntimeError(f"{method} {ref.namespace}/{ref.name}: {error}")


async def _latency(inst: PluginInstance, refs: Sequence[ClaimRef]) -> tuple[list[float], list[float]]:
    conn, version = inst.connection, inst.registration.dra_version
    prep, unprep = [], []
    for ref in refs:
        t = time.perf_counter()
        _check("prepare", await conn.prepare([ref], version=version), ref)
        prep.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        _check("unprepare", await conn.unprepare([ref], version=version), ref)
        unprep.append((time.perf_counter() - t) * 1e3)
    return prep, unprep


async def _throughput(inst: PluginInstance, refs: Sequence[ClaimRef], *, concurrency: int) -> tuple[float, float]:
    conn, version = inst.connection, inst.registration.dra_version
    gate = asyncio.Semaphore(concurrency)

    async def prepare(ref: ClaimRef) -> None:
        async with gate:
            _check("prepare", await conn.prepare([ref], version=version), ref)

    async def unprepare(ref: ClaimRef) -> None:
        async with gate:
            _check("unprepare", await conn.unprepare([ref], version=version), ref)

    t = time.perf_counter()
    await asyncio.gather(*(prepare(r) for r in refs))
    prepared = len(refs) / (time.perf_counter() - t)
    t = time.perf_counter()
    await asyncio.gather(*(unprepare(r) for r in refs))
    return round(prepared, 1), round(len(refs) / (time.perf_counter() - t), 1)


def start_profiler(pid: int, *, out: Path) -> subprocess.Popen[bytes] | None:
    """py-spy sampling ``pid`` (folded stacks, idle threads left out); None for a process that is not Python."""
    if "python" not in Path(f"/proc/{pid}/exe").resolve().name:
        return None
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--rate", "500", "--format", "raw", "--output", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_profiler(spy: subprocess.Popen[bytes]) -> None:
    spy.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
    spy.wait(timeout=60)


@dataclass(kw_only=True)
class _Running:
    """A subject whose driver is up and registered, with its claims made. Mutable: the results fill in."""

    subject: Subject
    driver: DriverProcess
    inst: PluginInstance
    refs: list[ClaimRef]
    prep_ms: list[float] = field(default_factory=list)
    unprep_ms: list[float] = field(default_factory=list)
    control_plane_cpu_s: float = 0.0

    @property
    def pid(self) -> int:
        assert self.driver.process is not None
        return self.driver.process.pid


@contextlib.contextmanager
def others_stopped(drivers: Sequence[DriverProcess], *, called: DriverProcess, idle: IdleDrivers) -> Iterator[None]:
    """Every driver but ``called`` stopped (SIGSTOP, its whole process group) for the block when ``idle`` is
    ``stopped``, and continued after it, whatever the block (or the stopping itself) raised."""
    stopped: list[DriverProcess] = []
    try:
        for d in drivers if idle == "stopped" else ():
            if d is not called:
                d.signal(signal.SIGSTOP)
                stopped.append(d)
        yield
    finally:
        for d in stopped:
            d.signal(signal.SIGCONT)


def process_cpu_ns(pid: int) -> int:
    """CPU time every thread of a process has used so far, in nanoseconds (``schedstat``: finer than the 10 ms ticks
    of ``/proc/<pid>/stat``); 0 for a process that is gone."""
    total = 0
    with contextlib.suppress(FileNotFoundError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                total += int((task / "schedstat").read_text().split()[0])
    return total


async def settled(pid: int, *, window: float = SETTLE_WINDOW_S, cap: float = SETTLE_CAP_S) -> None:
    """Return once the process used less than :data:`SETTLE_BUSY_SHARE` of a core over ``window`` seconds, or after
    ``cap``: a driver continued after the others' turns first catches up (watch events it was sent meanwhile, timers
    due) before its turn is timed. What it uses doing so still counts in its CPU per claim."""
    deadline = time.monotonic() + cap
    before = process_cpu_ns(pid)
    while time.monotonic() < deadline:
        await asyncio.sleep(window)
        now = process_cpu_ns(pid)
        if now - before < window * 1e9 * SETTLE_BUSY_SHARE:
            return
        before = now


def compute_turns(counts: Sequence[int], *, chunk: int) -> list[tuple[int, int, int]]:
    """The latency run's schedule: ``(subject index, first claim, end)`` turns of at most ``chunk`` claims, round
    by round, each subject once per round while it has claims left, the order rotated every round — so every
    subject meets the machine's drift at the same times and none always goes first (pure)."""
    if chunk < 1:
        raise ValueError("chunk must be at least 1")
    turns = []
    rounds = max((-(-n // chunk) for n in counts), default=0)
    for r in range(rounds):
        for k in range(len(counts)):
            i = (k + r) % len(counts)
            first = r * chunk
            if first < counts[i]:
                turns.append((i, first, min(counts[i], first + chunk)))
    return turns


async def _start_subject(
    subject: Subject,
    *,
    kube: KubeClient,
    kubeconfig: Path,
    run: RunDir,
    claims: int,
    cdi_root: Path,
    say: Say,
    stack: contextlib.AsyncExitStack,
    log_dir: Path | None,
) -> _Running:
    claims = min(claims, subject.claims or claims)
    root = run.path / subject.key
    await asyncio.to_thread(register_node, kube, name=subject.node, declared_features=DECLARED_FEATURES)
    manager = PluginManager(registry_dir=root / "k" / "plugins_registry", on_health=lambda _d, _h: None)
    manager.registry_dir.mkdir(parents=True, exist_ok=True)
    driver = DriverProcess(
        name=f"bench-{subject.key}",
        spec=subject.spec,
        context=DriverContext(
            node=subject.node, kubelet_root=root / "k", cdi_dir=cdi_root / subject.key, kubeconfig=kubeconfig
        ),
        run=run,
    )
    task = asyncio.create_task(manager.run(), name=f"{subject.key}-plugins")

    async def stop() -> None:
        driver.stop()
        if log_dir is not None and driver.log_path.exists():
            shutil.copyfile(driver.log_path, log_dir / f"driver-{subject.key}.log")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await manager.close()

    stack.push_async_callback(stop)
    driver.start()
    inst = await manager.wait_registered(subject.driver, timeout=REGISTER_TIMEOUT)
    devices: list[tuple[str, str]] = []

    def listed() -> bool:
        devices[:] = published_devices(kube, subject)
        return bool(devices)

    await asyncio.to_thread(wait_for, listed, timeout=REGISTER_TIMEOUT, what=f"{subject.title}: its slices")
    say(f"{subject.title}: creating {claims} claims allocated over {len(devices)} devices")
    refs = await asyncio.to_thread(make_claims, kube, subject, devices=devices, count=claims)
    return _Running(subject=subject, driver=driver, inst=inst, refs=refs)


async def measure_subjects(
    subjects: Sequence[Subject],
    *,
    kube: KubeClient,
    kubeconfig: Path,
    run: RunDir,
    claims: int,
    concurrency: Sequence[int],
    say: Say,
    cdi_root: Path,
    chunk: int = LATENCY_CHUNK,
    profile_dir: Path | None = None,
    log_dir: Path | None = None,
    idle: IdleDrivers = "stopped",
    control_plane: Mapping[str, int] | None = None,
) -> dict[str, SubjectResult]:
    """Every subject's figures, keyed by :attr:`Subject.key`. All drivers run at once: the latency run takes turns of
    ``chunk`` claims between them (:func:`compute_turns`), so a ratio of two drivers' latencies compares calls made
    in the same minutes of a machine whose speed drifts; throughput is then measured one subject at a time.

    ``cdi_root``: where each subject's CDI dir goes (a tmpfs, like a real node's /var/run/cdi, unless asked
    otherwise). ``profile_dir``: sample each Python driver with py-spy during the latency run. ``log_dir``: where
    each driver's log is copied when it has stopped (``driver-<key>.log``). ``idle``: what the drivers not being
    called do meanwhile (module docstring). ``control_plane``: pids whose CPU in each driver's turns is counted
    (with ``idle`` ``stopped`` only)."""
    async with contextlib.AsyncExitStack() as stack:
        running = [
            await _start_subject(
                s,
                kube=kube,
                kubeconfig=kubeconfig,
                run=run,
                claims=claims,
                cdi_root=cdi_root,
                say=say,
                stack=stack,
                log_dir=log_dir,
            )
            for s in subjects
        ]
        say(
            f"prepare + unprepare, one claim at a time, {len(running)} drivers taking turns of {chunk} claims, "
            f"the others {idle} meanwhile"
        )
        cp_pids = dict(control_plane or {}) if idle == "stopped" else {}
        drivers = [r.driver for r in running]
        cpu_before = {r.subject.key: cpu_seconds(r.pid) for r in running}
        spies = []
        for r in running if profile_dir else []:
            assert profile_dir is not None
            spies.append(start_profiler(r.pid, out=profile_dir / f"profile-{r.subject.key}.txt"))
        for i, first, end in compute_turns([len(r.refs) for r in running], chunk=chunk):
            called = running[i]
            with others_stopped(drivers, called=called.driver, idle=idle):
                if idle == "stopped":
                    await settled(called.pid)
                cp_before = sum(cpu_seconds(pid) for pid in cp_pids.values())
                prep, unprep = await _latency(called.inst, called.refs[first:end])
                called.control_plane_cpu_s += sum(cpu_seconds(pid) for pid in cp_pids.values()) - cp_before
            called.prep_ms += prep
            called.unprep_ms += unprep
        # Read before the throughput runs; a stopped driver's own deferred work is inside: it runs in its turns.
        cpu_used = {r.subject.key: cpu_seconds(r.pid) - cpu_before[r.subject.key] for r in running}
        for spy in spies:
            if spy is not None:
                stop_profiler(spy)
        results = {}
        for r in running:
            result = SubjectResult(
                prepare=Latency.of(r.prep_ms),
                unprepare=Latency.of(r.unprep_ms),
                samples_ms=r.prep_ms,
                unprepare_samples_ms=r.unprep_ms,
                cpu_ms_per_claim=round(cpu_used[r.subject.key] * 1e3 / max(len(r.prep_ms), 1), 3),
                control_plane_cpu_ms_per_claim=(
                    round(r.control_plane_cpu_s * 1e3 / max(len(r.prep_ms), 1), 3) if cp_pids else None
                ),
            )
            say(f"{r.subject.title}: prepare p50 {result.prepare.p50_ms} ms, p99 {result.prepare.p99_ms} ms")
            if not r.subject.exclusive:
                for c in concurrency:
                    say(f"{r.subject.title}: throughput with {c} calls in flight")
                    with others_stopped(drivers, called=r.driver, idle=idle):
                        if idle == "stopped":
                            await settled(r.pid)
                        result.prepare_per_s[c], result.unprepare_per_s[c] = await _throughput(
                            r.inst, r.refs, concurrency=c
                        )
            result.rss_mb = round(memory_mib(r.pid)["VmRSS"], 1)
            results[r.subject.key] = result
        return results
