"""Containers under real runc, each behind a tiny shell shim that records the exit code.

The shim (``sh -c 'runc run …; echo $? > exit'``) runs in its own session without a parent-death signal, so
containers outlive a restarting node emulator the way they outlive a restarting kubelet; the emulator re-adopts them
from its checkpoint by container ID. Every container lives under a runc ``--root`` inside the owner's run directory,
and the shims carry the run id, so the reaper finds both after a crash.

Which runc: ``$FAKEDEV_RUNC`` when set, else the cached runc that ``fakedev cluster build --with-node`` builds (the
real node's, so both nodes treat ``linux.netDevices`` alike), else the runc on PATH (Debian's 1.1.5, which has no
``linux.netDevices``: the emulator then moves interfaces itself). A runc root records the binary that made it, so
the containers in it are adopted and reaped by that same runc.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness.cluster.build import RUNC, cache_entry, check_cache, default_cache_root
from harness.errors import ComponentError
from harness.procs import RunDir, start_process, wait_for
from harness.runtime.oci import JsonObj

log = logging.getLogger("harness.runtime.runc")

RUNC_ROOT_NAME: Final = "runc"
EXIT_FILE: Final = "exit"
RUNC_TIMEOUT: Final = 20.0
LOG_FILE: Final = "log"
RUNC_ENV: Final = "FAKEDEV_RUNC"
"""The runc the node emulator runs pods with: a path, or a name looked up on PATH."""
BINARY_RECORD: Final = ".fakedev-runc"
"""In a runc root: the binary its containers were made with (runc skips files there; container IDs never start
with a dot here)."""


@dataclass(frozen=True, kw_only=True)
class RuncChoice:
    binary: str
    origin: str
    """Why this one, for the log: the environment variable, the build cache or PATH."""


def compute_runc_choice(*, override: str | None, cached: Path | None, on_path: str | None) -> RuncChoice:
    if override:
        return RuncChoice(binary=override, origin=f"${RUNC_ENV}")
    if cached is not None:
        return RuncChoice(binary=str(cached), origin=f"the cached runc {RUNC.version}")
    if on_path is not None:
        return RuncChoice(binary=on_path, origin="PATH")
    raise ComponentError(
        "runc was not found: build it (fakedev cluster build --with-node) or install Debian's runc (make deps)"
    )


@functools.cache
def _cached_runc() -> Path | None:
    """Checked once per process: the check hashes the 8 MB binary, and every emulated node's start asks."""
    root = default_cache_root()
    if check_cache(group=RUNC, cache_root=root) is not None:
        return None
    return cache_entry(group=RUNC, cache_root=root) / "runc"


def choose_runc() -> RuncChoice:
    """The runc for pods now (see the module docstring for the order)."""
    override = os.environ.get(RUNC_ENV) or None
    if override is not None:
        resolved = shutil.which(override)
        if resolved is None:
            raise ComponentError(f"${RUNC_ENV}={override}: no such executable")
        override = resolved
    return compute_runc_choice(override=override, cached=_cached_runc(), on_path=shutil.which("runc"))


def compute_net_devices_support(features: str) -> bool:
    """Whether ``runc features`` output says the runtime moves ``linux.netDevices`` (runc 1.4 and later)."""
    try:
        doc = json.loads(features)
    except ValueError:
        return False
    linux = doc.get("linux") if isinstance(doc, dict) else None
    devices = linux.get("netDevices") if isinstance(linux, dict) else None
    return isinstance(devices, dict) and devices.get("enabled") is True


@functools.cache
def runc_moves_net_devices(binary: str) -> bool:
    """Asked once per binary path: a runc too old for ``features`` moves nothing either."""
    try:
        out = subprocess.run([binary, "features"], capture_output=True, text=True, check=False, timeout=RUNC_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and compute_net_devices_support(out.stdout)


def parse_runc_version(text: str) -> str:
    """``runc --version``'s first line (``runc version 1.5.3``) → ``1.5.3``; ``unknown`` if it says otherwise."""
    first = text.splitlines()[0] if text.strip() else ""
    words = first.split()
    return words[2] if len(words) >= 3 and words[:2] == ["runc", "version"] else "unknown"


@functools.cache
def runc_version(binary: str) -> str:
    """What the Node reports as its container runtime (``runc://<version>``), asked once per binary."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False, timeout=RUNC_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return parse_runc_version(out.stdout)


def _recorded_binary(root: Path) -> str | None:
    try:
        recorded = (root / BINARY_RECORD).read_text().strip()
    except OSError:
        return None
    return recorded if recorded and os.access(recorded, os.X_OK) else None


def _has_containers(root: Path) -> bool:
    return root.is_dir() and any(p.is_dir() for p in root.iterdir())


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
    origin: str = "given"

    @classmethod
    def for_run(cls, run: RunDir) -> Runc:
        return cls.at(run.path / RUNC_ROOT_NAME)

    @classmethod
    def at(cls, root: Path) -> Runc:
        """The runc for ``root``: the one chosen now, unless containers made by another are still there."""
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        choice = choose_runc()
        recorded = _recorded_binary(root)
        if recorded is not None and recorded != choice.binary and _has_containers(root):
            # Another runc's state may not read the same: its containers stay with it until they are gone.
            choice = RuncChoice(binary=recorded, origin="the runc that started this node's containers")
        (root / BINARY_RECORD).write_text(choice.binary + "\n")
        runtime = cls(root=root, binary=choice.binary, origin=choice.origin)
        log.info(
            "runc for pods",
            extra={"fields": {"binary": choice.binary, "from": choice.origin, "netDevices": runtime.moves_net_devices}},
        )
        return runtime

    @property
    def moves_net_devices(self) -> bool:
        """Whether this runc moves ``linux.netDevices`` into the container itself (``runc features``)."""
        return runc_moves_net_devices(self.binary)

    def _cmd(self, *args: str) -> list[str]:
        return [self.binary, "--root", str(self.root), *args]

    def run(
        self, *, container_id: str, bundle: Path, spec: JsonObj, run: RunDir, netns: Path | None = None
    ) -> Container:
        """Write ``config.json`` into ``bundle`` and start the container behind its shim.

        ``netns``: the network namespace runc itself runs in — where it looks up the spec's ``linux.netDevices``
        by name (the container joins its own namespace from the spec either way)."""
        bundle.mkdir(parents=True, exist_ok=True)
        (bundle / EXIT_FILE).unlink(missing_ok=True)
        (bundle / "config.json").write_text(json.dumps(spec, indent=1))
        enter = ["nsenter", f"--net={netns}", "--"] if netns is not None else []
        runc = shlex.join([*enter, *self._cmd("run", "--bundle", str(bundle), container_id)])
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
    """Kill and delete every container under a runc root (the reaper's job after a crash), and under the runc roots
    containerd's shim keeps inside it, one per containerd namespace (a real node's pods: ``<root>/k8s.io``)."""
    if not root.is_dir():
        return
    recorded = _recorded_binary(root)
    binary = recorded or choose_runc().binary
    for each in (root, *_namespace_roots(root)):
        runtime = Runc(root=each, binary=_recorded_binary(each) or binary)
        for cid in runtime.list_ids():
            with contextlib.suppress(Exception):
                runtime.kill(cid, sig=signal.SIGKILL)
                runtime.delete(cid)


def _namespace_roots(root: Path) -> list[Path]:
    """Directories of ``root`` that are runc roots themselves: a container's ``state.json`` one level below."""
    found = []
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError), os.scandir(entry.path) as inner:
                if any(e.is_dir(follow_symlinks=False) and Path(e.path, "state.json").is_file() for e in inner):
                    found.append(Path(entry.path))
    return found
