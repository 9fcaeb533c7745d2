"""``fakedev cluster up|down|env``: a control plane that outlives the command that started it.

``up`` starts a small supervisor process (this module's ``main``) in its own session. The supervisor owns the run
directory lock and the components; if it is killed, the components die with it (parent-death signal) and the reaper
removes the rest. A pointer file ``<state>/<name>.json`` tells ``env`` and ``down`` where the cluster is.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Final, TypedDict

from harness.cluster.build import cached_binaries
from harness.cluster.local import start_local_cluster
from harness.errors import ClusterStateError, NotReadyError
from harness.reaper import reap_all

START_TIMEOUT: Final = 180.0


class Pointer(TypedDict):
    name: str
    supervisorPid: int
    runDir: str
    kubeconfig: str
    server: str
    ready: bool
    error: str


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fakedev" / "clusters"


def _pointer_path(state_dir: Path, name: str) -> Path:
    return state_dir / f"{name}.json"


def _write_pointer(path: Path, pointer: Pointer) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(pointer, indent=2) + "\n")
    tmp.replace(path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_pointer(*, state_dir: Path, name: str) -> Pointer:
    """The running cluster called ``name``, or a :class:`ClusterStateError` saying there is none."""
    path = _pointer_path(state_dir, name)
    try:
        pointer: Pointer = json.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterStateError(f"no cluster named {name!r} is running (start one with `fakedev cluster up`)") from None
    except ValueError as exc:
        raise ClusterStateError(f"{path} is corrupt ({exc}); remove it and run `fakedev cluster up`") from exc
    if not _pid_alive(pointer["supervisorPid"]):
        path.unlink(missing_ok=True)
        raise ClusterStateError(f"cluster {name!r} is not running any more (its supervisor exited)")
    return pointer


def up(*, state_dir: Path, name: str) -> Pointer:
    """Start the supervisor and wait until the cluster is ready (or report why it is not)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(ClusterStateError):
        existing = read_pointer(state_dir=state_dir, name=name)
        if existing["ready"]:
            return existing
    cached_binaries()  # fail fast, with the build hint, before forking anything
    path = _pointer_path(state_dir, name)
    path.unlink(missing_ok=True)
    log = state_dir / f"{name}.supervisor.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.cluster.daemon", "--state-dir", str(state_dir), "--name", name],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClusterStateError(f"the cluster supervisor exited ({proc.returncode}); see {log}:\n{log.read_text()}")
        if path.exists():
            with contextlib.suppress(ValueError):
                pointer: Pointer = json.loads(path.read_text())
                if pointer["error"]:
                    raise ClusterStateError(f"cluster start failed: {pointer['error']}")
                if pointer["ready"]:
                    return pointer
        time.sleep(0.2)
    proc.terminate()
    raise NotReadyError(f"the cluster was not ready within {START_TIMEOUT:.0f}s; see {log}")


def down(*, state_dir: Path, name: str, timeout: float = 30.0) -> bool:
    """Stop the named cluster; returns False when none was running."""
    try:
        pointer = read_pointer(state_dir=state_dir, name=name)
    except ClusterStateError:
        reap_all()
        return False
    pid = pointer["supervisorPid"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
    _pointer_path(state_dir, name).unlink(missing_ok=True)
    reap_all()
    return True


def render_env(pointer: Pointer) -> str:
    return f"export KUBECONFIG={pointer['kubeconfig']}\n"


def main(argv: list[str] | None = None) -> int:
    """The supervisor: start the cluster, publish the pointer, wait for SIGTERM, stop everything."""
    parser = argparse.ArgumentParser(prog="python -m harness.cluster.daemon")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--name", required=True)
    args = parser.parse_args(argv)
    path = _pointer_path(args.state_dir, args.name)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    pointer: Pointer = {
        "name": args.name,
        "supervisorPid": os.getpid(),
        "runDir": "",
        "kubeconfig": "",
        "server": "",
        "ready": False,
        "error": "",
    }
    reap_all()
    try:
        cluster = start_local_cluster(progress=lambda m: print(m, flush=True))
    except Exception as exc:
        pointer["error"] = str(exc)
        _write_pointer(path, pointer)
        return 1
    pointer["runDir"] = str(cluster.run.path)
    pointer["kubeconfig"] = str(cluster.kubeconfig)
    pointer["server"] = cluster.server
    pointer["ready"] = True
    _write_pointer(path, pointer)
    print(f"cluster {args.name!r} ready: {cluster.server}", flush=True)
    try:
        while not stop.wait(timeout=1.0):
            if (dead := cluster.dead_component()) is not None:
                print(f"component died: {dead}", flush=True)
                break
    finally:
        cluster.stop()
        path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
