"""The trash of unprepared claims' metadata directories: out of the tree at once, deleted behind, emptied at start."""

from __future__ import annotations

from pathlib import Path

from fakedev.driver.apply import remove_claim_dir
from fakedev.driver.trash import BATCH, Trash
from harness.procs import wait_for


def _claim_dir(root: Path, name: str) -> Path:
    directory = root / "metadata" / name / "gpu"
    directory.mkdir(parents=True)
    (directory / "metadata.json").write_text("{}")
    return directory.parent


def _in_place(directory: Path) -> None:
    remove_claim_dir(directory, files=())


def test_discarded_directories_leave_the_tree_at_once_and_the_trash_a_batch_at_a_time(tmp_path: Path) -> None:
    trash = Trash(root=tmp_path / "trash")
    claims = [_claim_dir(tmp_path, f"ns_c{i}_uid{i}") for i in range(BATCH)]
    for claim in claims[:-1]:
        trash.discard(claim, remove_in_place=_in_place)
        assert not claim.exists()
    assert len(list((tmp_path / "trash").iterdir())) == BATCH - 1  # collected, no thread woken yet
    trash.discard(claims[-1], remove_in_place=_in_place)
    wait_for(lambda: not any((tmp_path / "trash").iterdir()), timeout=10, what="the trash emptied")
    trash.close()
    assert list((tmp_path / "metadata").iterdir()) == []


def test_a_stop_deletes_what_the_trash_collected(tmp_path: Path) -> None:
    trash = Trash(root=tmp_path / "trash")
    trash.discard(_claim_dir(tmp_path, "ns_c_uid"), remove_in_place=_in_place)
    assert len(list((tmp_path / "trash").iterdir())) == 1
    trash.close()
    assert list((tmp_path / "trash").iterdir()) == []


def test_a_directory_already_gone_is_no_error(tmp_path: Path) -> None:
    trash = Trash(root=tmp_path / "trash")
    trash.discard(tmp_path / "metadata" / "never", remove_in_place=_in_place)
    trash.close()
    assert not (tmp_path / "trash").exists()


def test_what_a_killed_plugin_left_in_the_trash_is_deleted_at_start(tmp_path: Path) -> None:
    left = tmp_path / "trash" / "ns_c_uid.0a1b2c3d" / "gpu"
    left.mkdir(parents=True)
    (left / "metadata.json").write_text("{}")
    (tmp_path / "trash" / "stray-file").write_text("")
    assert Trash(root=tmp_path / "trash").empty() == 2
    assert list((tmp_path / "trash").iterdir()) == []


def test_a_trash_that_cannot_be_made_removes_the_directory_in_place(tmp_path: Path) -> None:
    (tmp_path / "blocked").write_text("a file where the trash's parent should be")
    trash = Trash(root=tmp_path / "blocked" / "trash")
    claim = _claim_dir(tmp_path, "ns_c_uid")
    trash.discard(claim, remove_in_place=_in_place)
    assert not claim.exists()
    trash.close()
