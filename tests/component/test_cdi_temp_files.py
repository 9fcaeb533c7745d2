"""Temp files written whole: unique names without a random draw each, and exact modes with or without a chmod."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cdi import files


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(Path(path).stat().st_mode)


def test_names_are_unique_and_recognised_as_temp_files(tmp_path: Path) -> None:
    written = {
        files.write_new_temp_file(str(tmp_path), prefix=".spec.", suffix=".tmp", data=b"x", mode=0o644, sync=False)
        for _ in range(500)
    }
    assert len(written) == 500
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(Path(p).name for p in written)
    assert all(Path(p).name.removeprefix(".spec.").removesuffix(".tmp").isalnum() for p in written)


def test_a_name_taken_already_is_never_overwritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "unique_part", lambda: "taken")
    (tmp_path / ".spec.taken.tmp").write_bytes(b"someone else's")
    path = files.write_new_temp_file(str(tmp_path), prefix=".spec.", suffix=".tmp", data=b"mine", mode=0o644, sync=True)
    assert (tmp_path / ".spec.taken.tmp").read_bytes() == b"someone else's"
    assert Path(path).read_bytes() == b"mine"
    assert Path(path).name != ".spec.taken.tmp"


@pytest.mark.parametrize("inherited", [0o000, 0o077])
def test_modes_are_exact_whether_the_umask_is_the_process_own_or_inherited(tmp_path: Path, inherited: int) -> None:
    # In a child: the umask is process-wide, and set_umask is for a process that owns it (the plugin).
    script = textwrap.dedent(
        f"""
        import os, sys
        from cdi import files
        os.umask({inherited:#o})
        d = sys.argv[1]
        print(files.write_new_temp_file(d, prefix="inherited-644.", suffix=".tmp", data=b"", mode=0o644, sync=False))
        files.set_umask(0o022)
        print(files.write_new_temp_file(d, prefix="own-644.", suffix=".tmp", data=b"", mode=0o644, sync=False))
        print(files.write_new_temp_file(d, prefix="own-666.", suffix=".tmp", data=b"", mode=0o666, sync=False))
        print(files.needs_chmod(0o644), files.needs_chmod(0o666))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    inherited_644, own_644, own_666, needs = done.stdout.splitlines()
    assert (_mode(inherited_644), _mode(own_644), _mode(own_666)) == (0o644, 0o644, 0o666)
    assert needs == "False True"  # 0o644 passes 0o022 whole: no fchmod; 0o666 does not
