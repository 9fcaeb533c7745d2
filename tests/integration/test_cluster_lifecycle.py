"""Starting and stopping control planes: the CLI verbs, and no orphans when the owner dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.procs import RUN_ID_FILE, read_run_id, reap, tagged_pids, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

BIN = Path(sys.executable).parent


def _fakedev(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "fakedev"), *args], capture_output=True, text=True, timeout=240, env=env, check=False
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); look at its state.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_cli_up_env_down(tmp_path: Path) -> None:
    state = tmp_path / "state"
    up = _fakedev("cluster", "up", "--name", "cli-test", "--state-dir", str(state))
    assert up.returncode == 0, up.stderr
    export = _fakedev("cluster", "env", "--name", "cli-test", "--state-dir", str(state))
    assert export.returncode == 0, export.stderr
    assert export.stdout == up.stdout
    kubeconfig = export.stdout.strip().removeprefix("export KUBECONFIG=")
    nodes = subprocess.run(
        [str(BIN / "kubectl"), "get", "namespaces", "-o", "name"],
        env={**os.environ, "KUBECONFIG": kubeconfig},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "namespace/default" in nodes.stdout.split()
    run_id = read_run_id(Path(kubeconfig).parent)
    assert run_id is not None
    assert len(tagged_pids(run_id)) == 4  # etcd, apiserver, scheduler, controller-manager

    down = _fakedev("cluster", "down", "--name", "cli-test", "--state-dir", str(state))
    assert down.returncode == 0, down.stderr
    assert tagged_pids(run_id) == []
    assert not Path(kubeconfig).exists()
    gone = _fakedev("cluster", "env", "--name", "cli-test", "--state-dir", str(state))
    assert gone.returncode == 1
    assert "no cluster named 'cli-test' is running" in gone.stderr


def test_killing_the_owner_leaves_no_component_running(tmp_path: Path) -> None:
    owner = textwrap.dedent(
        f"""
        import sys, threading
        from pathlib import Path
        from harness.cluster.local import start_local_cluster
        c = start_local_cluster(base=Path({str(tmp_path)!r}))
        print(c.run.run_id, *[p.pid for p in c.processes.values()], flush=True)
        threading.Event().wait()
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", owner], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    run_id, *pids = proc.stdout.readline().split()
    proc.stdout.close()
    assert len(pids) == 4 and all(_pid_alive(int(p)) for p in pids)

    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # The parent-death signal takes the components down without anyone's help ...
    wait_for(lambda: not any(_pid_alive(int(p)) for p in pids), timeout=20, what="components to die with their owner")
    # ... and the reaper removes what the dead owner left on disk.
    assert reap(base=tmp_path) == [run_id]
    assert list(tmp_path.glob("fakedev-*")) == []


def test_reaper_leaves_live_runs_alone(tmp_path: Path) -> None:
    from harness.procs import open_run_dir

    live = open_run_dir(purpose="probe", base=tmp_path)
    try:
        assert reap(base=tmp_path) == []
        assert live.path.exists()
    finally:
        live.remove()


def test_reaper_spares_a_run_directory_still_being_set_up(tmp_path: Path) -> None:
    """A run directory exists for a moment before its owner locks it; only an old lock-less one is abandoned."""
    young = tmp_path / "fakedev-probe-0young0"
    old = tmp_path / "fakedev-probe-00old000"
    for path, run_id in ((young, "0young0"), (old, "00old000")):
        path.mkdir()
        (path / RUN_ID_FILE).write_text(run_id)
    os.utime(old, (0, 0))
    assert reap(base=tmp_path) == ["00old000"]
    assert young.exists() and not old.exists()


def test_up_without_built_binaries_says_how_to_build(tmp_path: Path) -> None:
    env = {**os.environ, "FAKEDEV_CACHE": str(tmp_path / "empty-cache")}
    result = _fakedev("cluster", "up", "--name", "nobin", "--state-dir", str(tmp_path / "s"), env=env)
    assert result.returncode == 1
    assert "run `fakedev cluster build`" in result.stderr
