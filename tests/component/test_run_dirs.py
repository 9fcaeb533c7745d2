"""Run directories carry their id as data: the reaper finds a dead run's processes by the id it reads, not the name."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from harness.procs import open_run_dir, read_run_id, reap, start_process, tagged_pids


@pytest.mark.parametrize(
    ("purpose", "run_id"),
    [("cluster", None), ("real-node", "node-7f3a"), ("probe", "id-with-dashes-9")],
    ids=["generated-id", "dashes-in-purpose-and-id", "dashes-in-id"],
)
def test_open_run_dir_labels_the_directory_with_its_id(tmp_path: Path, purpose: str, run_id: str | None) -> None:
    run = open_run_dir(purpose=purpose, base=tmp_path, run_id=run_id)
    try:
        assert read_run_id(run.path) == run.run_id
        assert run_id is None or run.run_id == run_id
    finally:
        run.remove()


def test_reaper_kills_a_dead_runs_processes_by_the_id_it_reads(tmp_path: Path) -> None:
    run = open_run_dir(purpose="real-node", base=tmp_path, run_id="node-7f3a")
    sleeper = start_process(name="sleeper", argv=["sleep", "600"], run=run, die_with_parent=False)
    run.close()  # the owner is gone: its lock is free

    assert reap(base=tmp_path) == ["node-7f3a"]

    assert sleeper.popen.wait(timeout=10) == -signal.SIGKILL
    assert not run.path.exists()


def test_a_process_is_found_by_its_run_id_the_moment_it_is_started(tmp_path: Path) -> None:
    """``Popen`` returns while the child's ``execve`` may still be placing its environment (busy cores make that
    moment last); the reaper, run right then, must still find it. It used to miss about 1 start in 150 here."""
    load = open_run_dir(purpose="probe", base=tmp_path, run_id="load-5e1f")
    run = open_run_dir(purpose="probe", base=tmp_path, run_id="race-5e1f")
    burners = [
        start_process(name=f"burner-{i}", argv=["sh", "-c", "while :; do :; done"], run=load)
        for i in range(os.cpu_count() or 2)
    ]
    try:
        for _ in range(300):
            sleeper = start_process(name="sleeper", argv=["sleep", "600"], run=run, die_with_parent=False)
            try:
                assert tagged_pids(run.run_id) == [sleeper.pid]
            finally:
                sleeper.stop(timeout=5)
    finally:
        for burner in burners:
            burner.stop(timeout=5)
        run.remove()
        load.remove()


def test_reaper_removes_an_abandoned_directory_that_never_got_its_id(tmp_path: Path) -> None:
    unlabelled = tmp_path / "fakedev-probe-1234abcd"
    unlabelled.mkdir()
    os.utime(unlabelled, (0, 0))  # old and lock-less: its owner died right after making it

    assert reap(base=tmp_path) == []

    assert not unlabelled.exists()
