"""The CDI files an NVIDIA release's plugin leaves on disk across start-up, prepare, unprepare and restarts (temp
dirs, no API server): the claims are put on disk by the prepare plan itself, as in ``test_claim_state_files``."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

import cdi
from fakedev.cli.torture.invariants import CheckScope, compute_final_violations, compute_violations
from fakedev.cli.torture.ledger import Belief, ClaimBelief
from fakedev.cli.torture.observe import NodeFiles, read_snapshot
from fakedev.driver.apply import apply_prepare_plan
from fakedev.driver.cdi_layout import FAKEDEV_STYLE, CdiLayout, cdi_layout_for
from fakedev.driver.checkpoint import Checkpoint
from fakedev.driver.claims import compute_claim_plan
from fakedev.driver.plan import PreparePlan, SpecFile, compute_base_spec, compute_device_configs, compute_prepare_plan
from fakedev.driver.state import ClaimState, StatePaths
from fakedev.model.inventory import resolve_inventory
from fakedev.model.releases import NvidiaRelease
from fakedev.profiles import load_profile
from fakedev.render import RenderedNode, Schema, render_node
from kubeletapi.types import ClaimRef

NODE = "cdi-rel"
DRIVER = "gpu.nvidia.com"
REF = ClaimRef(uid="33333333-0000-0000-0000-000000000003", namespace="ns", name="c")
BASE = "k8s.gpu.nvidia.com-device_base.yaml"


@pytest.fixture(scope="module")
def rendered() -> RenderedNode:
    return render_node(resolve_inventory(load_profile("dgx-h100"), node_name=NODE), schemas=[Schema.NVIDIA])


@pytest.fixture
def paths(tmp_path: Path) -> StatePaths:
    return StatePaths(
        cdi_dir=tmp_path / "cdi",
        plugin_data_dir=tmp_path / "plugin",
        dev_root=tmp_path / "plugin" / "dev",
        checkpoint=tmp_path / "plugin" / "checkpoint.json",
    )


def _layout(release: NvidiaRelease) -> CdiLayout:
    return cdi_layout_for(schema=Schema.NVIDIA, nvidia=release, driver=DRIVER)


def _base(rendered: RenderedNode, paths: StatePaths, layout: CdiLayout) -> SpecFile | None:
    devices = [(r.device, p) for r, p in sorted(rendered.devices.items())]
    return compute_base_spec(layout=layout, devices=devices, dev_root=paths.dev_root)


def _state(rendered: RenderedNode, paths: StatePaths, layout: CdiLayout) -> ClaimState:
    return ClaimState(
        driver=DRIVER,
        node_name=NODE,
        paths=paths,
        layout=layout,
        base_spec=_base(rendered, paths, layout),
        api=None,
        lookup=lambda pool, name: rendered.device(driver=DRIVER, pool=pool, name=name),
    )


def _prepared(rendered: RenderedNode, paths: StatePaths, layout: CdiLayout, *, config: list[Any]) -> PreparePlan:
    """The claim's files on disk and its record in the checkpoint, as a prepare leaves them."""
    result = {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0"}
    claim: Any = {
        "metadata": {"uid": REF.uid, "name": REF.name, "namespace": REF.namespace},
        "status": {"allocation": {"devices": {"results": [result], "config": config}}},
    }
    claim_plan = compute_claim_plan(claim, uid=REF.uid, driver=DRIVER, node_name=NODE)
    published = [rendered.device(driver=DRIVER, pool=NODE, name=d.device) for d in claim_plan.devices]
    plan = compute_prepare_plan(
        claim=claim_plan,
        published=published,
        configs=compute_device_configs(claim_plan, published),
        nics={},
        driver=DRIVER,
        layout=layout,
        base_spec=_base(rendered, paths, layout),
        node_name=NODE,
        dirs=paths.dirs,
        generation=1,
        now="2026-01-01T00:00:00Z",
    )
    apply_prepare_plan(plan, nic_netns=None, sysfs_root=None)
    Checkpoint(path=paths.checkpoint).save({REF.uid: plan.record})
    return plan


def _env_config(**env: str) -> list[Any]:
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "env": env}
    return [{"source": "FromClaim", "requests": [], "opaque": {"driver": DRIVER, "parameters": parameters}}]


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_start_up_writes_the_base_spec_as_a_yaml_file_runtimes_read(rendered: RenderedNode, paths: StatePaths) -> None:
    paths.cdi_dir.mkdir(parents=True)
    crashed = paths.cdi_dir / f".{BASE}.x1y2z3.tmp"  # a write of it a crash cut short
    crashed.write_text("---\nkind: k8s")
    state = _state(rendered, paths, _layout(NvidiaRelease.V25_8_1))
    assert state.load() == [crashed]
    assert _names(paths.cdi_dir) == [BASE]
    path = paths.cdi_dir / BASE
    assert path.read_text().startswith("---\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    spec = cdi.load_spec_file(path)
    assert spec.kind == "k8s.gpu.nvidia.com/device"
    assert {d.name for d in spec.devices} == {r.device for r in rendered.devices}
    registry = cdi.load_registry(spec_dirs=[paths.cdi_dir])
    assert "k8s.gpu.nvidia.com/device=gpu-0" in registry.device_ids()


def test_a_lost_base_spec_makes_the_claim_prepare_again_and_prepare_writes_it_back(
    rendered: RenderedNode, paths: StatePaths
) -> None:
    layout = _layout(NvidiaRelease.V25_8_1)
    plan = _prepared(rendered, paths, layout, config=[])
    state = _state(rendered, paths, layout)
    state.load()
    assert state.held(REF) is not None
    (paths.cdi_dir / BASE).unlink()  # a reboot (volatile /var/run/cdi) or a hand
    assert state.held(REF) is None
    apply_prepare_plan(plan, nic_netns=None, sysfs_root=None)
    assert plan.base_spec is not None
    assert cdi.load_spec_file(paths.cdi_dir / BASE) == plan.base_spec.spec
    assert state.held(REF) is not None


@pytest.mark.parametrize(
    ("config", "claim_specs"),
    [([], []), (_env_config(X="y"), [f"k8s.gpu.nvidia.com-claim_{REF.uid}.yaml"])],
    ids=["base-spec-only", "with-a-claim-spec"],
)
def test_unprepare_keeps_the_nodes_base_spec_and_the_torture_checker_agrees(
    rendered: RenderedNode, paths: StatePaths, config: list[Any], claim_specs: list[str]
) -> None:
    layout = _layout(NvidiaRelease.V25_8_1)
    plan = _prepared(rendered, paths, layout, config=config)
    metadata_spec = f"gpu.nvidia.com_metadata_{REF.uid}_gpu.json"
    assert _names(paths.cdi_dir) == sorted([BASE, *claim_specs, metadata_spec])
    state = _state(rendered, paths, layout)
    state.load()
    files = NodeFiles(
        driver=DRIVER, cdi_dir=paths.cdi_dir, metadata_root=paths.metadata_root, checkpoint=paths.checkpoint
    )
    held = ClaimBelief(
        uid=REF.uid, namespace="ns", name="c", devices=("gpu-0",), belief=Belief.HELD, answer=plan.prepared
    )
    snapshot = read_snapshot(files, kube=None, namespace="ns", nic_netns=None)
    assert compute_violations(snapshot, [held], scope=CheckScope(driver=DRIVER)) == []
    assert state.unprepare(REF) == ""
    assert _names(paths.cdi_dir) == [BASE]
    state.close()  # the checker judges the last unprepare's record once the plugin has stopped (its del is queued)
    assert compute_final_violations(read_snapshot(files, kube=None, namespace="ns", nic_netns=None)) == []


@pytest.mark.parametrize("release", [NvidiaRelease.V25_12_0, NvidiaRelease.V0_4_1], ids=str)
def test_a_claim_spec_is_one_yaml_file_per_claim_removed_by_unprepare(
    rendered: RenderedNode, paths: StatePaths, release: NvidiaRelease
) -> None:
    layout = _layout(release)
    plan = _prepared(rendered, paths, layout, config=[])
    claim_spec = f"k8s.gpu.nvidia.com-claim_{REF.uid}.yaml"
    assert plan.base_spec is None
    assert _names(paths.cdi_dir) == sorted([claim_spec, f"gpu.nvidia.com_metadata_{REF.uid}_gpu.json"])
    spec = cdi.load_spec_file(paths.cdi_dir / claim_spec)
    assert (spec.kind, [d.name for d in spec.devices]) == ("k8s.gpu.nvidia.com/claim", [f"{REF.uid}-gpu-0"])
    assert spec.container_edits.env == ("NVIDIA_VISIBLE_DEVICES=void",)
    state = _state(rendered, paths, layout)
    state.load()
    assert state.unprepare(REF) == ""
    assert _names(paths.cdi_dir) == []


def test_a_claim_prepared_before_an_upgrade_is_unprepared_with_its_old_spec(
    rendered: RenderedNode, paths: StatePaths
) -> None:
    """Prepared by a fakedev that wrote ``k8s.gpu.nvidia.com-device_<uid>.json``, unprepared by one at v0.4.1."""
    _prepared(rendered, paths, CdiLayout(driver=DRIVER, style=FAKEDEV_STYLE), config=[])
    assert f"k8s.gpu.nvidia.com-device_{REF.uid}.json" in _names(paths.cdi_dir)
    state = _state(rendered, paths, _layout(NvidiaRelease.V0_4_1))
    state.load()
    assert state.prepare(REF).devices[0].cdi_device_ids[0] == f"k8s.gpu.nvidia.com/device={REF.uid}-gpu-0"
    assert state.unprepare(REF) == ""
    assert _names(paths.cdi_dir) == []
