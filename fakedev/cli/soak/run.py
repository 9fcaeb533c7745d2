"""One soak: a fake node under a continuous pod churn, through long control-plane outages, watched for leaks.

The node is a fake node rig (emulator + the example-schema plugin). Pods come and go for the whole run; first
kube-apiserver and then etcd are stopped for minutes. While a component is down the soak asks the plugin to prepare
claims it already holds (a kubelet does that after a restart): those must be answered from its checkpoint, without
the API. After each outage the churn pauses until the node is at rest again — every pod Running, the plugin holding
exactly the claims of the pods that exist — and that time is the outage's convergence. At the end every pod goes and
nothing may stay: no claim in the plugin's checkpoint, no CDI spec, no sandbox. All along, the RSS, open files and
threads of the plugin and of the emulator's process are sampled; their drift is the leak verdict.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import grpc

from fakedev.cli.rig import FakeNodeRig, RigSite, RigSpec
from fakedev.cli.soak.churn import Churn
from fakedev.cli.soak.footprint import Drift, Footprint, FootprintSampler, compute_drift
from fakedev.driver.checkpoint import Checkpoint
from fakedev.render import Schema
from harness.cluster.local import LocalCluster
from harness.errors import HarnessError, NotReadyError
from harness.node.background import BackgroundLoop
from harness.procs import wait_for
from harness.reaper import reap_all
from kubeclient import JsonObj, KubeClient
from kubeclient.errors import KubeClientError
from kubeclient.resources import DEVICE_CLASSES, NAMESPACES, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS
from kubeletapi.types import ClaimRef

DRIVER: Final = Schema.EXAMPLE.driver
PROBE_SECONDS: Final = 10.0
PROBE_CLAIMS: Final = 5
PROBE_DEADLINE: Final = 10.0
"""A claim the plugin holds is answered from its checkpoint in milliseconds; ten seconds is a refusal."""
PROGRESS_SECONDS: Final = 30.0
MAX_DEVICES: Final = 128
"""A profile's example device count is capped there (one device per pod)."""

Say = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class SoakSettings:
    pods: int = 100
    """Pods kept alive at once (and devices on the node)."""
    minutes: float = 10.0
    """Churn after the outages."""
    warmup_seconds: float = 60.0
    apiserver_outage_seconds: float = 300.0
    etcd_outage_seconds: float = 300.0
    period: float = 0.5
    """Seconds between two churn actions (a create or a delete)."""
    sample_seconds: float = 5.0
    converge_seconds: float = 600.0


@dataclass(frozen=True, kw_only=True)
class OutageResult:
    component: str
    seconds: float
    known_claims_asked: int
    """Prepare calls for claims the plugin already held, made while the component was down."""
    known_claims_served: int
    churn_api_errors: int
    """Calls of the churn that failed while the component was down (and were tried again)."""
    converged_seconds: float | None
    """From the component's return until the node was at rest; None: it never was, within the limit."""
    not_converged: str = ""


@dataclass(frozen=True, kw_only=True)
class SoakReport:
    settings: SoakSettings
    seconds: float
    pods_created: int
    pods_deleted: int
    churn_api_errors: int
    outages: tuple[OutageResult, ...]
    at_rest_at_end: bool
    not_at_rest: str
    leaked_namespaces: tuple[str, ...]
    load_since: float
    """Sample time (seconds) the steady churn after the outages began: drift is judged from there on."""
    load_until: float
    """Sample time the churn stopped (before every pod is deleted)."""
    drift: Mapping[str, tuple[Drift, ...]]
    samples: Mapping[str, tuple[Footprint, ...]]

    @property
    def ok(self) -> bool:
        return (
            self.at_rest_at_end
            and not self.leaked_namespaces
            and all(
                o.converged_seconds is not None and o.known_claims_served == o.known_claims_asked for o in self.outages
            )
            and all(d.flat for drifts in self.drift.values() for d in drifts)
        )


def render_profile(*, devices: int) -> str:
    """A node with one example device per pod the churn keeps."""
    return (
        "name: soak\n"
        "description: example-schema devices for a soak, one per pod\n"
        f"example: {{count: {devices}, model: LATEST-GPU-MODEL, memory: 80Gi, driverVersion: 1.0.0}}\n"
    )


@dataclass(kw_only=True)
class Soak:
    settings: SoakSettings
    cluster: LocalCluster
    say: Say
    suffix: str = field(default_factory=lambda: os.urandom(3).hex())
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def client(self) -> KubeClient:
        return self.cluster.client

    @property
    def namespace(self) -> str:
        return f"soak-{self.suffix}"

    def run(self) -> SoakReport:
        s = self.settings
        t0 = time.monotonic()
        base = Path(tempfile.mkdtemp(prefix="fd-"))  # short: socket paths live below it
        profile = base / "soak.yaml"
        profile.write_text(render_profile(devices=min(MAX_DEVICES, max(1, s.pods))))
        loop = BackgroundLoop()
        loop.start()
        site = RigSite(
            client=self.client, kubeconfig=self.cluster.kubeconfig, loop=loop, base=base, rootfs_cache=base / "cache"
        )
        rig: FakeNodeRig | None = None
        sampler: FootprintSampler | None = None
        churn: Churn | None = None
        outages: list[OutageResult] = []
        leaked: list[str] = []
        load_since, load_until = 0.0, float("inf")
        rest = "the soak did not get that far"
        try:
            self._objects()
            rig = FakeNodeRig.start(RigSpec(name=f"soak-{self.suffix}", profile=str(profile)), site=site)
            sampler = FootprintSampler(pids=lambda: _pids(rig), every=s.sample_seconds)
            churn = Churn(
                client=self.client,
                namespace=self.namespace,
                node=rig.name,
                template="dev",
                pods=s.pods,
                period=s.period,
            )
            sampler.start()
            churn.start()
            self.say(f"node {rig.name}: churning up to {s.pods} pods, warming up for {s.warmup_seconds:.0f}s")
            self._churn_for(s.warmup_seconds, churn=churn, sampler=sampler)
            for component, seconds in (("kube-apiserver", s.apiserver_outage_seconds), ("etcd", s.etcd_outage_seconds)):
                if seconds > 0:
                    outages.append(self._outage(component, seconds=seconds, rig=rig, churn=churn))
            self.say(f"churning for {s.minutes:g} more minutes (the leak verdict's window)")
            load_since = round(time.monotonic() - sampler.started, 1)
            self._churn_for(s.minutes * 60, churn=churn, sampler=sampler)
            churn.stop()
            load_until = round(time.monotonic() - sampler.started, 1)
            self.say(f"deleting every pod ({len(churn.live)} alive); nothing may stay")
            self.client.delete_collection(PODS, namespace=self.namespace)
            churn.live.clear()
            rest = self._settle(rig=rig, churn=churn)
        finally:
            if churn is not None:
                churn.stop()
            if sampler is not None:
                sampler.stop()
            if rig is not None:
                leaked = rig.stop(drain=True)
            with contextlib.suppress(KubeClientError):
                self.client.delete(NAMESPACES, self.namespace)
                self.client.delete(DEVICE_CLASSES, self.namespace)
            loop.stop()
            reap_all(base=base)
            shutil.rmtree(base, ignore_errors=True)
        samples = {name: tuple(values) for name, values in (sampler.samples if sampler else {}).items()}
        return SoakReport(
            settings=s,
            seconds=round(time.monotonic() - t0, 1),
            pods_created=churn.created if churn else 0,
            pods_deleted=churn.deleted if churn else 0,
            churn_api_errors=churn.api_errors if churn else 0,
            outages=tuple(outages),
            at_rest_at_end=not rest,
            not_at_rest=rest,
            leaked_namespaces=tuple(leaked),
            load_since=load_since,
            load_until=load_until,
            drift={
                name: tuple(compute_drift(values, since=load_since, until=load_until))
                for name, values in samples.items()
            },
            samples=samples,
        )

    # -- set-up ------------------------------------------------------------------------------------------------------

    def _objects(self) -> None:
        self.client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})
        self.client.create(
            DEVICE_CLASSES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": self.namespace},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            },
        )
        self.client.create(
            RESOURCE_CLAIM_TEMPLATES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "dev"},
                "spec": {
                    "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": self.namespace}}]}}
                },
            },
            namespace=self.namespace,
        )

    # -- phases ------------------------------------------------------------------------------------------------------

    def _churn_for(self, seconds: float, *, churn: Churn, sampler: FootprintSampler) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self._stop.wait(min(PROGRESS_SECONDS, left))
            recent = sampler.samples.get("plugin") or []
            plugin = recent[-1] if recent else None
            self.say(
                f"  {len(churn.live)} pods alive, {churn.created} created, {churn.deleted} deleted, "
                f"{churn.api_errors} API errors"
                + (f"; plugin RSS {plugin.rss_mib} MiB, {plugin.fds} fds, {plugin.threads} threads" if plugin else "")
            )

    def _outage(self, component: str, *, seconds: float, rig: FakeNodeRig, churn: Churn) -> OutageResult:
        self.say(f"{component} down for {seconds:.0f}s")
        errors_before = churn.api_errors
        asked = served = 0
        self.cluster.stop_component(component, timeout=10)
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                a, s = self._ask_known_claims(rig)
                asked, served = asked + a, served + s
                self._stop.wait(min(PROBE_SECONDS, max(0.0, deadline - time.monotonic())))
        finally:
            self.cluster.start_component(component)
            self.cluster.wait_ready(names=(component,), timeout=120)
        errors = churn.api_errors - errors_before
        self.say(f"{component} back; known claims served {served}/{asked}; the churn retried {errors} calls")
        churn.pause()
        t0 = time.monotonic()
        rest = self._settle(rig=rig, churn=churn)
        took = round(time.monotonic() - t0, 1)
        churn.resume()
        self.say(f"  at rest after {took}s" if not rest else f"  NOT at rest: {rest}")
        return OutageResult(
            component=component,
            seconds=seconds,
            known_claims_asked=asked,
            known_claims_served=served,
            churn_api_errors=errors,
            converged_seconds=None if rest else took,
            not_converged=rest,
        )

    def _ask_known_claims(self, rig: FakeNodeRig) -> tuple[int, int]:
        """Prepare again a few claims the node has prepared, as a restarted kubelet would: the plugin must answer from
        its checkpoint while the API is away. Returns (asked, served)."""
        emulator = rig.node
        instance = emulator.plugins.instance_for(DRIVER)
        if instance is None:
            return 0, 0

        async def known() -> list[ClaimRef]:
            return [c.ref for c in emulator.dra.claims.values() if DRIVER in c.devices][:PROBE_CLAIMS]

        refs = rig.background.loop.call(known())
        if not refs:
            return 0, 0
        try:
            answers = rig.background.loop.call(
                instance.connection.prepare(refs, version=instance.registration.dra_version, timeout=PROBE_DEADLINE),
                timeout=PROBE_DEADLINE + 5,
            )
        except (HarnessError, grpc.RpcError) as exc:
            self.say(f"  known claims not served: {_first_line(exc)}")
            return len(refs), 0
        return len(refs), sum(1 for r in refs if r.uid in answers and not answers[r.uid].error)

    def _settle(self, *, rig: FakeNodeRig, churn: Churn) -> str:
        """Wait until the node is at rest; "" when it is, else what it still saw when the limit ran out."""
        seen = [""]

        def at_rest() -> bool:
            seen[0] = self._unrest(rig=rig, churn=churn)
            return not seen[0]

        with contextlib.suppress(NotReadyError):
            wait_for(at_rest, timeout=self.settings.converge_seconds, what="the node at rest", interval=1.0)
        return seen[0]

    def _unrest(self, *, rig: FakeNodeRig, churn: Churn) -> str:
        """What keeps the node from being at rest, or "": the pods are exactly the churn's and all Running, the
        plugin holds exactly their claims, and with no pods there is no CDI spec and no sandbox either."""
        pods = self.client.list(PODS, namespace=self.namespace)
        names = {p["metadata"]["name"] for p in pods}
        if names != set(churn.live):
            return f"{len(names)} pods exist, {len(churn.live)} wanted"
        waiting = sorted(p["metadata"]["name"] for p in pods if (p.get("status") or {}).get("phase") != "Running")
        if waiting:
            return f"{len(waiting)} pods not Running (e.g. {waiting[0]})"
        claims = {
            c["metadata"]["name"]: c["metadata"]["uid"]
            for c in self.client.list(RESOURCE_CLAIMS, namespace=self.namespace)
        }
        wanted = {claims.get(_claim_name(p), "?") for p in pods}
        held = set(Checkpoint(path=rig.plugin_paths(DRIVER).plugin_dir / "checkpoint.json").load())
        if held != wanted:
            return f"the plugin holds {len(held)} claims, the pods use {len(wanted)}"
        if not pods:
            specs = sorted(p.name for p in rig.layout.cdi.iterdir())
            if specs:
                return f"CDI specs left: {specs[:3]}"
            if rig.layout.sandboxes():
                return f"sandboxes left: {rig.layout.sandboxes()[:3]}"
            if claims:
                return f"claims left: {sorted(claims)[:3]}"
        return ""


def _pids(rig: FakeNodeRig | None) -> dict[str, int]:
    """The plugin (its current process: a restart changes it) and this process, which runs the emulator."""
    pids = {"emulator": os.getpid()}
    process = rig.plugins[DRIVER].process if rig is not None else None
    if process is not None:
        pids["plugin"] = process.pid
    return pids


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _claim_name(pod: JsonObj) -> str:
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        return str(status.get("resourceClaimName") or "")
    return ""
