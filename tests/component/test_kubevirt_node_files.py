"""The node's files read locally: the CDI scan through NodeFiles finds what the CDI package's own scan finds, and
the local reader follows sysfs-style relative links."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest

import cdi
from harness.kubevirt.nodefiles import LocalNodeFiles
from harness.kubevirt.verify import scan_cdi_dirs


def _spec(kind: str, device: str) -> str:
    return json.dumps(
        {"cdiVersion": "0.6.0", "kind": kind, "devices": [{"name": device, "containerEdits": {"env": ["A=1"]}}]}
    )


def test_cdi_scan_through_node_files_matches_the_cdi_scan(tmp_path: Path) -> None:
    low, high = tmp_path / "low", tmp_path / "high"
    low.mkdir()
    high.mkdir()
    (low / "a.json").write_text(_spec("example.com/gpu", "g0"))
    (low / "b.yaml").write_text(_spec("example.com/gpu", "g1"))
    (low / "broken.json").write_text("{not json")
    (low / "notes.txt").write_text("not a spec")
    (high / "a.json").write_text(_spec("example.com/gpu", "g0"))
    ours = scan_cdi_dirs(
        LocalNodeFiles(), cdi_dirs=[PurePosixPath(low), PurePosixPath(high), PurePosixPath(tmp_path / "missing")]
    )
    theirs = cdi.scan_spec_dirs(spec_dirs=[low, high, tmp_path / "missing"])
    assert ours.specs == theirs.specs
    assert [str(e) for e in ours.errors] == [str(e) for e in theirs.errors]
    registry = cdi.build_registry(scan=ours)
    assert registry.resolve("example.com/gpu=g0").source.path == high / "a.json"


def test_local_reader_follows_relative_links_and_reports_missing_paths(tmp_path: Path) -> None:
    group = tmp_path / "kernel" / "iommu_groups" / "42"
    group.mkdir(parents=True)
    device = tmp_path / "bus" / "pci" / "devices" / "0000:4b:00.0"
    device.mkdir(parents=True)
    (device / "iommu_group").symlink_to("../../../../kernel/iommu_groups/42")
    (device / "dangling").symlink_to("nowhere")
    files = LocalNodeFiles()
    assert files.resolve(PurePosixPath(device / "iommu_group")).name == "42"
    assert files.list_dir(PurePosixPath(device)) == ["dangling", "iommu_group"]
    assert not files.exists(PurePosixPath(device / "dangling"))
    with pytest.raises(FileNotFoundError):
        files.resolve(PurePosixPath(device / "dangling"))
    with pytest.raises(FileNotFoundError):
        files.list_dir(PurePosixPath(device / "iommu_group" / "nothing"))
