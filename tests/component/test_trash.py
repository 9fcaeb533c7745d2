"""The trash of unprepared claims' metadata directories: out of the tree at once, deleted behind, emptied at start."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from fakedev.driver.trash import BATCH, SPARES_MAX, Trash
from harness.procs import wait_for


def _claim_dir(root: Path, name: str) -> Path:
    directory = root / "metadata" / name / "gpu"
    directory.mkdir(parents=True)
    (directory / "metadata.json").write_text("{}")
    return directory.parent


def _files(claim: Path) -> tuple[Path, ...]:
    return (claim / "gpu" / "metadata.json",)


def _trash_files(trash: Path) -> list[Path]:
    return [p for p in trash.rglob("*") if not p.is_dir()]


def test_discarded_directories_leave_the_tree_at_once_and_the_trash_a_batch_at_a_time(tmp_path: Path) -> None:
    trash = Trash(root=tmp_path / "trash")
    claims = [_claim_dir(tmp_path, f"ns_c{i}_uid{i}") for i in range(BATCH)]
    for claim in claims[:-1]:
        trash.discard(claim, files=_files(claim))
        assert not claim.exists()
    assert len(list((tmp_path / "trash").iterdir())) == BATCH - 1  # collected, no thread woken yet
    assert len(_trash_files(tmp_path / "trash")) == BATCH - 1
    trash.discard(claims[-1], files=_files(claims[-1]))
    wait_for(lambda: trash.spares() == BATCH, timeout=10, what="the batch emptied into spares")
    assert _trash_files(tmp_path / "trash") == []  # only the emptied directories are kept
    trash.close()
    assert list((tmp_path / "metadata").iterdir()) == []
    assert list((tmp_path / "trash").iterdir()) == []  # a stop deletes the spares


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
    wait_for(lambda: not _trash_files(tmp_path / "trash"), timeout=10, what="the trash's files deleted")
    assert trash.spares() == BATCH - 1  # the one that held an unrecorded file is no spare
    assert [p.name.partition(".")[0] for p in walked] == ["ns_c7_uid7"]  # only the one holding an unrecorded file
    trash.close()


def _spares_from(trash: Trash, root: Path, count: int) -> list[int]:
    """Discard ``count`` claim directories (whole batches) and wait for them to become spares; their inodes."""
    claims = [_claim_dir(root, f"ns_old{i}_uid{i}") for i in range(count)]
    inodes = [c.stat().st_ino for c in claims]
    for claim in claims:
        trash.discard(claim, files=_files(claim))
    wait_for(lambda: trash.spares() == min(count, SPARES_MAX), timeout=10, what="the spares")
    return inodes


def test_a_new_claim_takes_an_emptied_directory_in_place_of_two_mkdirs(tmp_path: Path) -> None:
    trash = Trash(root=tmp_path / "trash")
    inodes = _spares_from(trash, tmp_path, BATCH)
    same = tmp_path / "metadata" / "ns_new_uidnew" / "gpu"
    other = tmp_path / "metadata" / "ns_new2_uidnew2" / "nic"  # another request name: the inner one is renamed
    assert trash.reuse(same)
    assert trash.reuse(other)
    for request_dir in (same, other):
        claim_dir = request_dir.parent
        assert claim_dir.stat().st_ino in inodes
        assert [p.name for p in claim_dir.iterdir()] == [request_dir.name]
        assert list(request_dir.iterdir()) == []
        assert (claim_dir.stat().st_mode & 0o7777, request_dir.stat().st_mode & 0o7777) == (0o755, 0o755)
    assert trash.spares() == BATCH - 2
    trash.close()
    assert list((tmp_path / "trash").iterdir()) == []
    assert same.is_dir() and other.is_dir()  # what was handed out is the claims', not the trash's


def test_a_claim_directory_that_holds_something_keeps_it_and_the_spare_stays(tmp_path: Path) -> None:
    trash = Trash(root=tmp_path / "trash")
    _spares_from(trash, tmp_path, BATCH)
    taken = _claim_dir(tmp_path, "ns_held_uidheld")
    assert not trash.reuse(taken / "gpu")
    assert (taken / "gpu" / "metadata.json").read_text() == "{}"
    assert trash.spares() == BATCH
    trash.close()


def test_without_spares_nothing_is_moved(tmp_path: Path) -> None:
    trash = Trash(root=tmp_path / "trash")
    assert not trash.reuse(tmp_path / "metadata" / "ns_c_uid" / "gpu")
    assert not (tmp_path / "metadata" / "ns_c_uid").exists()
    trash.close()


def test_only_directories_as_a_prepare_makes_them_become_spares_and_at_most_spares_max(tmp_path: Path) -> None:
    trash = Trash(root=tmp_path / "trash")
    odd = [_claim_dir(tmp_path, f"ns_odd{i}_uid{i}") for i in range(3)]
    odd[0].chmod(0o700)  # another mode than a prepare gives
    (odd[1] / "second").mkdir(mode=0o755)  # a second request directory nobody recorded
    (odd[2] / "gpu").rename(odd[2] / "gpu-real")
    (odd[2] / "gpu").symlink_to(odd[2] / "gpu-real")  # a link where the request directory should be
    for claim in odd:
        trash.discard(claim, files=_files(claim))
    _spares_from(trash, tmp_path, SPARES_MAX + BATCH - len(odd))

    def kept() -> list[Path]:
        return sorted((tmp_path / "trash").iterdir())

    wait_for(lambda: len(kept()) == SPARES_MAX, timeout=10, what="the directories beyond the spares deleted")
    assert trash.spares() == SPARES_MAX
    assert _trash_files(tmp_path / "trash") == []
    assert not any(p.name.startswith("ns_odd") for p in kept())
    trash.close()
