"""Containers under real runc: ``runc run`` in the foreground, so its exit code is the container's.

Every container lives under a runc ``--root`` inside the owner's run directory, so the reaper can find and kill the
containers of a dead run with ``runc list`` even when the ``runc run`` processes are gone.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness.errors import ComponentError
from harness.procs import Process, RunDir, start_process, wait_for
from harness.runtime.oci import JsonObj

RUNC_ROOT_NAME: Final = "runc"


def find_runc() -> str:
    found = shutil.which("runc")
    if found is None:
        raise ComponentError("runc was not found; install the Debian package runc (make deps)")
    return found


@dataclass(kw_only=True)
class Container:
    """One container started by :class:`Runc`; ``process`` is the foreground ``runc run``."""

    container_id: str
    bundle: Path
    process: Process
    runtime: Runc

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    def exit_code(self) -> int | None:
        return self.process.popen.poll()

    def wait(self, *, timeout: float) -> int:
        wait_for(lambda: self.exit_code() is not None, timeout=timeout, what=f"container {self.container_id} to exit")
        code = self.exit_code()
        assert code is not None
        return code

    def stop(self, *, timeout: float = 10.0) -> int:
        """SIGTERM the container, SIGKILL after ``timeout``, then delete it from runc's state."""
        if self.exit_code() is None:
            self.runtime.kill(self.container_id, sig=signal.SIGTERM)
            try:
                self.process.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.runtime.kill(self.container_id, sig=signal.SIGKILL)
                self.process.popen.wait(timeout=10)
        self.runtime.delete(self.container_id)
        code = self.process.popen.returncode
        return int(code) if code is not None else -1


@dataclass(kw_only=True)
class Runc:
    """runc with a private state root."""

    root: Path
    binary: str

    @classmethod
    def for_run(cls, run: RunDir) -> Runc:
        root = run.path / RUNC_ROOT_NAME
        root.mkdir(mode=0o700, exist_ok=True)
        return cls(root=root, binary=find_runc())

    def _cmd(self, *args: str) -> list[str]:
        return [self.binary, "--root", str(self.root), *args]

    def run(self, *, container_id: str, bundle: Path, spec: JsonObj, run: RunDir, log_path: Path) -> Container:
        """Write ``config.json`` into ``bundle`` and start the container; output goes to ``log_path``."""
        bundle.mkdir(parents=True, exist_ok=True)
        (bundle / "config.json").write_text(json.dumps(spec, indent=1))
        proc = start_process(
            name=f"runc-{container_id}",
            argv=self._cmd("run", "--bundle", str(bundle), container_id),
            run=run,
            log_path=log_path,
        )
        return Container(container_id=container_id, bundle=bundle, process=proc, runtime=self)

    def state(self, container_id: str) -> JsonObj | None:
        out = subprocess.run(self._cmd("state", container_id), capture_output=True, text=True, check=False)
        if out.returncode != 0:
            return None
        state: JsonObj = json.loads(out.stdout)
        return state

    def kill(self, container_id: str, *, sig: int) -> None:
        subprocess.run(self._cmd("kill", "--all", container_id, str(int(sig))), capture_output=True, check=False)

    def delete(self, container_id: str) -> None:
        subprocess.run(self._cmd("delete", "--force", container_id), capture_output=True, check=False)

    def list_ids(self) -> list[str]:
        out = subprocess.run(self._cmd("list", "--quiet"), capture_output=True, text=True, check=False)
        return [line for line in out.stdout.split() if line]


def clean_runc_root(root: Path) -> None:
    """Kill and delete every container under a runc root (the reaper's job after a crash)."""
    if not root.is_dir():
        return
    runtime = Runc(root=root, binary=find_runc())
    for cid in runtime.list_ids():
        with contextlib.suppress(Exception):
            runtime.kill(cid, sig=signal.SIGKILL)
            runtime.delete(cid)
