"""A fake node rig: a node with fake devices, composed once for every caller.

profile → the node's hardware (its resolved inventory and NICs: veth pairs on a fabric bridge) → a node emulator
(the kubelet's DRA part, on a background loop) → one ``fakedev plugin`` process per schema, registered through the
kubelet handshake and publishing its slices. ``fakedev node run``, the drills, the benchmarks and the tests all get
their nodes from here; it composes ``fakedev`` with ``harness``, which only the command-line package may do.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from fakedev.model.inventory import NodeInventory, resolve_inventory
from fakedev.nics import hardware as nic_hardware
from fakedev.nics.node import NodeNics, install_node_nics, nic_namespaces
from fakedev.plugin.paths import PluginPaths
from fakedev.plugin.protocol import ControlClient
from fakedev.profiles import load_profile
from fakedev.render import Schema, SchemaPin, default_schemas
from harness.cluster.nodes import NodeHeartbeats, delete_node
from harness.errors import ComponentError, NotReadyError
from harness.kube.waits import wait_list
from harness.node.background import BackgroundLoop, BackgroundNode
from harness.node.drivers import DriverContext, DriverProcess, DriverSpec, template_driver
from harness.node.emulator import SLICE_WIPE_GRACE, NodeEmulator, NodeSettings
from harness.node.layout import NodeLayout, node_run_id
from harness.node.podmode import PodMode
from harness.procs import RunDir, wait_for
from harness.runtime.netns import clean_run_netns, delete_netns, list_run_netns
from kubeclient import ApiError, JsonObj, KubeClient
from kubeclient.resources import PODS, RESOURCE_SLICES

REGISTER_SECONDS: Final = 30.0
PUBLISH_SECONDS: Final = 30.0
DRAIN_SECONDS: Final = 30.0
CONTROL_SECONDS: Final = 10.0


PLUGIN_PLACEHOLDERS: Final = (
    "--node-name",
    "{node}",
    "--kubelet-root",
    "{kubelet_root}",
    "--cdi-dir",
    "{cdi_dir}",
    "--kubeconfig",
    "{kubeconfig}",
)
"""Where a plugin learns its node: the harness fills these per node (:mod:`harness.node.drivers`)."""
NO_API_ARGUMENTS: Final = (*PLUGIN_PLACEHOLDERS[:6], "--no-api")
"""The same for a plugin that serves its sockets without an API server (socket-level tests)."""


def plugin_arguments(
    *,
    profile: str,
    schema: Schema | None = None,
    pin: SchemaPin | None = None,
    extra: Sequence[str] = (),
    api: bool = True,
) -> tuple[str, ...]:
    """The arguments of ``fakedev plugin`` (after the command word) for a node the harness names through placeholders;
    ``schema`` None: the profile's only one; ``pin``: ``schema`` at a release of the real driver (``nvidia@main``)
    instead of the profile's; ``api`` False: no API server (no slices, every unknown claim fails)."""
    named = pin.render() if pin is not None else schema.value if schema is not None else None
    chosen = ("--schema", named) if named is not None else ()
    return ("--profile", profile, *chosen, *(PLUGIN_PLACEHOLDERS if api else NO_API_ARGUMENTS), *extra)


def plugin_command(
    *,
    profile: str,
    schema: Schema | None = None,
    pin: SchemaPin | None = None,
    extra: Sequence[str] = (),
    api: bool = True,
) -> tuple[str, ...]:
    """``fakedev plugin`` as the harness launches any driver: a command line with per-node placeholders."""
    arguments = plugin_arguments(profile=profile, schema=schema, pin=pin, extra=extra, api=api)
    return (sys.executable, "-m", "fakedev", "plugin", *arguments)


# -- hardware ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class NodeHardware:
    """A node's devices as its machine has them: the resolved inventory, and its NICs (veth pairs on the fabric's
    bridge) when the profile has Ethernet NICs."""

    profile: str
    inventory: NodeInventory
    nics: NodeNics | None

    @classmethod
    def install(
        cls,
        *,
        profile: str,
        node_name: str,
        fabric: str | None = None,
        run_id: str | None = None,
        nics: bool = True,
    ) -> NodeHardware:
        """Resolve ``profile`` for ``node_name`` and plug its NICs in (``nics``: unless told not to). ``fabric``: the
        id of the fabric (a bridge in ``fakedev-<fabric>-fabric``) the NICs hang off; default the node's own.
        ``run_id``: whose namespaces these are (the reaper's key); default the node's run id."""
        inventory = resolve_inventory(load_profile(profile), node_name=node_name)
        own = run_id or node_run_id(node_name)
        made = install_node_nics(inventory, node_run_id=own, fabric_run_id=fabric or own) if nics else None
        return cls(profile=profile, inventory=inventory, nics=made)

    @property
    def schemas(self) -> tuple[Schema, ...]:
        """Every schema the profile has devices for (one plugin process each)."""
        return default_schemas(self.inventory)

    def plugin_args(self, schema: Schema) -> tuple[str, ...]:
        """What a plugin of ``schema`` needs to find this hardware (the dranet plugin: the NICs' namespaces)."""
        return self.nics.plugin_args() if self.nics is not None and schema is Schema.DRANET else ()

    def replug_all(self) -> None:
        """Back after a power cycle: NICs that were inside pods went with their sandboxes; the fabric kept the rest."""
        if self.nics is not None:
            nic_hardware.reinstall(self.nics.hardware, self.nics.ports)

    def remove(self) -> None:
        """Unplug every NIC (the node's namespace goes); the fabric stays for other nodes (:func:`remove_fabric`)."""
        if self.nics is not None:
            nic_hardware.remove(self.nics.hardware)


def remove_fabric(fabric: str) -> None:
    """Remove a fabric's namespace and bridge, once every node on it is gone."""
    delete_netns(nic_namespaces(node_run_id=fabric, fabric_run_id=fabric).fabric_netns)


def plugin_driver(
    *,
    hardware: NodeHardware,
    schema: Schema,
    pin: SchemaPin | None = None,
    extra: Sequence[str] = (),
    profile: str | None = None,
) -> DriverSpec:
    """The fake plugin of ``schema`` for a node with ``hardware`` (``pin``: at that release of the real driver;
    ``profile``: a path the plugin reads instead)."""
    return template_driver(
        plugin_command(
            profile=profile or hardware.profile,
            schema=schema,
            pin=pin,
            extra=(*hardware.plugin_args(schema), *extra),
        )
    )


def start_plugins(
    *,
    hardware: NodeHardware,
    schemas: Sequence[Schema],
    context: DriverContext,
    run: RunDir,
    extra: Sequence[str] = (),
) -> dict[str, DriverProcess]:
    """One plugin process per schema for the node in ``context`` (an emulated or a real kubelet); driver → process."""
    processes: dict[str, DriverProcess] = {}
    for schema in schemas:
        process = DriverProcess(
            name=f"plugin-{schema.value}",
            spec=plugin_driver(hardware=hardware, schema=schema, extra=extra),
            context=context,
            run=run,
        )
        process.start()
        processes[schema.driver] = process
    return processes


# -- the rig -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RigSpec:
    """What node to build."""

    name: str
    profile: str | None
    """A built-in profile or a profile file; None: a bare node (no fake devices) for other drivers."""
    schemas: tuple[Schema, ...] | None = None
    """Plugins to start with the node; None: one per schema the profile has devices for; (): none yet."""
    with_nics: bool = True
    """Plug in the profile's NICs (a node whose dranet plugin will not run can do without)."""
    fabric: str | None = None
    """The fabric the NICs hang off, shared by the nodes of one run and removed by its owner (:func:`remove_fabric`);
    None: a fabric of the node's own, removed with it."""
    wipe_grace: float = SLICE_WIPE_GRACE
    capacity: Mapping[str, str] | None = None
    """The Node's capacity; None: the emulator's default."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Extra Node labels (besides the emulator's own)."""
    taints: tuple[Mapping[str, str], ...] = ()
    """Taints the Node is created with ({key, value, effect})."""
    pod_mode: PodMode = PodMode.CONTAINERS
    """What the emulator does with pods once their claims are prepared (status: only mark them Running)."""
    plugin_args: tuple[str, ...] = ()
    """Extra flags for every fake plugin (e.g. ``--log-level WARNING``)."""
    pins: tuple[SchemaPin, ...] = ()
    """Releases of the real drivers to pin plugins to (``nvidia@main``); a schema without one uses the profile's."""

    def pin_of(self, schema: Schema) -> SchemaPin | None:
        return next((p for p in self.pins if p.schema == schema.value and p.release is not None), None)


@dataclass(frozen=True, kw_only=True)
class RigSite:
    """Where rigs live: the API they register with, the background loop, the node directories' base, a shared
    rootfs cache and Lease renewer."""

    client: KubeClient
    kubeconfig: Path
    loop: BackgroundLoop
    base: Path | None = None
    rootfs_cache: Path | None = None
    heartbeats: NodeHeartbeats | None = None


@dataclass(kw_only=True)
class FakeNodeRig:
    """A running node with fake devices: its hardware, its emulator and the driver processes serving it."""

    spec: RigSpec
    site: RigSite
    hardware: NodeHardware | None
    background: BackgroundNode
    plugins: dict[str, DriverProcess] = field(default_factory=dict)
    """Driver name → the fake plugin process serving it."""
    others: list[DriverProcess] = field(default_factory=list)
    """Drivers that are not fake plugins (a conformance subject, the example driver, a deliberately faulty one)."""

    @classmethod
    def start(cls, spec: RigSpec, *, site: RigSite) -> FakeNodeRig:
        """Plug the hardware in, start the emulator, start the plugins and wait until the scheduler sees their devices.
        Whatever was made is taken down again when a step fails."""
        hardware = (
            NodeHardware.install(profile=spec.profile, node_name=spec.name, fabric=spec.fabric, nics=spec.with_nics)
            if spec.profile is not None
            else None
        )
        background = BackgroundNode(
            settings=NodeSettings(
                name=spec.name,
                base=site.base,
                slice_wipe_grace=spec.wipe_grace,
                rootfs_cache=site.rootfs_cache,
                node_netns=hardware.nics.hardware.node_netns if hardware and hardware.nics else None,
                capacity=spec.capacity,
                labels=spec.labels,
                taints=spec.taints,
                pod_mode=spec.pod_mode,
            ),
            client=site.client,
            loop=site.loop,
            heartbeats=site.heartbeats,
        )
        rig = cls(spec=spec, site=site, hardware=hardware, background=background)
        try:
            background.start()
            wanted = hardware.schemas if hardware is not None and spec.schemas is None else spec.schemas or ()
            for schema in wanted:
                rig.add_plugin(schema)
        except BaseException:
            with contextlib.suppress(Exception):
                rig.stop()
            raise
        return rig

    # -- what it is ------------------------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def layout(self) -> NodeLayout:
        return self.background.layout

    @property
    def node(self) -> NodeEmulator:
        """The running emulator (a rig's node is down only in the middle of a reboot)."""
        if self.background.node is None:
            raise ComponentError(f"node {self.name} is down")
        return self.background.node

    @property
    def nics(self) -> NodeNics | None:
        return self.hardware.nics if self.hardware is not None else None

    @property
    def context(self) -> DriverContext:
        """What a driver process of this node is told (its placeholders and environment)."""
        layout = self.layout
        return DriverContext(
            node=self.name, kubelet_root=layout.kubelet_root, cdi_dir=layout.cdi, kubeconfig=self.site.kubeconfig
        )

    def plugin_paths(self, driver: str) -> PluginPaths:
        """The fake plugin's files for ``driver`` on this node (its control socket among them)."""
        return PluginPaths(kubelet_root=self.layout.kubelet_root, driver=driver)

    def control(self, driver: str, *, timeout: float = CONTROL_SECONDS) -> ControlClient:
        """A typed client of the fake plugin's control socket for ``driver`` (health, taints, call faults)."""
        return ControlClient(path=self.plugin_paths(driver).control_socket, timeout=timeout)

    # -- drivers ---------------------------------------------------------------------------------------------------

    def add_plugin(self, schema: Schema, *, publish_wait: bool = True) -> DriverProcess:
        """Start the fake plugin of ``schema`` and wait until it is registered (and, by default, its slices are
        published: a node is up when the scheduler sees its devices)."""
        if self.hardware is None:
            raise ComponentError(f"node {self.name} has no profile; it can serve other drivers only (add_driver)")
        process = DriverProcess(
            name=f"plugin-{schema.value}",
            spec=plugin_driver(
                hardware=self.hardware, schema=schema, pin=self.spec.pin_of(schema), extra=self.spec.plugin_args
            ),
            context=self.context,
            run=self.node.run,
        )
        process.start()
        self.plugins[schema.driver] = process
        self.wait_registered(schema.driver)
        if publish_wait:
            self.wait_published(schema.driver)
        return process

    def add_driver(self, spec: DriverSpec, *, name: str, registers_as: str | None = None) -> DriverProcess:
        """Start any driver for this node; ``registers_as``: wait until that driver name is registered."""
        process = DriverProcess(name=f"{name}-{len(self.others)}", spec=spec, context=self.context, run=self.node.run)
        process.start()
        self.others.append(process)
        if registers_as is not None:
            self.wait_registered(registers_as)
        return process

    def processes(self) -> list[DriverProcess]:
        return [*self.plugins.values(), *self.others]

    def wait_registered(self, driver: str, *, timeout: float = REGISTER_SECONDS) -> None:
        self.background.loop.call(self.node.plugins.wait_registered(driver, timeout=timeout), timeout=timeout + 10)

    def wait_published(self, driver: str, *, timeout: float = PUBLISH_SECONDS) -> None:
        wait_list(
            self.site.client,
            RESOURCE_SLICES,
            field_selector=f"spec.nodeName={self.name},spec.driver={driver}",
            predicate=bool,
            timeout=timeout,
            what=f"slices of {driver} on {self.name}",
        )

    # -- faults ----------------------------------------------------------------------------------------------------

    def reboot(self) -> None:
        """Power-cycle: the plugins die with the machine, everything volatile goes, the NICs are back, the node boots
        and its plugins start and register again (their checkpoints survive, as on disk)."""
        for process in self.processes():
            process.kill()
        self.background.reboot(while_off=self.hardware.replug_all if self.hardware is not None else lambda: None)
        for process in self.processes():
            process.start()
        for driver in self.plugins:
            self.wait_registered(driver)

    # -- the end ---------------------------------------------------------------------------------------------------

    def stop(self, *, drain: bool = False, decommission: bool = True) -> list[str]:
        """Take the node down and decommission it (its Node object and slices go); nothing of it stays.

        ``drain``: first delete the node's pods and, while every driver is alive to unprepare their claims, wait for
        the emulator to finish their termination. Returns the network namespaces the node *left behind* — sandboxes
        of pods whose termination was over, or anything of its run left after its hardware was removed — before
        removing them too: a non-empty answer is a leak a test can assert on.

        ``decommission=False`` is a kubelet stop instead: the plugins and the emulator stop, the NICs go, but the
        Node stays and containers keep running for the next emulator of this node to adopt (returns [])."""
        if drain:
            self._drain()
        emulator = self.background.node
        layout = self.layout
        # Pods still being run or torn down keep their sandboxes until the node goes; those are not leaks.
        active = {layout.pod(uid).sandbox_netns for uid in list(emulator.workers)} if emulator is not None else set()
        for process in self.processes():
            with contextlib.suppress(Exception):
                process.stop()
        if not decommission:
            try:
                self.background.stop(stop_pods=False)
            finally:
                if self.hardware is not None:
                    self.hardware.remove()
            return []
        try:
            self.background.stop(stop_pods=True)
        finally:
            sandboxes = set(layout.sandboxes())
            leaked = sorted(sandboxes - active)
            if self.hardware is not None:
                self.hardware.remove()
                if self.spec.fabric is None and self.hardware.nics is not None:
                    remove_fabric(layout.run_id)
                shared = (
                    {nic_namespaces(node_run_id=layout.run_id, fabric_run_id=self.spec.fabric).fabric_netns}
                    if self.spec.fabric is not None
                    else set()
                )
                leaked += sorted(set(list_run_netns(layout.run_id)) - sandboxes - shared)
            clean_run_netns(layout.run_id)  # even after a failed stop nothing of the node may stay behind
            with contextlib.suppress(ApiError):
                delete_node(self.site.client, name=self.name)  # its slices too
        return leaked

    def _drain(self) -> None:
        client = self.site.client
        for pod in pods_on_node(client, self.name):
            with contextlib.suppress(ApiError):
                client.delete(PODS, pod["metadata"]["name"], namespace=pod["metadata"]["namespace"], grace_seconds=0)
        emulator = self.background.node
        if emulator is None or not all(p.alive() for p in self.processes()):
            return  # a dead driver cannot unprepare: those pods stay until the node goes
        with contextlib.suppress(NotReadyError):
            # The API forgets a pod deleted with no grace at once; the emulator's worker is what tears it down.
            wait_for(lambda: not emulator.workers, timeout=DRAIN_SECONDS, what=f"pods of {self.name} to terminate")


def pods_on_node(client: KubeClient, node: str) -> list[JsonObj]:
    """The pods bound to ``node`` ([] when the API cannot tell: a stop goes on without them)."""
    try:
        return client.list(PODS, field_selector=f"spec.nodeName={node}")
    except ApiError:
        return []
