"""Temp files written whole: unique names without a random draw each, recognised as temp files, exact modes."""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cdi import files
from fakedev.driver.fsutil import temp_file_target


def test_names_are_unique_recognised_as_temp_files_and_cost_no_random_draw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_draw(_nbytes: int | None = None) -> str:
        raise AssertionError("a random draw for a name nobody has taken")

    monkeypatch.setattr(secrets, "token_hex", no_draw)  # cdi.files calls it as secrets.token_hex
    written = {
        files.write_new_temp_file(str(tmp_path), prefix=".spec.yaml.", suffix=".tmp", data=b"x", mode=0o644, sync=False)
        for _ in range(500)
    }
    assert len(written) == 500
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(Path(p).name for p in written)
    assert {temp_file_target(Path(p).name) for p in written} == {"spec.yaml"}  # what start-up collects


def test_a_name_taken_already_is_never_overwritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "unique_part", lambda: "taken")
    (tmp_path / ".spec.taken.tmp").write_bytes(b"someone else's")
    path = files.write_new_temp_file(str(tmp_path), prefix=".spec.", suffix=".tmp", data=b"mine", mode=0o644, sync=True)
    assert (tmp_path / ".spec.taken.tmp").read_bytes() == b"someone else's"
    assert Path(path).read_bytes() == b"mine"
    assert temp_file_target(Path(path).name) == "spec"


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_the_mode_is_exact_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    # In a child: the umask is process-wide.
    script = textwrap.dedent(
        f"""
        import os, sys
        from cdi import files
        os.umask({umask:#o})
        for mode in (0o644, 0o600, 0o666):
            print(files.write_new_temp_file(sys.argv[1], prefix="m.", suffix=".tmp", data=b"", mode=mode, sync=False))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert [stat.S_IMODE(Path(p).stat().st_mode) for p in done.stdout.splitlines()] == [0o644, 0o600, 0o666]
