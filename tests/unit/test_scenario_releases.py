"""Shipped drills name real driver releases the fake driver knows, and a drill that selects on an attribute only
one release publishes pins that release."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakedev.render import Schema, parse_schema
from harness.drills.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "fakedev" / "scenarios"
SHIPPED = sorted(str(p.relative_to(SCENARIOS)) for p in SCENARIOS.rglob("*.yaml") if "profiles" not in p.parts)
NUMA_NODE = "resource.kubernetes.io/numaNode"
NUMA_SELECTOR = 'device.attributes["resource.kubernetes.io"].numaNode'


@pytest.mark.parametrize("name", SHIPPED, ids=SHIPPED)
def test_every_node_driver_is_a_known_schema_or_release(name: str) -> None:
    for node in load_scenario(SCENARIOS / name).nodes:
        for driver in node.drivers:
            parse_schema(driver)


def _uses_numa_node(path: Path) -> bool:
    text = path.read_text()
    return f"matchAttribute: {NUMA_NODE}" in text or NUMA_SELECTOR in text


NUMA_DRILLS = [n for n in SHIPPED if _uses_numa_node(SCENARIOS / n)]


def test_the_numa_alignment_drills_are_found() -> None:
    assert "matrix/numa-gpu-nic-alignment.yaml" in NUMA_DRILLS


@pytest.mark.parametrize("name", NUMA_DRILLS, ids=NUMA_DRILLS)
def test_drills_selecting_on_numa_node_pin_nvidia_main(name: str) -> None:
    """No NVIDIA driver release publishes resource.kubernetes.io/numaNode; only main does."""
    for node in load_scenario(SCENARIOS / name).nodes:
        pins = [parse_schema(d) for d in node.drivers]
        nvidia = [pin.render() for schema, pin in pins if schema is Schema.NVIDIA]
        assert nvidia == ["nvidia@main"], (name, node.name, node.drivers)
