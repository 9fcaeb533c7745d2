"""Containers under real runc, each behind a tiny shell shim that records the exit code.

The shim (``sh -c 'runc run …; echo $? > exit'``) runs in its own session without a parent-death signal, so
containers outlive a restarting node emulator the way they outlive a restarting kubelet; the emulator re-adopts them
from its checkpoint by container ID. Every container lives under a runc ``--root`` inside the owner's run directory,
and the shims carry the run id, so the reaper finds both after a crash.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness.errors import ComponentError
from harness.procs import RunDir, start_process, wait_for
from harness.runtime.oci import JsonObj

RUNC_ROOT_NAME: Final = "runc"
EXIT_FILE: Final = "exit"
RUNC_TIMEOUT: Final = 20.0
LOG_FILE: Final = "log"


def find_runc() -> str:
    found = shutil.which("runc")
    if found is None:
        raise ComponentError("runc was not found; install the Debian package runc (make deps)")
    return found


@dataclass(kw_only=True)
class Container:
    """One container: its ID, bundle (config.json, log, exit) and the runc that runs it."""

    container_id: str
    bundle: Path
    runtime: Runc

    @property
    def log_path(self) -> Path:
        return self.bundle / LOG_FILE

    def exit_code(self) -> int | None:
        """The container's exit code once it has ended (runc's own exit code is the container's)."""
        try:
            return int((self.bundle / EXIT_FILE).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def running(self) -> bool:
        state = self.runtime.state(self.container_id)
        return state is not None and state.get("status") in ("running", "created")

    def pid(self) -> int | None:
        state = self.runtime.state(self.container_id)
        return int(state["pid"]) if state and state.get("pid") else None

    def wait(self, *, timeout: float) -> int:
        wait_for(lambda: self.exit_code() is not None, timeout=timeout, what=f"container {self.container_id} to exit")
        code = self.exit_code()
        assert code is not None
        return code

    def stop(self, *, timeout: float = 10.0) -> int | None:
        """SIGTERM, SIGKILL after ``timeout``, then delete from runc's state; returns the exit code if known."""
        if self.exit_code() is None and self.running():
            self.runtime.kill(self.container_id, sig=signal.SIGTERM)
            try:
                wait_for(
                    lambda: self.exit_code() is not None or not self.running(),
                    timeout=timeout,
                    what=f"container {self.container_id} to stop",
                )
            except Exception:
                self.runtime.kill(self.container_id, sig=signal.SIGKILL)
                with contextlib.suppress(Exception):
                    wait_for(
                        lambda: self.exit_code() is not None or not self.running(),
                        timeout=10,
                        what=f"container {self.container_id} to die",
                    )
        self.runtime.delete(self.container_id)
        return self.exit_code()


@dataclass(kw_only=True)
class Runc:
    """runc with a private state root."""

    root: Path
    binary: str

    @classmethod
    def for_run(cls, run: RunDir) -> Runc:
        return cls.at(run.path / RUNC_ROOT_NAME)

    @classmethod
    def at(cls, root: Path) -> Runc:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        return cls(root=root, binary=find_runc())

    def _cmd(self, *args: str) -> list[str]:
        return [self.binary, "--root", str(self.root), *args]

    def run(self, *, container_id: str, bundle: Path, spec: JsonObj, run: RunDir) -> Container:
        """Write ``config.json`` into ``bundle`` and start the container behind its shim."""
        bundle.mkdir(parents=True, exist_ok=True)
        (bundle / EXIT_FILE).unlink(missing_ok=True)
        (bundle / "config.json").write_text(json.dumps(spec, indent=1))
        runc = shlex.join(self._cmd("run", "--bundle", str(bundle), container_id))
        exit_tmp, exit_file = shlex.quote(str(bundle / "exit.tmp")), shlex.quote(str(bundle / EXIT_FILE))
        log = shlex.quote(str(bundle / LOG_FILE))
        shim = f"{runc} </dev/null >>{log} 2>&1; echo $? >{exit_tmp}; mv {exit_tmp} {exit_file}"
        # The outer shell backgrounds the shim and exits at once, so the shim is nobody's child here.
        launcher = start_process(
            name=f"shim-{container_id}",
            argv=["/bin/sh", "-c", f"({shim}) &"],
            run=run,
            log_path=bundle / "shim.log",
            die_with_parent=False,
        )
        launcher.popen.wait()
        return Container(container_id=container_id, bundle=bundle, runtime=self)

    def adopt(self, *, container_id: str, bundle: Path) -> Container:
        """A container started by an earlier emulator process."""
        return Container(container_id=container_id, bundle=bundle, runtime=self)

    def _call(self, *args: str) -> subprocess.CompletedProcess[str]:
        """One runc command; a runc that hangs (a wedged container) counts as a failed call, never a stuck caller."""
        try:
            return subprocess.run(self._cmd(*args), capture_output=True, text=True, check=False, timeout=RUNC_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            return subprocess.CompletedProcess(exc.cmd, returncode=-1, stdout="", stderr="runc timed out")

    def state(self, container_id: str) -> JsonObj | None:
        out = self._call("state", container_id)
        if out.returncode != 0:
            return None
        state: JsonObj = json.loads(out.stdout)
        return state

    def kill(self, container_id: str, *, sig: int) -> None:
        self._call("kill", "--all", container_id, str(int(sig)))

    def delete(self, container_id: str) -> None:
        self._call("delete", "--force", container_id)

    def list_ids(self) -> list[str]:
        return [line for line in self._call("list", "--quiet").stdout.split() if line]


def clean_runc_root(root: Path) -> None:
    """Kill and delete every container under a runc root (the reaper's job after a crash)."""
    if not root.is_dir():
        return
    runtime = Runc(root=root, binary=find_runc())
    for cid in runtime.list_ids():
        with contextlib.suppress(Exception):
            runtime.kill(cid, sig=signal.SIGKILL)
            runtime.delete(cid)
