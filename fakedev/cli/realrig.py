"""A real node with a profile's hardware: the NICs plugged in first (in namespaces named after the node's run, so the
reaper removes them with it), then kubelet + containerd told where those NICs live, then one fake plugin per schema.

Used by ``fakedev node run --real`` and the real-node tests that need the profile's devices, NICs included.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fakedev.cli.rig import NodeHardware, remove_fabric, start_plugins
from fakedev.render import Schema
from harness.node.drivers import DriverContext, DriverProcess
from harness.procs import new_run_id
from harness.realnode.node import RealNode, RealNodeSettings
from kubeclient import KubeClient


@dataclass(kw_only=True)
class RealNodeRig:
    node: RealNode
    hardware: NodeHardware
    plugins: dict[str, DriverProcess] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.node.name

    @classmethod
    def start(
        cls,
        *,
        profile: str,
        settings: RealNodeSettings,
        client: KubeClient,
        kubeconfig: Path,
        schemas: Sequence[Schema] | None = None,
        extra: Sequence[str] = (),
        progress: Callable[[str], None] = lambda _m: None,
    ) -> RealNodeRig:
        """Plug the profile's hardware in, start the node, then its plugins (``schemas``: default one per schema the
        profile has devices for)."""
        run_id = settings.run_id or new_run_id()
        progress("hardware")
        hardware = NodeHardware.install(profile=profile, node_name=settings.address, run_id=run_id, fabric=run_id)
        nic_netns = hardware.nics.hardware.node_netns if hardware.nics is not None else None
        node = RealNode(settings=dataclasses.replace(settings, run_id=run_id, nic_netns=nic_netns))
        rig = cls(node=node, hardware=hardware)
        try:
            node.start(client=client, progress=progress)  # on failure it has stopped itself
        except BaseException:
            rig._remove_hardware()
            raise
        try:
            rig.plugins = start_plugins(
                hardware=hardware,
                schemas=hardware.schemas if schemas is None else schemas,
                context=DriverContext(
                    node=node.name,
                    kubelet_root=node.layout.kubelet_root,
                    cdi_dir=node.layout.cdi_dir,
                    kubeconfig=kubeconfig,
                ),
                run=node.run,
                extra=extra,
            )
        except BaseException:
            rig.stop()
            raise
        return rig

    def stop(self) -> None:
        """Plugins, then the node (its pods hand their NICs back on the way), then the NICs and their fabric."""
        try:
            for process in self.plugins.values():
                with contextlib.suppress(Exception):
                    process.stop()
            self.node.stop()
        finally:
            self._remove_hardware()

    def _remove_hardware(self) -> None:
        self.hardware.remove()
        if self.hardware.nics is not None and self.node.settings.run_id:
            remove_fabric(self.node.settings.run_id)
