"""The trash of unprepared claims' metadata directories: out of the tree at once, deleted behind, emptied at start."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from fakedev.driver.trash import BATCH, Trash
from harness.procs import wait_for


def _claim_dir(root: Path, name: str) -> Path:
    directory = root / "metadata" / name / "gpu"
    directory.mkdir(parents=True)
    (directory / "metadata.json").write_text("{}")
    return directory.parent


def _files(claim: Path) -> tuple[Path, ...]:
    return (claim / "gpu" / "metadata.json",)


def test_discarded_directories_leave_the_tree_at_once_and_the_trash_a_batch_at_a_time(tmp_path: Path) -> None:
    trash = Trash(root=tmp_path / "trash")
    claims = [_claim_dir(tmp_path, f"ns_c{i}_uid{i}") for i in range(BATCH)]
    for claim in claims[:-1]:
        trash.discard(claim, files=_files(claim))
        assert not claim.exists()
    assert len(list((tmp_path / "trash").iterdir())) == BATCH - 1  # collected, no thread woken yet
    trash.discard(claims[-1], files=_files(claims[-1]))
    wait_for(lambda: not any((tmp_path / "trash").iterdir()), timeout=10, what="the trash emptied")
    trash.close()
    assert list((tmp_path / "metadata").iterdir()) == []


def test_a_stop_deletes_what_the_trash_collected(tmp_path: Path) -> None:
    trash = Trash(root=tmp_path / "trash")
    claim = _claim_dir(tmp_path, "ns_c_uid")
    trash.discard(claim, files=_files(claim))
    assert len(list((tmp_path / "trash").iterdir())) == 1
    trash.close()
    assert list((tmp_path / "trash").iterdir()) == []


def test_a_directory_already_gone_is_no_error(tmp_path: Path) -> None:
    trash = Trash(root=tmp_path / "trash")
    trash.discard(tmp_path / "metadata" / "never", files=_files(tmp_path / "metadata" / "never"))
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
    trash.discard(claim, files=_files(claim))
    assert not claim.exists()
    trash.close()


def test_recorded_files_are_deleted_without_a_walk_and_anything_else_with_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    walked: list[Path] = []
    real_rmtree = shutil.rmtree

    def rmtree(path: Path, **kwargs: Any) -> None:
        walked.append(Path(path))
        real_rmtree(path, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)  # fsutil calls it as shutil.rmtree
    trash = Trash(root=tmp_path / "trash")
    claims = [_claim_dir(tmp_path, f"ns_c{i}_uid{i}") for i in range(BATCH)]
    (claims[7] / "gpu" / "left-by-hand").write_text("")
    for claim in claims:
        trash.discard(claim, files=_files(claim))
    wait_for(lambda: not any((tmp_path / "trash").iterdir()), timeout=10, what="the trash emptied")
    trash.close()
    assert [p.name.partition(".")[0] for p in walked] == ["ns_c7_uid7"]  # only the one holding an unrecorded file
