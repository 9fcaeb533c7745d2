"""The devices one plugin publishes and what happened to them: health on the stream, taints in the slices.

Every change of a device's health goes through :meth:`DeviceBoard.set_health` (the control socket, NIC discovery,
the link watcher), every change of the NICs' addresses through :meth:`DeviceBoard.set_addresses`; a change sets
:attr:`DeviceBoard.republish` so the publisher writes the slices again, and counts in :attr:`DeviceBoard.changes`,
so a caller can wait until the API shows it (:meth:`DeviceBoard.shows`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from fakedev.errors import FakedevError
from fakedev.model.inventory import NodeInventory
from fakedev.plugin.health import HealthBoard
from fakedev.plugin.protocol import DeviceStatusJson
from fakedev.render import DeviceRef, PublishedDevice, RenderedNode, Schema, render_node
from fakedev.render.pool import restamp_slices
from fakedev.render.types import DeviceTaint
from kubeclient import JsonObj
from kubeletapi.types import Health, HealthState


@dataclass(kw_only=True)
class DeviceBoard:
    driver: str
    """The driver name the plugin serves (may differ from the schema's own, e.g. a renamed example driver)."""
    schema: Schema
    node_name: str
    inventory: NodeInventory
    rendered: RenderedNode
    """The slices and device lookup at start-up, without taints."""
    health: HealthBoard
    taints: dict[DeviceRef, list[DeviceTaint]] = field(default_factory=dict)
    addresses: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The NICs' addresses in the node's namespace (interface name → CIDRs), as last read over netlink."""
    republish: asyncio.Event = field(default_factory=asyncio.Event)
    changes: int = 0
    """How many health/taint changes were made; :attr:`published_changes` is how many of them the slices show."""
    published_changes: int = 0
    publishing: bool = False
    """Whether a publisher writes the slices; without one, nothing waits for the API to show a change."""
    on_published: list[Callable[[], None]] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        *,
        inventory: NodeInventory,
        schema: Schema,
        driver: str,
        node_name: str,
        health_timeout_seconds: int,
        rendered: RenderedNode | None = None,
    ) -> DeviceBoard:
        """Render the node's devices in one schema; every device starts Healthy on the health stream.

        ``rendered``: ``render_node(inventory, schemas=[schema])`` made already (a fleet renders each node once)."""
        board = cls(
            driver=driver,
            schema=schema,
            node_name=node_name,
            inventory=inventory,
            rendered=rendered if rendered is not None else render_node(inventory, schemas=[schema]),
            health=HealthBoard(timeout_seconds=health_timeout_seconds),
        )
        board.health.set_devices((r.pool, r.device) for r in board.refs())
        return board

    def lookup(self, pool: str, device: str) -> PublishedDevice | None:
        return self.rendered.devices.get(DeviceRef(driver=self.schema.driver, pool=pool, device=device))

    def refs(self) -> list[DeviceRef]:
        return [DeviceRef(driver=self.driver, pool=r.pool, device=r.device) for r in sorted(self.rendered.devices)]

    def render_slices(self, generation: int, owner: JsonObj | None) -> list[JsonObj]:
        """The full desired slices at this pool generation, taints included (the publisher's render callback)."""
        taints = {DeviceRef(driver=self.schema.driver, pool=r.pool, device=r.device): t for r, t in self.taints.items()}
        if taints or self.addresses:
            rendered = render_node(
                self.inventory,
                schemas=[self.schema],
                generation=generation,
                owner=owner,  # type: ignore[arg-type]
                taints=taints,
                addresses=self.addresses,
            ).slices
        else:
            # Nothing changed since start-up: reuse those slices (planning a dgx-h100 again costs ~5 ms per node).
            rendered = tuple(restamp_slices(self.rendered.slices, generation=generation, owner=owner))  # type: ignore[arg-type]
        slices: list[JsonObj] = []
        for s in rendered:
            body: JsonObj = dict(s)
            if self.driver != self.schema.driver:
                body = {**body, "spec": {**body["spec"], "driver": self.driver}}
            slices.append(body)
        return slices

    def set_health(self, *, device: str, health: Health, message: str = "", taint: DeviceTaint | None = None) -> None:
        """Change a device's health (and optionally its slice taint); the kubelet and the API hear of it."""
        ref = next((r for r in self.refs() if r.device == device), None)
        if ref is None:
            raise FakedevError(f"device {device!r} is not published by {self.driver} on {self.node_name}")
        self.health.set_health(pool=ref.pool, device=device, health=health, message=message)
        if taint is not None:
            self.taints[ref] = [taint]
        elif health == Health.HEALTHY:
            self.taints.pop(ref, None)
        self.changes += 1
        self.republish.set()

    def set_addresses(self, addresses: Mapping[str, tuple[str, ...]]) -> None:
        """The NICs' addresses changed (discovery, the address watcher): republish what the render makes of them."""
        current = {ifname: a for ifname, a in addresses.items() if a}
        if current == self.addresses:
            return
        self.addresses = current
        self.changes += 1
        self.republish.set()

    def shows(self, change: int) -> bool:
        """Whether the published slices include change number ``change`` (always, when nothing publishes)."""
        return not self.publishing or self.published_changes >= change

    def mark_published(self, change: int) -> None:
        """The publisher wrote slices rendered after change number ``change``."""
        if change > self.published_changes:
            self.published_changes = change
            for hook in self.on_published:
                hook()

    def status(self) -> list[DeviceStatusJson]:
        devices: list[DeviceStatusJson] = []
        for ref in self.refs():
            h = self.health.get(pool=ref.pool, device=ref.device)
            devices.append(
                {
                    "pool": ref.pool,
                    "device": ref.device,
                    "health": HealthState.of(h.health).value if h else HealthState.UNKNOWN.value,
                    "message": h.message if h else "",
                    "taints": list(self.taints.get(ref, [])),
                }
            )
        return devices
