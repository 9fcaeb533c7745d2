"""A DRA driver whose CDI specs name a device node that does not exist on the host: fakedev's plugin, with one
``/dev/fakedev-missing0`` device node (no type, so a runtime must stat it) added to every device it prepares.

Usage: ``python -m tests.drivers.missing_device_node -- <arguments of fakedev plugin>``. Prepare succeeds and the spec
is valid CDI; only creating the container fails — the moment a conformance verdict and a drill must explain.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any, Final

import cdi
import fakedev.driver.plan as plan_mod
import fakedev.driver.state as state_mod

MISSING_NODE: Final = "/dev/fakedev-missing0"


def add_missing_node() -> None:
    original = plan_mod.compute_prepare_plan

    def plan(**kw: Any) -> plan_mod.PreparePlan:
        base = original(**kw)
        assert base.claim_spec is not None  # the example schema always writes a claim spec
        node = cdi.DeviceNode(path=MISSING_NODE)
        spec = base.claim_spec.spec
        devices = tuple(
            replace(d, container_edits=replace(d.container_edits, device_nodes=(*d.container_edits.device_nodes, node)))
            for d in spec.devices
        )
        return replace(base, claim_spec=replace(base.claim_spec, spec=replace(spec, devices=devices)))

    setattr(state_mod, "compute_prepare_plan", plan)  # noqa: B010 - state.py calls it through its module global


def main() -> int:
    add_missing_node()
    from fakedev.cli import main as fakedev_main

    return fakedev_main(["plugin", *[a for a in sys.argv[1:] if a != "--"]])


if __name__ == "__main__":
    sys.exit(main())
