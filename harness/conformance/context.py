"""Everything a conformance check can use: the cluster, a node, the driver under test, helpers.

The driver is started from a command line with placeholders (see :mod:`harness.node.drivers`), registered by the
node — the emulator's plugin manager, or a real kubelet (:mod:`harness.conformance.nodes`) — and given a DeviceClass
that selects its devices. Claims for gRPC-level checks are allocated by the real scheduler through pods; the checks
call ``NodePrepareResources`` themselves over a connection of their own to the driver's endpoint.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, TypeVar

import grpc

import cdi
from harness.cluster.nodes import delete_node
from harness.conformance.nodes import UNMANAGED_LABEL, ConformanceNode, EmulatedConformanceNode
from harness.conformance.verdicts import CheckError, CheckFailed, DriverOffer
from harness.errors import DraCallError, NotReadyError
from harness.kube.podstart import StartFailure, compute_start_failure
from harness.kube.waits import wait_list
from harness.node.background import BackgroundLoop
from harness.node.dra_client import DraConnection
from harness.node.drivers import DriverContext, DriverProcess, DriverSpec
from harness.node.plugins import PluginInstance
from harness.node.startreasons import find_cdi_culprits
from harness.reaper import reap_all
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import DEVICE_CLASSES, EVENTS, NAMESPACES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from kubeletapi.types import ClaimRef, PrepareResult

A = TypeVar("A")
"""A gRPC call's answer."""

REGISTRATION_TIMEOUT: Final = 30.0
SLICES_TIMEOUT: Final = 30.0
ALLOCATION_TIMEOUT: Final = 60.0
POD_START_TIMEOUT: Final = 60.0
UNSCHEDULABLE_PATIENCE: Final = 20.0


@dataclass(kw_only=True)
class ConformanceContext:
    client: KubeClient
    kubeconfig: Path
    driver: DriverSpec
    node: ConformanceNode
    loop: BackgroundLoop
    process: DriverProcess | None = None
    namespace: str = ""
    device_class: str = ""
    driver_name: str = ""
    _counter: int = 0
    _offer: DriverOffer | None = None
    unanswered: str = ""
    """The DRA call the driver left unanswered until its deadline, and in which check: later checks that would call
    it are skipped at once instead of waiting 45 s each."""
    current: str = ""
    """The check running now (for ``unanswered``)."""
    transcript: list[tuple[str, str]] = field(default_factory=list)
    """What the current check sent and what came back, in order (``("sent" | "received", text)``); the runner
    clears it before each check and puts it in the report."""

    # -- set-up and tear-down ------------------------------------------------------------------------------------

    @property
    def node_name(self) -> str:
        return self.node.name

    @property
    def cdi_dir(self) -> Path:
        return self.node.cdi_dir

    def start(self) -> None:
        self.node.start()
        self.namespace = f"conformance-{os.urandom(3).hex()}"
        self.client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})
        self.process = DriverProcess(
            name="driver-under-test",
            spec=self.driver,
            run=self.node.run,
            context=DriverContext(
                node=self.node_name,
                kubelet_root=self.node.kubelet_root,
                cdi_dir=self.node.cdi_dir,
                kubeconfig=self.kubeconfig,
            ),
        )
        self.process.start()

    def wait_registered(self, *, timeout: float = REGISTRATION_TIMEOUT) -> PluginInstance:
        """The driver's registration, as the node (emulated or real kubelet) accepted it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            registered = self.node.registrations()
            if registered:
                inst = registered[0]
                if not self.driver_name:
                    self.driver_name = inst.driver
                    self._make_device_class()
                return inst
            if self.process is not None and not self.process.alive():
                code = self.process.process.popen.returncode if self.process.process else "?"
                last = (self.driver_log(lines=1) or "(empty log)").strip()[:300]
                raise CheckFailed(f"the driver exited (code {code}) before it registered; its last log line: {last}")
            time.sleep(0.1)
        # The latest reason only: a driver that never answers fails the same way at every retry.
        reasons = self.node.refusals()
        refused = reasons[-1] if reasons else "no registration attempt failed or was refused"
        raise CheckFailed(f"the driver did not register with the kubelet within {timeout:.0f}s ({refused})")

    def offer(self) -> DriverOffer:
        """What the driver published (devices in its slices for this node) and advertised (health), gathered once:
        checks compare their needs with it before they wait on anything."""
        if self._offer is None:
            inst = self.wait_registered()
            try:
                slices = self.wait_slices(timeout=SLICES_TIMEOUT)
            except NotReadyError:
                slices = []
            self._offer = DriverOffer(
                devices=sum(len(s["spec"].get("devices") or []) for s in slices),
                health_advertised=inst.registration.health_version is not None,
            )
        return self._offer

    def note(self, direction: str, text: str) -> None:
        """Record what a check sent or received, for the report."""
        self.transcript.append((direction, text))

    def _make_device_class(self) -> None:
        self.device_class = f"conformance-{self.namespace}"
        self.client.create(
            DEVICE_CLASSES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": self.device_class},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{self.driver_name}"'}}]},
            },
        )

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.delete_pods()  # while the driver still runs: a real kubelet unprepares them through it
        if self.process is not None:
            self.process.stop()
        self.node.stop()
        with contextlib.suppress(Exception):
            if self.device_class:
                self.client.delete(DEVICE_CLASSES, self.device_class)
            self.client.delete(NAMESPACES, self.namespace)
            if self.node.kind == "emulated":  # a real node decommissions itself when it stops
                delete_node(self.client, name=self.node_name)

    def driver_log(self, *, lines: int = 40) -> str:
        if self.process is None or not self.process.log_path.exists():
            return ""
        return "\n".join(self.process.log_path.read_text(errors="replace").splitlines()[-lines:])

    # -- claims --------------------------------------------------------------------------------------------------

    def _name(self, stem: str) -> str:
        self._counter += 1
        return f"{stem}-{self._counter}"

    def allocated_claim(self, *, pods: int = 1, managed: bool = False, command: str = "sleep 3600") -> JsonObj:
        """A claim for one device of the driver, allocated by the real scheduler and reserved for ``pods`` pods."""
        self.wait_registered()  # the DeviceClass is made once the driver's name is known (e.g. under --only)
        name = self._name("claim")
        self.client.create(
            RESOURCE_CLAIMS,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": self.device_class}}]}},
            },
            namespace=self.namespace,
        )
        made = [self.create_pod(claim=name, managed=managed, command=command) for _ in range(pods)]
        self.note(
            "sent",
            f"ResourceClaim {self.namespace}/{name} (one device of class {self.device_class}), "
            f"pod(s) {', '.join(made)} using it",
        )
        deadline = time.monotonic() + ALLOCATION_TIMEOUT
        since: float | None = None
        while True:
            claim = self.client.get(RESOURCE_CLAIMS, name, namespace=self.namespace)
            if len((claim.get("status") or {}).get("reservedFor") or []) >= pods:
                return claim
            unschedulable = self._unschedulable(made)
            # The scheduler retries (a DeviceClass it has not seen yet is a passing reason): only a pod still
            # unschedulable after UNSCHEDULABLE_PATIENCE ends the wait early.
            since = (since or time.monotonic()) if unschedulable else None
            if (since is not None and time.monotonic() - since >= UNSCHEDULABLE_PATIENCE) or (
                time.monotonic() >= deadline
            ):
                # The scheduler is the harness's side: a claim it cannot place is an environment or set-up problem
                # (devices the DeviceClass does not select, devices still held by an earlier check).
                why = unschedulable or f"not allocated within {ALLOCATION_TIMEOUT:.0f}s"
                raise CheckError(
                    f"the scheduler could not allocate claim {name} to a device of {self.driver_name} ({why}); "
                    f"check the driver's ResourceSlices and kube-scheduler's log"
                )
            time.sleep(0.2)

    def _unschedulable(self, pods: Sequence[str]) -> str:
        for pod in pods:
            got = self.client.get_or_none(PODS, pod, namespace=self.namespace) or {}
            for cond in (got.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                    return f"pod {pod} is unschedulable: {str(cond.get('message', ''))[:300]}"
        return ""

    def start_failure(self, pod: str) -> StartFailure | None:
        """Why the pod's containers cannot start (the runtime's words), or None while nothing says so."""
        got = self.client.get_or_none(PODS, pod, namespace=self.namespace)
        if got is None:
            return None
        events = self.client.list(EVENTS, namespace=self.namespace, field_selector=f"involvedObject.name={pod}")
        failure = compute_start_failure(got, events=events)
        if failure is None or "CDI" not in failure.message or "CDI spec" in failure.message:
            return failure
        # A real runtime quotes the path it could not use, not whose it was: the node's specs say.
        culprits = find_cdi_culprits(message=failure.message, registry=cdi.load_registry(spec_dirs=[self.node.cdi_dir]))
        if not culprits:
            return failure
        return replace(failure, message=f"{failure.message} (named by CDI device {', '.join(culprits)})")

    def create_pod(self, *, claim: str, managed: bool, command: str = "sleep 3600") -> str:
        name = self._name("pod")
        labels = {} if managed else {UNMANAGED_LABEL: "true"}
        self.client.create(
            PODS,
            self.node.adapt_pod(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "labels": labels},
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 1,
                        "nodeSelector": {"kubernetes.io/hostname": self.node_name},
                        "resourceClaims": [{"name": "dev", "resourceClaimName": claim}],
                        "containers": [
                            {
                                "name": "c",
                                "image": "busybox",
                                "command": ["sh", "-c", command],
                                "resources": {"claims": [{"name": "dev"}]},
                            }
                        ],
                    },
                }
            ),
            namespace=self.namespace,
        )
        return name

    def unallocated_claim(self) -> JsonObj:
        self.wait_registered()
        name = self._name("idle")
        return self.client.create(
            RESOURCE_CLAIMS,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": self.device_class}}]}},
            },
            namespace=self.namespace,
        )

    @staticmethod
    def ref(claim: JsonObj) -> ClaimRef:
        m = claim["metadata"]
        return ClaimRef(uid=m["uid"], namespace=m["namespace"], name=m["name"])

    def slices(self) -> list[JsonObj]:
        return self.client.list(
            RESOURCE_SLICES, field_selector=f"spec.nodeName={self.node_name},spec.driver={self.driver_name}"
        )

    def wait_slices(self, *, timeout: float = 30.0) -> list[JsonObj]:
        return wait_list(
            self.client,
            RESOURCE_SLICES,
            timeout=timeout,
            what="the driver's slices",
            field_selector=f"spec.nodeName={self.node_name},spec.driver={self.driver_name}",
            predicate=bool,
        )

    # -- gRPC, as the kubelet sends it ---------------------------------------------------------------------------

    def prepare(self, claims: Sequence[ClaimRef], *, timeout: float = 45.0) -> dict[str, PrepareResult]:
        return self._call(
            "NodePrepareResources",
            claims,
            lambda inst: inst.connection.prepare(claims, version=inst.registration.dra_version, timeout=timeout),
            render=render_prepare_answer,
            timeout=timeout,
        )

    def unprepare(self, claims: Sequence[ClaimRef], *, timeout: float = 45.0) -> dict[str, str]:
        return self._call(
            "NodeUnprepareResources",
            claims,
            lambda inst: inst.connection.unprepare(claims, version=inst.registration.dra_version, timeout=timeout),
            render=lambda answer: str(answer or "{}"),
            timeout=timeout,
        )

    def _call(
        self,
        call: str,
        claims: Sequence[ClaimRef],
        send: Callable[[PluginInstance], Coroutine[Any, Any, A]],
        *,
        render: Callable[[A], str],
        timeout: float,
    ) -> A:
        """One gRPC call to the registered plugin, noted as sent and received (a silence is remembered)."""
        inst = self.wait_registered()
        self.note("sent", f"{call} {render_refs(claims)}")
        try:
            answer = self.loop.call(send(inst))
        except Exception as exc:
            self.note("received", f"{call} failed: {exc}")
            self._remember_silence(exc, call=call, timeout=timeout)
            raise
        self.note("received", f"{call} → {render(answer)}")
        return answer

    def _remember_silence(self, exc: Exception, *, call: str, timeout: float) -> None:
        if isinstance(exc, DraCallError) and exc.code == grpc.StatusCode.DEADLINE_EXCEEDED and not self.unanswered:
            self.unanswered = f"it left {call} unanswered for {timeout:.0f}s in {self.current or 'an earlier check'}"

    def fresh_connection(self) -> DraConnection:
        """A new connection to the registered endpoint (created on the background loop)."""
        inst = self.wait_registered()

        async def make() -> DraConnection:
            return DraConnection(endpoint=inst.registration.endpoint)

        return self.loop.call(make())

    def restart_driver(self, *, kill: bool) -> PluginInstance:
        """Kill -9 (or stop) the driver and start it again; returns the new registration."""
        assert self.process is not None
        since = time.monotonic()
        if kill:
            self.process.kill()
        else:
            self.process.stop()
        self.process.start()
        deadline = time.monotonic() + REGISTRATION_TIMEOUT
        while time.monotonic() < deadline:
            fresh = [i for i in self.node.registrations() if i.registration.registered_at > since]
            if fresh:
                return fresh[0]
            time.sleep(0.1)
        raise CheckFailed(f"the driver did not register again within {REGISTRATION_TIMEOUT:.0f}s of a restart")

    def cdi_files(self) -> list[Path]:
        return sorted(p for p in self.cdi_dir.iterdir() if p.is_file() and not p.name.startswith("."))

    def artifacts(self) -> dict[str, str]:
        """Driver log, CDI specs and checkpoints — attached to failed checks."""
        out = {"driver log": self.driver_log(lines=200)}
        for f in self.cdi_files():
            out[f"CDI {f.name}"] = f.read_text(errors="replace")[:4000]
        out.update(self.node.artifacts())
        return out

    def delete_pods(self, *, timeout: float = 60.0) -> None:
        """Delete the run's pods and wait until the node has let them go. The emulator leaves the checks' pods
        alone, so they go at once; a real kubelet stops each and unprepares its claims before the API forgets it."""
        grace = 0 if self.node.kind == "emulated" else 1
        for pod in self.client.list(PODS, namespace=self.namespace):
            self.client.delete(PODS, pod["metadata"]["name"], namespace=self.namespace, grace_seconds=grace)
        wait_list(
            self.client,
            PODS,
            namespace=self.namespace,
            timeout=timeout,
            predicate=lambda items: not items,
            what="the check's pods gone from the node",
        )

    def reset(self, *, timeout: float = 60.0) -> None:
        """Delete the pods and claims a check made, and wait until their devices are free again."""
        self.delete_pods(timeout=timeout)
        for claim in self.client.list(RESOURCE_CLAIMS, namespace=self.namespace):
            self.client.delete(RESOURCE_CLAIMS, claim["metadata"]["name"], namespace=self.namespace)
        wait_list(
            self.client,
            RESOURCE_CLAIMS,
            namespace=self.namespace,
            timeout=timeout,
            predicate=lambda items: not items,
            what="claims of the last check deleted",
        )


def render_refs(claims: Sequence[ClaimRef]) -> str:
    return "[" + ", ".join(f"{c.namespace}/{c.name} uid={c.uid}" for c in claims) + "]"


def render_prepare_answer(answer: dict[str, PrepareResult]) -> str:
    """A prepare answer in one line per claim: its devices and CDI IDs, or its error."""
    parts = []
    for uid, result in answer.items():
        if result.error:
            parts.append(f"{uid}: error {result.error!r}")
        else:
            devices = ", ".join(f"{d.pool}/{d.device} {list(d.cdi_device_ids)}" for d in result.devices)
            parts.append(f"{uid}: [{devices}]")
    return "; ".join(parts) or "(no entries)"


@contextlib.contextmanager
def conformance_context(
    *,
    client: KubeClient,
    kubeconfig: Path,
    driver: DriverSpec,
    node_name: str | None = None,
    node: Callable[[BackgroundLoop], ConformanceNode] | None = None,
) -> Iterator[ConformanceContext]:
    """Start a node (an emulated one unless ``node`` makes another) and the driver under test; tear both down
    afterwards."""
    base = Path(tempfile.mkdtemp(prefix="fd-"))  # short: Unix socket paths stay under 108 bytes
    loop = BackgroundLoop()
    loop.start()
    ctx = ConformanceContext(
        client=client,
        kubeconfig=kubeconfig,
        driver=driver,
        loop=loop,
        node=node(loop)
        if node is not None
        else EmulatedConformanceNode(
            client=client, loop=loop, node_name=node_name or f"conformance-{os.urandom(3).hex()}", base=base
        ),
    )
    try:
        ctx.start()
        yield ctx
    finally:
        try:
            ctx.stop()
        finally:
            loop.stop()
            reap_all(base=base)
            shutil.rmtree(base, ignore_errors=True)
