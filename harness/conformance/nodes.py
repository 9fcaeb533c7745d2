"""The node a conformance run registers the driver with: the node emulator (default) or a real kubelet + containerd.

Both give the checks the same things: where the driver's sockets and CDI specs go, the registrations the node
accepted (each with a connection the checks use to call NodePrepareResources as the kubelet would), refusals, a pod's
output and whether its teardown (unprepare included) is over. The differences are in how each learns them:

- emulated: the emulator *is* the kubelet's plugin manager, so registrations and refusals are its own records, and
  pods the checks label ``conformance.fakedev.io/direct`` are left alone so that only the checks call the driver;
- real: the real kubelet registers the driver; a registration counts once the kubelet logs it as connected, and the
  suite then reads the plugin's GetInfo itself (no NotifyRegistrationStatus: the kubelet has sent it) and dials the
  advertised endpoint. The kubelet prepares every pod it runs, labelled or not, so on a real node a claim the checks
  prepare directly has usually been prepared by the kubelet already — which the contract's idempotency must absorb.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from harness.cluster.nodes import NodeHeartbeats
from harness.errors import HandshakeError, HarnessError
from harness.node.background import BackgroundLoop, BackgroundNode
from harness.node.dra_client import DraConnection
from harness.node.emulator import NodeEmulator, NodeSettings
from harness.node.plugins import PluginInstance, socket_id
from harness.node.registration import handshake
from harness.procs import RunDir
from harness.realnode.node import RealNode, RealNodeSettings
from kubeclient import KubeClient
from kubeclient.resources import PODS

UNMANAGED_LABEL: Final = "conformance.fakedev.io/direct"
KUBELET_CONNECTED: Final = re.compile(r'driverName="(?P<driver>[^"]+)".*connected=true')
"""The kubelet's line for a DRA plugin it registered and connected to (``--v=2``)."""
KUBELET_REFUSED: Final = re.compile(r"RegisterPlugin error -- (?!failed to get plugin info)[^\n]*")
"""The kubelet's line for a registration it refused (no handler for the plugin's type, validation failed, …); a
GetInfo that failed because the socket went away during a restart is not a refusal."""


class ConformanceNode(Protocol):
    kind: str
    """``emulated`` or ``real``."""

    @property
    def name(self) -> str: ...

    @property
    def kubelet_root(self) -> Path: ...

    @property
    def cdi_dir(self) -> Path: ...

    @property
    def run(self) -> RunDir:
        """Where the driver's process and log go."""
        ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def registrations(self) -> list[PluginInstance]:
        """The plugin instances the node has registered and still holds, oldest first."""
        ...

    def refusals(self) -> list[str]:
        """Why earlier registration attempts failed or were refused."""
        ...

    def adapt_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        """The pod as this node can run it (image, network)."""
        ...

    def container_output(self, *, namespace: str, pod: str) -> str: ...

    def torn_down(self, *, namespace: str, pod: str) -> bool:
        """The pod's containers are gone and its claims unprepared."""
        ...

    def artifacts(self) -> dict[str, str]:
        """Node-side state worth attaching to a failed check."""
        ...


@dataclass(kw_only=True)
class EmulatedConformanceNode:
    client: KubeClient
    loop: BackgroundLoop
    node_name: str
    base: Path
    kind: str = "emulated"
    background: BackgroundNode | None = None
    heartbeats: NodeHeartbeats | None = None

    @property
    def emulator(self) -> NodeEmulator:
        assert self.background is not None and self.background.node is not None, "the node is not running"
        return self.background.node

    @property
    def name(self) -> str:
        return self.node_name

    @property
    def kubelet_root(self) -> Path:
        return self.emulator.layout.kubelet_root

    @property
    def cdi_dir(self) -> Path:
        return self.emulator.layout.cdi

    @property
    def run(self) -> RunDir:
        return self.emulator.run

    def start(self) -> None:
        self.heartbeats = NodeHeartbeats(client=self.client)
        self.heartbeats.start()
        settings = NodeSettings(
            name=self.node_name, base=self.base, unmanaged_label=UNMANAGED_LABEL, rootfs_cache=self.base / "cache"
        )
        self.background = BackgroundNode(settings=settings, client=self.client, loop=self.loop)
        self.background.start()
        self.heartbeats.add(self.node_name)

    def stop(self) -> None:
        if self.background is not None and self.background.node is not None:
            self.background.stop(stop_pods=True)
        if self.heartbeats is not None:
            self.heartbeats.stop()

    def registrations(self) -> list[PluginInstance]:
        return sorted(self.emulator.plugins.instances.values(), key=lambda i: i.registration.registered_at)

    def refusals(self) -> list[str]:
        # "failed": the handshake itself broke (a GetInfo that timed out or errored), "refused": the kubelet's rules.
        return [e.detail for e in self.emulator.plugins.events if e.kind in ("refused", "failed")]

    def adapt_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        return pod

    def container_output(self, *, namespace: str, pod: str) -> str:
        worker = self.emulator.pod_worker(namespace=namespace, name=pod)
        return worker.container_logs() if worker else ""

    def torn_down(self, *, namespace: str, pod: str) -> bool:
        return self.emulator.pod_worker(namespace=namespace, name=pod) is None

    def artifacts(self) -> dict[str, str]:
        return checkpoints(plugins=self.emulator.layout.plugins, kubelet=self.emulator.layout.dra_checkpoint)


@dataclass(kw_only=True)
class RealConformanceNode:
    """A real node the run starts (``start_node``) or one that is already up (a test's fixture)."""

    client: KubeClient
    loop: BackgroundLoop
    node: RealNode
    start_node: Callable[[], None] | None = None
    """Starts ``node``; None when the caller started it and will stop it."""
    kind: str = "real"
    _seen: dict[tuple[int, int], PluginInstance] = field(default_factory=dict)
    _accepted: Counter[str] = field(default_factory=Counter)
    """Instances taken per driver: each needs a kubelet registration line of its own."""
    _counted: int = 0
    _refused_before: int = 0

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def kubelet_root(self) -> Path:
        return self.node.layout.kubelet_root

    @property
    def cdi_dir(self) -> Path:
        return self.node.layout.cdi_dir

    @property
    def run(self) -> RunDir:
        return self.node.run

    def start(self) -> None:
        if self.start_node is not None:
            self.start_node()
        # Registrations from before this run (another driver under a shared node) are not this run's.
        log = self.node.log_text("kubelet")
        self._counted = len(KUBELET_CONNECTED.findall(log))
        self._refused_before = len(KUBELET_REFUSED.findall(log))

    def stop(self) -> None:
        for inst in self._seen.values():
            self._close(inst)
        self._seen.clear()
        if self.start_node is not None:
            self.node.stop()

    def registrations(self) -> list[PluginInstance]:
        connected = Counter(KUBELET_CONNECTED.findall(self.node.log_text("kubelet"))[self._counted :])
        registry = self.kubelet_root / "plugins_registry"
        for socket in sorted(registry.glob("*.sock")):
            key = socket_id(socket)  # None: the socket went away since the listing
            if key is None:
                continue
            known = self._seen.get(key)
            # A socket seen before is a new instance only if the kubelet registered one more: a plugin restarted
            # at once often gets the freed inode number of its old socket.
            if known is not None and self._accepted[known.driver] >= connected[known.driver]:
                continue
            with contextlib.suppress(HandshakeError, HarnessError, OSError):
                registration = self.loop.call(handshake(socket, registered=(), notify=False), timeout=15)
                if self._accepted[registration.driver] < connected[registration.driver]:
                    self._accepted[registration.driver] += 1
                    if known is not None:
                        self._close(known)
                    self._seen[key] = PluginInstance(
                        registration=registration, connection=self._connect(registration.endpoint), socket_id=key
                    )
        live = {k: i for k, i in self._seen.items() if socket_id(i.registration.registration_socket) == k}
        return sorted(live.values(), key=lambda i: i.registration.registered_at)

    def _close(self, inst: PluginInstance) -> None:
        with contextlib.suppress(Exception):
            self.loop.call(inst.connection.close(), timeout=5)

    def _connect(self, endpoint: Path) -> DraConnection:
        async def make() -> DraConnection:
            return DraConnection(endpoint=endpoint)

        return self.loop.call(make())

    def refusals(self) -> list[str]:
        return KUBELET_REFUSED.findall(self.node.log_text("kubelet"))[self._refused_before :]

    def adapt_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        return pod  # as written: the node has a pod network and serves images by the names pods use

    def container_output(self, *, namespace: str, pod: str) -> str:
        status, text = self.client.get_text(f"/api/v1/namespaces/{namespace}/pods/{pod}/log")
        return text if status == 200 else ""

    def torn_down(self, *, namespace: str, pod: str) -> bool:
        # The kubelet lets the API server forget a deleted pod only once its resources, DRA claims included, are
        # released (podResourcesAreReclaimed), so "gone from the API" is "unprepared".
        return self.client.get_or_none(PODS, pod, namespace=namespace) is None

    def artifacts(self) -> dict[str, str]:
        tail = "\n".join(self.node.log_text("kubelet").splitlines()[-80:])
        plugins, kubelet = self.kubelet_root / "plugins", self.kubelet_root / "dra_manager_state"
        return {"kubelet log (tail)": tail, **checkpoints(plugins=plugins, kubelet=kubelet)}


def checkpoints(*, plugins: Path, kubelet: Path) -> dict[str, str]:
    """The drivers' checkpoints under ``plugins`` and the kubelet's DRA checkpoint, for a failed check's report."""
    out = {
        f"checkpoint {f.relative_to(plugins)}": f.read_text(errors="replace")[:4000]
        for f in plugins.rglob("checkpoint*.json")
    }
    if kubelet.exists():
        out["kubelet checkpoint"] = kubelet.read_text(errors="replace")[:4000]
    return out


def real_node(
    *, client: KubeClient, settings: RealNodeSettings, progress: Callable[[str], None] = lambda _m: None
) -> Callable[[BackgroundLoop], ConformanceNode]:
    """A factory for ``conformance_context(node=...)``: a real node started for the run and stopped after it."""

    def make(loop: BackgroundLoop) -> ConformanceNode:
        node = RealNode(settings=settings)
        return RealConformanceNode(
            client=client, loop=loop, node=node, start_node=lambda: node.start(client=client, progress=progress)
        )

    return make
