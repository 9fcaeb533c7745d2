"""What the claim state leaves on disk across crashes and restarts, in temp dirs and without an API server: claims
are put on disk by the prepare plan itself (as a plugin that died after writing them would leave them)."""

from __future__ import annotations

import dataclasses
import fcntl
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fakedev.cli.torture.invariants import CheckScope, compute_violations
from fakedev.cli.torture.ledger import Belief, ClaimBelief
from fakedev.cli.torture.observe import NodeFiles, read_snapshot
from fakedev.driver.apply import apply_prepare_plan, apply_unprepare_plan
from fakedev.driver.cdi_layout import cdi_layout_for
from fakedev.driver.checkpoint import Checkpoint, ClaimRecord
from fakedev.driver.claims import compute_claim_plan
from fakedev.driver.core import ConcurrentDriver
from fakedev.driver.crash import CrashPoint, CrashSwitch
from fakedev.driver.plan import PreparePlan, compute_device_configs, compute_prepare_plan, compute_unprepare_plan
from fakedev.driver.state import ClaimState, StatePaths
from fakedev.driver.trash import BATCH, TRASH_DIR_NAME, Trash
from fakedev.model.inventory import resolve_inventory
from fakedev.model.releases import NVIDIA_DEFAULT
from fakedev.profiles import load_profile
from fakedev.render import RenderedNode, Schema, render_node
from harness.procs import wait_for
from kubeletapi.types import ClaimRef
from tests.helpers import ReadLater

NODE = "files"
DRIVER = "gpu.example.com"
LAYOUT = cdi_layout_for(schema=Schema.EXAMPLE, nvidia=NVIDIA_DEFAULT, driver=DRIVER)
OLD = ClaimRef(uid="11111111-0000-0000-0000-000000000001", namespace="ns", name="c")
NEW = ClaimRef(uid="22222222-0000-0000-0000-000000000002", namespace="ns", name="c")


@pytest.fixture(scope="module")
def rendered() -> RenderedNode:
    return render_node(resolve_inventory(load_profile("seed-example"), node_name=NODE))


@pytest.fixture
def paths(tmp_path: Path) -> StatePaths:
    return StatePaths(
        cdi_dir=tmp_path / "cdi",
        plugin_data_dir=tmp_path / "plugin",
        dev_root=tmp_path / "plugin" / "dev",
        checkpoint=tmp_path / "plugin" / "checkpoint.json",
    )


def _state(rendered: RenderedNode, paths: StatePaths) -> ClaimState:
    return ClaimState(
        driver=DRIVER,
        node_name=NODE,
        paths=paths,
        layout=LAYOUT,
        base_spec=None,  # the release has none
        api=None,
        lookup=lambda pool, name: rendered.device(driver=DRIVER, pool=pool, name=name),
    )


def _plan(rendered: RenderedNode, paths: StatePaths, ref: ClaimRef, *, device: str) -> PreparePlan:
    result = {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device}
    claim: Any = {
        "metadata": {"uid": ref.uid, "name": ref.name, "namespace": ref.namespace},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }
    claim_plan = compute_claim_plan(claim, uid=ref.uid, driver=DRIVER, node_name=NODE)
    published = [rendered.device(driver=DRIVER, pool=NODE, name=d.device) for d in claim_plan.devices]
    return compute_prepare_plan(
        claim=claim_plan,
        published=published,
        configs=compute_device_configs(claim_plan, published),
        nics={},
        driver=DRIVER,
        layout=LAYOUT,
        base_spec=None,
        node_name=NODE,
        dirs=paths.dirs,
        generation=1,
        now="2026-01-01T00:00:00Z",
    )


def _prepared(
    rendered: RenderedNode, paths: StatePaths, ref: ClaimRef, *, device: str, recorded: bool = True
) -> PreparePlan:
    """The claim's files on disk and, if ``recorded``, its record in the checkpoint."""
    plan = _plan(rendered, paths, ref, device=device)
    apply_prepare_plan(plan, nic_netns=None, sysfs_root=None)
    if recorded:
        checkpoint = Checkpoint(path=paths.checkpoint)
        checkpoint.save({**checkpoint.load(), ref.uid: plan.record})
    return plan


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_a_uid_recorded_under_one_name_is_refused_under_another(rendered: RenderedNode, paths: StatePaths) -> None:
    _prepared(rendered, paths, OLD, device="gpu-0")
    state = _state(rendered, paths)
    state.load()
    result = state.prepare(ClaimRef(uid=OLD.uid, namespace="other", name="d"))
    assert result.error == f"claim {OLD.uid} is prepared on this node as ns/c; refusing to prepare it as other/d"
    assert result.devices == ()


def test_unprepare_of_an_unrecorded_uid_leaves_a_claim_of_the_same_name_alone(
    rendered: RenderedNode, paths: StatePaths
) -> None:
    new = _prepared(rendered, paths, NEW, device="gpu-1")
    state = _state(rendered, paths)
    state.load()
    before = _files(paths.metadata_root)
    assert state.unprepare(OLD) == ""
    assert _files(paths.metadata_root) == before
    assert all(f.path.exists() for f in new.metadata_files)


def test_unprepare_without_a_record_removes_the_files_a_crash_left(rendered: RenderedNode, paths: StatePaths) -> None:
    _prepared(rendered, paths, OLD, device="gpu-0", recorded=False)
    state = _state(rendered, paths)
    state.load()
    assert state.unprepare(OLD) == ""
    assert (_files(paths.cdi_dir), _files(paths.metadata_root)) == ([], [])


def _as_older_plugin(plan: PreparePlan, paths: StatePaths, *, recorded: bool) -> None:
    """Move a claim's metadata to the ``<namespace>_<name>`` directory plugins before the UID naming used."""
    legacy = paths.metadata_root / f"{plan.record['namespace']}_{plan.record['name']}"
    (paths.metadata_root / plan.record["metadataDir"]).rename(legacy)
    if recorded:
        record: ClaimRecord = {**plan.record, "metadataDir": legacy.name}
        Checkpoint(path=paths.checkpoint).save({plan.uid: record})


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "crashed-before-the-record"])
def test_a_claim_an_older_plugin_prepared_is_unprepared_cleanly(
    rendered: RenderedNode, paths: StatePaths, recorded: bool
) -> None:
    plan = _prepared(rendered, paths, OLD, device="gpu-0", recorded=False)
    _as_older_plugin(plan, paths, recorded=recorded)
    state = _state(rendered, paths)
    state.load()
    assert state.unprepare(OLD) == ""
    assert (_files(paths.cdi_dir), _files(paths.metadata_root)) == ([], [])
    assert state.claims == {}


def test_an_older_plugins_directory_now_holding_a_successor_is_kept(rendered: RenderedNode, paths: StatePaths) -> None:
    successor = _prepared(rendered, paths, NEW, device="gpu-1", recorded=False)
    _as_older_plugin(successor, paths, recorded=True)
    state = _state(rendered, paths)
    state.load()
    assert state.unprepare(OLD) == ""  # the predecessor, late, with no record
    assert _files(paths.metadata_root) == ["ns_c/gpu/metadata.json"]


def _plant_temp_files(paths: StatePaths, *, claim_dir: str) -> dict[str, list[Path]]:
    """Temp files as crashed writes leave them (``.<target>.<mkstemp random>.tmp``), and look-alikes that are not
    ours to remove."""
    request_dir = paths.metadata_root / claim_dir / "gpu"
    ours = [
        paths.cdi_dir / f".k8s.{DRIVER}-device_{OLD.uid}.json.a1b2c3d4.tmp",
        paths.cdi_dir / f".{DRIVER}_metadata_{OLD.uid}_gpu.json.Zz_09xyz.tmp",
        request_dir / ".metadata.json.k3j4l5m6.tmp",
        paths.checkpoint.parent / ".checkpoint.json.q9w8e7r6.tmp",
    ]
    theirs = [
        paths.cdi_dir / f".k8s.gpu.nvidia.com-device_{OLD.uid}.json.a1b2c3d4.tmp",  # another driver's write
        paths.cdi_dir / "vendor.json",
        paths.checkpoint.parent / ".checkpoint.json.bak",
        paths.checkpoint.parent / ".other.json.q9w8e7r6.tmp",
    ]
    for path in (*ours, *theirs):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"{")
    return {"ours": ours, "theirs": theirs}


def test_loading_collects_our_temp_files_and_nothing_else(rendered: RenderedNode, paths: StatePaths) -> None:
    plan = _prepared(rendered, paths, OLD, device="gpu-0")
    planted = _plant_temp_files(paths, claim_dir=plan.record["metadataDir"])
    state = _state(rendered, paths)
    assert sorted(state.load()) == sorted(planted["ours"])
    assert [p for p in planted["ours"] if p.exists()] == []
    assert all(p.exists() for p in planted["theirs"])
    assert state.prepare(OLD).devices == plan.prepared


def test_temp_files_are_collected_only_under_the_instances_lock(rendered: RenderedNode, paths: StatePaths) -> None:
    plan = _prepared(rendered, paths, OLD, device="gpu-0")
    planted = _plant_temp_files(paths, claim_dir=plan.record["metadataDir"])["ours"]
    lock_path = paths.plugin_data_dir / "serialize.lock"
    driver = ConcurrentDriver(state=_state(rendered, paths), lock_path=lock_path)
    collected: list[Path] = []
    with lock_path.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the other instance of a rolling update, mid-write
        loader = threading.Thread(target=lambda: collected.extend(driver.load()))
        loader.start()
        loader.join(timeout=0.5)
        assert loader.is_alive()
        assert all(p.exists() for p in planted)
    loader.join(timeout=10)
    assert sorted(collected) == sorted(planted)


def test_the_checkpoint_names_the_claims_metadata_directory_with_its_uid(
    rendered: RenderedNode, paths: StatePaths
) -> None:
    _prepared(rendered, paths, OLD, device="gpu-0")
    (record,) = Checkpoint(path=paths.checkpoint).load().values()
    assert record["metadataDir"] == f"ns_c_{OLD.uid}"


def test_the_torture_checker_reads_a_real_node_and_catches_a_missing_metadata_file_and_a_temp_file(
    rendered: RenderedNode, paths: StatePaths
) -> None:
    plan = _prepared(rendered, paths, OLD, device="gpu-0")
    files = NodeFiles(
        driver=DRIVER, cdi_dir=paths.cdi_dir, metadata_root=paths.metadata_root, checkpoint=paths.checkpoint
    )
    held = ClaimBelief(
        uid=OLD.uid, namespace="ns", name="c", devices=("gpu-0",), belief=Belief.HELD, answer=plan.prepared
    )
    scope = CheckScope(driver=DRIVER)

    def found() -> list[str]:
        snapshot = read_snapshot(files, kube=None, namespace="ns", nic_netns=None)
        return [v.render() for v in compute_violations(snapshot, [held], scope=scope)]

    assert found() == []
    (metadata_file,) = (f.path for f in plan.metadata_files)
    metadata_file.unlink()
    temp = paths.cdi_dir / f".k8s.{DRIVER}-device_{OLD.uid}.json.a1b2c3d4.tmp"
    temp.write_bytes(b"{")
    assert found() == [
        f"temp files: left behind: {temp}",
        f"files: ns/c ({OLD.uid}) is held but {DRIVER}_metadata_{OLD.uid}_gpu.json mounts {metadata_file}, "
        "which is missing",
    ]


def test_a_claim_prepared_after_unprepares_gets_an_emptied_directory_and_the_node_stays_as_the_checker_wants(
    rendered: RenderedNode, paths: StatePaths
) -> None:
    trash = Trash(root=paths.plugin_data_dir / TRASH_DIR_NAME)
    refs = [ClaimRef(uid=f"33333333-0000-0000-0000-{i:012d}", namespace="ns", name=f"c{i}") for i in range(BATCH)]
    inodes = set()
    for ref in refs:
        plan = _plan(rendered, paths, ref, device="gpu-0")
        apply_prepare_plan(plan, nic_netns=None, sysfs_root=None, reuse_dir=trash.reuse)
        inodes.add((paths.metadata_root / plan.record["metadataDir"]).stat().st_ino)
        undo = compute_unprepare_plan(
            driver=DRIVER,
            node_name=NODE,
            uid=ref.uid,
            namespace=ref.namespace,
            name=ref.name,
            record=plan.record,
            dirs=paths.dirs,
            node_nics={},
        )
        apply_unprepare_plan(undo, nic_netns=None, sysfs_root=None, trash=trash)
    wait_for(lambda: trash.spares() == BATCH, timeout=10, what="the unprepared claims' directories as spares")

    plan = _plan(rendered, paths, NEW, device="gpu-1")
    apply_prepare_plan(plan, nic_netns=None, sysfs_root=None, reuse_dir=trash.reuse)
    assert trash.spares() == BATCH - 1
    claim_dir = paths.metadata_root / plan.record["metadataDir"]
    assert claim_dir.stat().st_ino in inodes  # renamed into place, not made
    (metadata_file,) = (f.path for f in plan.metadata_files)
    assert _files(paths.metadata_root) == [str(metadata_file.relative_to(paths.metadata_root))]
    assert metadata_file.read_bytes() == plan.metadata_files[0].data
    files = NodeFiles(
        driver=DRIVER, cdi_dir=paths.cdi_dir, metadata_root=paths.metadata_root, checkpoint=paths.checkpoint
    )
    Checkpoint(path=paths.checkpoint).save({NEW.uid: plan.record})
    beliefs = [
        ClaimBelief(
            uid=NEW.uid, namespace="ns", name="c", devices=("gpu-1",), belief=Belief.HELD, answer=plan.prepared
        ),
        *(
            ClaimBelief(uid=r.uid, namespace="ns", name=r.name, devices=(), belief=Belief.RELEASED, answer=())
            for r in refs
        ),
    ]
    snapshot = read_snapshot(files, kube=None, namespace="ns", nic_netns=None)
    assert [v.render() for v in compute_violations(snapshot, beliefs, scope=CheckScope(driver=DRIVER))] == []
    trash.close()
    assert list((paths.plugin_data_dir / TRASH_DIR_NAME).iterdir()) == []


class _OneClaimApi:
    """The API server's side of one claim allocated ``gpu-0``: counts reads (the status write is never called: no
    NVIDIA release writes one, and this example driver's state is built with ``writes_device_status=False``)."""

    def __init__(self, ref: ClaimRef) -> None:
        self.ref, self.reads = ref, 0
        self.statuses: list[list[Any]] = []
        """``status.devices`` writes, for a state built to write them."""

    def apply_claim_status(self, *, namespace: str, name: str, uid: str, devices: list[Any]) -> None:
        self.statuses.append(devices)

    def read_ahead_claim(self, *, namespace: str, name: str) -> None:
        return None  # every read happens in the prepare's thread

    def get_claim_later(self, *, namespace: str, name: str) -> ReadLater:
        return ReadLater(read=lambda: self.get_claim(namespace=namespace, name=name))

    def get_claim(self, *, namespace: str, name: str) -> Any:
        self.reads += 1
        result = {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0"}
        return {
            "metadata": {"uid": self.ref.uid, "name": name, "namespace": namespace},
            "status": {"allocation": {"devices": {"results": [result]}}, "reservedFor": [{"name": "p"}]},
        }


def _state_in_boot(
    rendered: RenderedNode, paths: StatePaths, api: _OneClaimApi, *, boot_id: str, writes_status: bool = False
) -> ClaimState:
    state = ClaimState(
        driver=DRIVER,
        node_name=NODE,
        paths=dataclasses.replace(paths, boot_id=boot_id),
        layout=LAYOUT,
        base_spec=None,
        api=api,  # type: ignore[arg-type]  # the one call a prepare without status writes makes
        lookup=lambda pool, name: rendered.device(driver=DRIVER, pool=pool, name=name),
        writes_device_status=writes_status,
    )
    state.load()
    return state


def test_files_written_unsynced_are_trusted_in_their_boot_only(rendered: RenderedNode, paths: StatePaths) -> None:
    """A prepare writes its files without fsync and records the boot; a power cut (a new boot ID) may have left
    them empty, so the next boot's prepare rewrites them instead of answering from the checkpoint."""
    api = _OneClaimApi(NEW)
    before = _state_in_boot(rendered, paths, api, boot_id="boot-a")
    first = before.prepare(NEW)
    assert not first.error and api.reads == 1
    assert before.claims[NEW.uid]["bootId"] == "boot-a"
    files = [p for p in paths.metadata_root.rglob("*") if p.is_file()] + sorted(paths.cdi_dir.iterdir())
    assert files and all(p.stat().st_size > 0 for p in files)
    before.close()

    same_boot = _state_in_boot(rendered, paths, api, boot_id="boot-a")  # a plugin restart: the page cache stayed
    assert same_boot.prepare(NEW) == first and api.reads == 1
    same_boot.close()

    for p in files:  # what a power cut may leave of files whose data never reached the disk
        p.write_bytes(b"")
    after = _state_in_boot(rendered, paths, api, boot_id="boot-b")
    assert after.held(NEW) is None
    assert after.prepare(NEW) == first and api.reads == 2
    assert all(p.stat().st_size > 0 for p in files)
    assert after.claims[NEW.uid]["bootId"] == "boot-b"
    after.close()


def test_a_record_without_a_boot_id_is_trusted_while_its_files_are_there(
    rendered: RenderedNode, paths: StatePaths
) -> None:
    """Records of plugins that fsynced every file carry no boot ID: they stay trusted across boots."""
    _prepared(rendered, paths, OLD, device="gpu-0")  # an fsynced prepare (no boot ID in the plan's dirs)
    state = _state(rendered, dataclasses.replace(paths, boot_id="boot-b"))
    state.load()
    assert "bootId" not in state.claims[OLD.uid]
    held = state.held(OLD)
    assert held is not None and held.devices


def test_an_unprepare_forgets_its_record_at_once_and_a_crash_before_the_write_is_made_good_at_start_up(
    rendered: RenderedNode, paths: StatePaths
) -> None:
    """For a claim of files only, unprepare queues its ``del`` instead of waiting for the disk. A crash before the
    write leaves a record none of whose files is left: the next start-up drops it. A record with a file left — a
    reboot emptied the CDI directory, not the metadata — is kept, and a late write of the old process's ``del``
    does not undo a record made since."""
    api = _OneClaimApi(NEW)
    crashed = _state_in_boot(rendered, paths, api, boot_id="boot-a")
    crashed.journal.flush_after = 3600  # nothing but a batch or close writes the queued del
    assert not crashed.prepare(NEW).error
    assert crashed.unprepare(NEW) == ""
    assert NEW.uid not in crashed.claims and (_files(paths.cdi_dir), _files(paths.metadata_root)) == ([], [])
    assert NEW.uid in Checkpoint(path=paths.checkpoint).read().claims  # the del is queued, not written

    restarted = _state_in_boot(rendered, paths, api, boot_id="boot-a")  # the crashed process never closed
    assert dict(restarted.claims) == {} == dict(Checkpoint(path=paths.checkpoint).read().claims)
    again = restarted.prepare(NEW)
    assert not again.error and api.reads == 2
    restarted.close()

    for spec in paths.cdi_dir.iterdir():
        spec.unlink()
    rebooted = _state_in_boot(rendered, paths, api, boot_id="boot-a")
    assert NEW.uid in rebooted.claims and rebooted.held(NEW) is None  # kept: its metadata files are left
    assert rebooted.prepare(NEW) == again and api.reads == 3
    rebooted.close()

    crashed.close()  # its queued del, written late, finds the claim recorded anew and is dropped
    assert Checkpoint(path=paths.checkpoint).read().claims[NEW.uid] == rebooted.claims[NEW.uid]


def test_a_driver_that_writes_claim_status_keeps_a_record_whose_files_are_gone_for_the_clear(
    rendered: RenderedNode, paths: StatePaths
) -> None:
    """Its unprepare never queues the ``del``, and a kill between removing the files and the ``del`` leaves a record
    whose files are gone: start-up keeps it, so the kubelet's retried unprepare still clears the status written."""
    api = _OneClaimApi(NEW)
    first = _state_in_boot(rendered, paths, api, boot_id="boot-a", writes_status=True)
    assert not first.prepare(NEW).error
    deadline = time.monotonic() + 10
    while not api.statuses or Checkpoint(path=paths.checkpoint).read().owed:  # the write sent and settled
        assert time.monotonic() < deadline, "the status write was not sent"
        time.sleep(0.01)
    first.close()
    for f in [*paths.cdi_dir.iterdir(), *(p for p in paths.metadata_root.rglob("*") if p.is_file())]:
        f.unlink()  # what a kill after the files and before the del leaves

    restarted = _state_in_boot(rendered, paths, api, boot_id="boot-a", writes_status=True)
    assert NEW.uid in restarted.claims
    assert restarted.unprepare(NEW) == ""
    deadline = time.monotonic() + 10
    while api.statuses[-1] != []:
        assert time.monotonic() < deadline, "the status was not cleared"
        time.sleep(0.01)
    restarted.close()
    assert Checkpoint(path=paths.checkpoint).read().claims == {}


class _RecordingSwitch(CrashSwitch):
    """At each crash point passed, what the checkpoint file holds of one claim (a kill there would leave that)."""

    def __init__(self, *, checkpoint: Path, uid: str) -> None:
        super().__init__()
        self.checkpoint, self.uid = checkpoint, uid
        self.on_disk: list[tuple[CrashPoint, bool]] = []

    def reached(self, point: CrashPoint) -> None:
        self.on_disk.append((point, self.uid in Checkpoint(path=self.checkpoint).read().claims))


def test_a_prepare_after_an_unprepare_whose_del_is_queued_writes_the_del_before_its_files(
    rendered: RenderedNode, paths: StatePaths
) -> None:
    """Else a kill between the new prepare's files and its record would leave the old record beside the new files,
    and a restart would answer from that record without reading the claim (found in review)."""
    api = _OneClaimApi(NEW)
    switch = _RecordingSwitch(checkpoint=paths.checkpoint, uid=NEW.uid)
    state = ClaimState(
        driver=DRIVER,
        node_name=NODE,
        paths=dataclasses.replace(paths, boot_id="boot-a"),
        layout=LAYOUT,
        base_spec=None,
        api=api,  # type: ignore[arg-type]  # reads only: this driver writes no claim status
        lookup=lambda pool, name: rendered.device(driver=DRIVER, pool=pool, name=name),
        writes_device_status=False,
        crash=switch,
    )
    state.journal.flush_after = 3600  # nothing but a batch or close writes the queued del
    state.load()
    assert not state.prepare(NEW).error
    assert state.unprepare(NEW) == ""
    switch.on_disk.clear()
    assert not state.prepare(NEW).error and api.reads == 2
    first_file = next(i for i, (p, _) in enumerate(switch.on_disk) if p is not CrashPoint.PREPARE_BEFORE_CHECKPOINT)
    point, recorded = switch.on_disk[first_file]
    assert not recorded, f"the old record was still on disk at {point.value}"
    assert (CrashPoint.PREPARE_AFTER_CHECKPOINT, True) in switch.on_disk
    state.close()
