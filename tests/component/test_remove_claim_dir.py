"""Removing a claim's metadata directory on unprepare: the recorded files without a walk, anything else by one."""

from __future__ import annotations

from pathlib import Path

from fakedev.driver.fsutil import make_dirs, make_new_dirs, remove_known_tree


def _tree(root: Path, *names: str) -> list[Path]:
    files = []
    for name in names:
        path = root / name
        make_dirs(path.parent, mode=0o755)
        path.write_text("{}")
        files.append(path)
    return files


def test_the_recorded_files_and_their_directories_go(tmp_path: Path) -> None:
    claim_dir = tmp_path / "ns_c_uid"
    files = _tree(claim_dir, "gpu/metadata.json", "nic/metadata.json")
    remove_known_tree(claim_dir, files=tuple(files))
    assert list(tmp_path.iterdir()) == []


def test_a_file_nobody_recorded_does_not_keep_the_directory(tmp_path: Path) -> None:
    claim_dir = tmp_path / "ns_c_uid"
    recorded = _tree(claim_dir, "gpu/metadata.json")
    _tree(claim_dir, "gpu/.metadata.json.0a1b2c3d4e.tmp", "old-layout/metadata.json")
    remove_known_tree(claim_dir, files=tuple(recorded))
    assert list(tmp_path.iterdir()) == []


def test_a_directory_already_gone_is_no_error(tmp_path: Path) -> None:
    claim_dir = tmp_path / "ns_c_uid"
    remove_known_tree(claim_dir, files=(claim_dir / "gpu" / "metadata.json",))
    assert not claim_dir.exists()


def test_make_dirs_makes_every_missing_level_with_its_mode_and_leaves_existing_ones(tmp_path: Path) -> None:
    existing = tmp_path / "root"
    existing.mkdir(mode=0o700)
    existing.chmod(0o700)
    leaf = existing / "a" / "b" / "c"
    make_dirs(leaf, mode=0o751)
    assert [oct(p.stat().st_mode & 0o777) for p in (existing, leaf.parent.parent, leaf.parent, leaf)] == [
        "0o700",
        "0o751",
        "0o751",
        "0o751",
    ]
    make_dirs(leaf, mode=0o755)  # there already: untouched
    assert oct(leaf.stat().st_mode & 0o777) == "0o751"


def test_a_recorded_file_and_its_directory_already_gone_still_take_the_rest(tmp_path: Path) -> None:
    claim_dir = tmp_path / "ns_c_uid"
    files = _tree(claim_dir, "gpu/metadata.json", "nic/metadata.json")
    files[0].unlink()
    (claim_dir / "gpu").rmdir()
    remove_known_tree(claim_dir, files=tuple(files))
    assert list(tmp_path.iterdir()) == []


def test_make_new_dirs_makes_the_levels_below_a_root_top_down_and_leaves_existing_ones(tmp_path: Path) -> None:
    root = tmp_path / "metadata"
    root.mkdir(mode=0o700)
    leaf = root / "ns_c_uid" / "gpu"
    make_new_dirs(leaf, below=root, mode=0o751)
    assert [oct(p.stat().st_mode & 0o777) for p in (root, leaf.parent, leaf)] == ["0o700", "0o751", "0o751"]
    leaf.chmod(0o700)
    make_new_dirs(leaf, below=root, mode=0o751)  # there already: untouched
    assert oct(leaf.stat().st_mode & 0o777) == "0o700"


def test_make_new_dirs_makes_a_missing_root_too(tmp_path: Path) -> None:
    leaf = tmp_path / "metadata" / "ns_c_uid" / "gpu"
    make_new_dirs(leaf, below=tmp_path / "metadata", mode=0o751)
    assert leaf.is_dir()
    assert oct((tmp_path / "metadata").stat().st_mode & 0o777) == "0o751"
