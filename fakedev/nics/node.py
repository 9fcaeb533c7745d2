"""The NIC hardware of an emulated node: its namespaces, ports and the plugin flags that point at them."""

from __future__ import annotations

from dataclasses import dataclass

from fakedev.model.inventory import NodeInventory
from fakedev.nics import hardware
from fakedev.nics.ports import NicPort, compute_ports


@dataclass(frozen=True, kw_only=True)
class NodeNics:
    hardware: hardware.NicHardware
    ports: tuple[NicPort, ...]

    def plugin_args(self) -> tuple[str, ...]:
        return ("--netns", self.hardware.node_netns, "--fabric-netns", self.hardware.fabric_netns)

    def port(self, ifname: str) -> NicPort:
        for p in self.ports:
            if p.ifname == ifname:
                return p
        raise KeyError(ifname)


def nic_namespaces(*, node_run_id: str, fabric_run_id: str) -> hardware.NicHardware:
    """``fakedev-<node id>-host`` for the node, ``fakedev-<fabric id>-fabric`` for the switch (reaped with the runs)."""
    return hardware.NicHardware(
        node_netns=f"fakedev-{node_run_id}-host", fabric_netns=f"fakedev-{fabric_run_id}-fabric"
    )


def install_node_nics(inventory: NodeInventory, *, node_run_id: str, fabric_run_id: str) -> NodeNics | None:
    """Create the node's NICs (None when the profile has none)."""
    ports = compute_ports(inventory)
    if not ports:
        return None
    hw = nic_namespaces(node_run_id=node_run_id, fabric_run_id=fabric_run_id)
    hardware.install(hw, ports)
    return NodeNics(hardware=hw, ports=tuple(ports))
