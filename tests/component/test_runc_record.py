"""A runc root remembers the runc that made its containers: adoption after an emulator restart and the reaper use
that one, whatever ``$FAKEDEV_RUNC`` says now."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.runtime.runc import BINARY_RECORD, RUNC_ENV, Runc


@pytest.fixture
def debian_runc() -> str:
    found = shutil.which("runc")
    assert found is not None, "make deps installs Debian's runc"
    return found


@pytest.mark.parametrize(("has_containers", "kept"), [(True, True), (False, False)], ids=["containers", "empty"])
def test_a_root_keeps_its_runc_while_it_holds_containers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, debian_runc: str, has_containers: bool, kept: bool
) -> None:
    root = tmp_path / "runc"
    root.mkdir()
    (root / BINARY_RECORD).write_text(debian_runc + "\n")
    if has_containers:
        (root / "fakedev-x-c-0").mkdir()  # a container's state directory
    monkeypatch.setenv(RUNC_ENV, "/bin/true")

    runtime = Runc.at(root)

    assert runtime.binary == (debian_runc if kept else "/bin/true")
    assert (root / BINARY_RECORD).read_text().strip() == runtime.binary
