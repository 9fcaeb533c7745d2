"""Where an emulated node keeps its files, and the names of its sandboxes and containers (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.node.layout import CONTAINER_ID_MAX, NodeLayout, node_run_id

BASE = Path("/base")


def test_a_node_directory_is_named_after_a_hash_of_the_node_name() -> None:
    layout = NodeLayout.for_node("gpu-node-7", base=BASE)
    assert layout.run_id == node_run_id("gpu-node-7") and len(layout.run_id) == 8
    assert layout.root == BASE / f"fakedev-node-{layout.run_id}"
    assert NodeLayout.for_node("gpu-node-7", base=BASE) == layout  # stable: a restarted emulator finds its files
    assert NodeLayout.for_node("gpu-node-8", base=BASE).root != layout.root


@pytest.mark.parametrize(
    ("attribute", "relative"),
    [
        ("kubelet_root", "."),
        ("registry", "plugins_registry"),
        ("plugins", "plugins"),
        ("cdi", "cdi"),
        ("state", "emulator"),
        ("dra_checkpoint", "emulator/dra_manager_state"),
        ("boot_id", "emulator/boot_id"),
        ("pods", "emulator/pods"),
        ("runc", "runc"),
        ("cache", "cache"),
    ],
    ids=lambda v: str(v),
)
def test_every_node_path_lives_below_the_node_root(attribute: str, relative: str) -> None:
    layout = NodeLayout.for_node("n", base=BASE)
    assert getattr(layout, attribute) == (layout.root / relative if relative != "." else layout.root)


def test_a_pod_gets_its_directory_bundles_and_records_by_uid() -> None:
    layout = NodeLayout.for_node("n", base=BASE)
    pod = layout.pod("0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9")
    assert pod.dir == layout.pods / "0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9"
    run = pod.bundle(container="main-app", attempt=3)
    assert run.bundle == pod.dir / "containers" / "main-app" / "3" and run.log == run.bundle / "log"
    assert pod.net_devices_record == pod.dir / "netdevices.json"
    assert pod.cdi_ids_file("main-app") == pod.dir / "cdi-ids" / "main-app"


def test_sandbox_namespaces_are_marked_as_such_and_carry_the_node_run_id() -> None:
    layout = NodeLayout.for_node("n", base=BASE)
    name = layout.pod("0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9").sandbox_netns
    assert name == f"fakedev-{layout.run_id}-pod-0f1e2d3c-4b5a"
    # The node's NIC namespaces (fakedev-<id>-host, -fabric) share the run id but never the mark.
    assert not f"fakedev-{layout.run_id}-host".startswith(f"fakedev-{layout.run_id}-pod-")


def test_container_ids_are_stable_distinct_per_attempt_and_bounded() -> None:
    pod = NodeLayout.for_node("n", base=BASE).pod("0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9")
    first, again = pod.container_id(container="c", attempt=0), pod.container_id(container="c", attempt=0)
    assert first == again != pod.container_id(container="c", attempt=1)
    long = pod.container_id(container="x" * 300, attempt=1)
    assert len(long) == CONTAINER_ID_MAX
