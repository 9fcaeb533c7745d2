"""An emulated node's files on disk: container runs found again by attempt, and what a power cut takes."""

from __future__ import annotations

from pathlib import Path

from harness.node.layout import NodeLayout

UID = "0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9"


def test_runs_are_listed_by_attempt_number_not_by_name(tmp_path: Path) -> None:
    pod = NodeLayout.for_node("n", base=tmp_path).pod(UID)
    for attempt in (0, 2, 10, 9):
        run = pod.bundle(container="app-1", attempt=attempt)
        run.bundle.mkdir(parents=True)
        run.log.write_text(f"attempt {attempt}\n")
    pod.bundle(container="app", attempt=5).bundle.mkdir(parents=True)  # a container whose name prefixes another's
    (pod.dir / "containers" / "app-1" / "notes").mkdir()  # not a run

    assert [r.attempt for r in pod.runs("app-1")] == [0, 2, 9, 10]
    latest = pod.latest_run("app-1")
    assert latest is not None and latest.attempt == 10
    assert pod.latest_log("app-1") == "attempt 10\n"
    assert [r.attempt for r in pod.runs("app")] == [5]


def test_a_container_that_never_ran_or_is_being_created_has_no_log(tmp_path: Path) -> None:
    pod = NodeLayout.for_node("n", base=tmp_path).pod(UID)
    assert pod.runs("c") == [] and pod.latest_run("c") is None and pod.latest_log("c") is None
    pod.bundle(container="c", attempt=0).bundle.mkdir(parents=True)  # the bundle exists, runc has not logged yet
    assert pod.latest_log("c") is None


def test_power_off_takes_the_volatile_and_keeps_the_disks(tmp_path: Path) -> None:
    layout = NodeLayout.for_node("n", base=tmp_path)
    layout.make_dirs()
    (layout.cdi / "k8s.gpu.example.com-device_abc.json").write_text("{}")
    layout.runc.mkdir()
    layout.boot_id.write_text("1234\n")
    layout.dra_checkpoint.write_text('{"Data": "{}", "Checksum": 0}')
    bundle = layout.pod(UID).bundle(container="c", attempt=0).bundle
    bundle.mkdir(parents=True)
    layout.pod(UID).net_devices_record.write_text('{"net1": "enp8s0f0np0"}')
    plugin_checkpoint = layout.plugins / "gpu.example.com" / "checkpoint.json"
    plugin_checkpoint.parent.mkdir()
    plugin_checkpoint.write_text("{}")

    layout.power_off()

    assert list(layout.cdi.iterdir()) == [] and not layout.runc.exists() and not layout.boot_id.exists()
    assert not layout.pod(UID).net_devices_record.exists()  # it described a sandbox that is gone
    assert layout.dra_checkpoint.exists() and bundle.is_dir() and plugin_checkpoint.exists()
