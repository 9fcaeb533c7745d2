"""A plugin upgraded in place keeps the claims its predecessor recorded in a ``checkpoint-v1`` file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fakedev.driver.apply import apply_prepare_plan
from fakedev.driver.cdi_layout import cdi_layout_for
from fakedev.driver.checkpoint import Checkpoint, JournalState, compute_checksum
from fakedev.driver.claims import compute_claim_plan
from fakedev.driver.plan import PreparePlan, compute_device_configs, compute_prepare_plan
from fakedev.driver.state import ClaimState, StatePaths
from fakedev.errors import CheckpointError
from fakedev.model.inventory import NodeInventory, VgpuDevice, resolve_inventory
from fakedev.model.releases import NVIDIA_DEFAULT
from fakedev.profiles import load_profile
from fakedev.render import RenderedNode, Schema, render_node
from fakedev.sysfs import write_sysfs
from kubeletapi.types import ClaimRef

NODE = "kv-up"
DRIVER = "gpu.nvidia.com"
LAYOUT = cdi_layout_for(schema=Schema.NVIDIA, nvidia=NVIDIA_DEFAULT, driver=DRIVER)
REF = ClaimRef(uid="11111111-2222-3333-4444-555555555555", namespace="ns", name="vm-gpu")


@pytest.fixture
def inventory() -> NodeInventory:
    return resolve_inventory(load_profile("kubevirt-host"), node_name=NODE)


@pytest.fixture
def rendered(inventory: NodeInventory) -> RenderedNode:
    return render_node(inventory)


@pytest.fixture
def paths(tmp_path: Path, inventory: NodeInventory) -> StatePaths:
    return StatePaths(
        cdi_dir=tmp_path / "cdi",
        plugin_data_dir=tmp_path / "plugin",
        dev_root=tmp_path / "plugin" / "dev",
        checkpoint=tmp_path / "plugin" / "checkpoint.json",
        sysfs_root=write_sysfs(inventory, root=tmp_path / "sys"),
    )


def _vgpu(rendered: RenderedNode) -> str:
    return next(r.device for r, p in rendered.devices.items() if isinstance(p.model, VgpuDevice))


def _prepared_by_v1_plugin(rendered: RenderedNode, paths: StatePaths) -> PreparePlan:
    """The node as a v1 plugin left it: a vGPU claim's files and mdev, and its record in a v1 checkpoint."""
    claim: Any = {
        "metadata": {"uid": REF.uid, "name": REF.name, "namespace": REF.namespace},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "vgpu", "driver": DRIVER, "pool": NODE, "device": _vgpu(rendered)}]}
            }
        },
    }
    claim_plan = compute_claim_plan(claim, uid=REF.uid, driver=DRIVER, node_name=NODE)
    published = [rendered.device(driver=DRIVER, pool=NODE, name=d.device) for d in claim_plan.devices]
    plan = compute_prepare_plan(
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
    apply_prepare_plan(plan, nic_netns=None, sysfs_root=paths.sysfs_root)
    v1_record = {k: v for k, v in plan.record.items() if k != "nics"} | {
        "state": "PrepareCompleted",
        "statusApplied": True,
    }
    claims = {REF.uid: v1_record}
    doc = {"checksum": compute_checksum(claims), "claims": claims, "version": "fakedev.dra/checkpoint-v1"}
    paths.checkpoint.write_text(json.dumps(doc))
    return plan


def _state(rendered: RenderedNode, paths: StatePaths) -> ClaimState:
    # No API server: a recorded claim is answered from the checkpoint, and unprepare needs none.
    return ClaimState(
        driver=DRIVER,
        node_name=NODE,
        paths=paths,
        layout=LAYOUT,
        base_spec=None,  # the release has none
        api=None,
        lookup=lambda pool, name: rendered.device(driver=DRIVER, pool=pool, name=name),
    )


def test_v1_claims_load_without_their_dead_fields(rendered: RenderedNode, paths: StatePaths) -> None:
    plan = _prepared_by_v1_plugin(rendered, paths)
    state = _state(rendered, paths)
    state.load()
    assert state.claims == {REF.uid: {**plan.record, "nics": []}}
    assert state.prepare(REF).devices == plan.prepared


def test_a_v1_claim_is_unprepared_and_the_checkpoint_rewritten_as_a_journal(
    rendered: RenderedNode, paths: StatePaths
) -> None:
    plan = _prepared_by_v1_plugin(rendered, paths)
    assert paths.sysfs_root is not None
    (mdev,) = plan.record["mdevs"]
    assert (paths.sysfs_root / "bus" / "mdev" / "devices" / mdev).is_symlink()
    state = _state(rendered, paths)
    state.load()
    assert state.unprepare(REF) == ""
    assert not (paths.sysfs_root / "bus" / "mdev" / "devices" / mdev).exists()
    assert list(paths.cdi_dir.iterdir()) == []
    assert list(paths.metadata_root.iterdir()) == []
    header, *lines = paths.checkpoint.read_text().splitlines()
    assert json.loads(header) == {"version": "fakedev.dra/checkpoint-v3"}
    # the v1 record as the journal's first entry (the upgrade), then the unprepare's deletion
    assert [json.loads(line.split(" ", 1)[1])["op"] for line in lines] == ["put", "del"]
    assert Checkpoint(path=paths.checkpoint).read() == JournalState()


def test_a_corrupt_v1_checkpoint_stops_the_plugin_and_is_kept(rendered: RenderedNode, paths: StatePaths) -> None:
    _prepared_by_v1_plugin(rendered, paths)
    doc = json.loads(paths.checkpoint.read_text())
    doc["claims"][REF.uid]["name"] = "other"
    paths.checkpoint.write_text(json.dumps(doc))
    kept = paths.checkpoint.read_bytes()
    with pytest.raises(CheckpointError, match=r"checksum mismatch .* kept for inspection"):
        _state(rendered, paths).load()
    assert paths.checkpoint.read_bytes() == kept
