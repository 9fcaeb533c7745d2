"""The fakedev image, built once per session from the cache, and private container engines to load it into.

Every engine runs from a run directory of its own (``fakedev-image-<engine>-<id>``: data, state, sockets), is stopped
and its directory removed afterwards; none of them touches the host's docker, podman or containerd state.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.cluster.build import CONTAINERD, cached_binaries
from harness.procs import Process, run_dir, start_process, wait_for

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def run_tool(argv: Sequence[str], *, timeout: float = 300, env: dict[str, str] | None = None) -> str:
    """A tool's standard output; its exit status and error output in the failure if it fails."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=env, check=False)
    assert done.returncode == 0, f"{' '.join(argv[:4])} … exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


@dataclass(frozen=True, kw_only=True)
class Engine:
    """A private container engine: the command line that reaches it."""

    argv: tuple[str, ...]
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 300) -> str:
        return run_tool([*self.argv, *args], timeout=timeout, env=self.env)


def _stopped(process: Process) -> None:
    process.stop(timeout=20)


@pytest.fixture
def containerd() -> Iterator[Engine]:
    """containerd 2.4 (our build, as the real node runs it) with its root, state and sockets in a run directory."""
    binaries = cached_binaries(groups=(CONTAINERD,))
    bin_dir = binaries.path("containerd").parent
    with run_dir(purpose="image-ctr") as run:
        root = run.path
        socket = root / "c.sock"
        config = root / "config.toml"
        disabled = [
            "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images",
            "io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
            "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs",
            "io.containerd.differ.v1.erofs", "io.containerd.snapshotter.v1.btrfs",
        ]  # fmt: skip
        config.write_text(
            "version = 3\n"
            f"root = '{root / 'root'}'\nstate = '{root / 'state'}'\n"
            f"disabled_plugins = [{', '.join(repr(p) for p in disabled)}]\n"
            f"[grpc]\n  address = '{socket}'\n[ttrpc]\n  address = '{socket}.ttrpc'\n"
            f"[plugins.'io.containerd.shim.v1.manager']\n  socket_dir = '{root / 's'}'\n"
            f"[plugins.'io.containerd.internal.v1.opt']\n  path = '{root / 'opt'}'\n"
        )
        # The shim and runc are found on PATH, as the real node starts containerd.
        env = {**os.environ, "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}
        daemon = start_process(
            name="containerd", argv=[str(bin_dir / "containerd"), "--config", str(config)], run=run, env=env
        )
        engine = Engine(argv=(str(bin_dir / "ctr"), "--address", str(socket), "--namespace", "fakedev-image"), env=env)
        try:
            wait_for(
                lambda: subprocess.run([*engine.argv, "version"], capture_output=True, check=False).returncode == 0,
                timeout=30,
                what="the private containerd",
                abort=lambda: None if daemon.alive() else daemon.failure("exited"),
            )
            yield engine
        finally:
            _stopped(daemon)


@pytest.fixture
def podman() -> Iterator[Engine]:
    """Debian's podman 4.3 with its own storage (vfs: no mounts left behind), runc, cgroupfs, no systemd."""
    with run_dir(purpose="image-podman") as run:
        root = run.path
        (root / "tmp").mkdir()
        argv = (
            "podman", f"--root={root / 'storage'}", f"--runroot={root / 'run'}", f"--tmpdir={root / 'tmp'}",
            "--storage-driver=vfs", "--cgroup-manager=cgroupfs", "--events-backend=file", "--runtime=/usr/sbin/runc",
        )  # fmt: skip
        yield Engine(argv=argv, env=dict(os.environ))


@pytest.fixture
def dockerd() -> Iterator[Engine]:
    """Debian's dockerd 20.10 on a socket of its own, with no bridge, iptables or masquerading (overlay2: its mounts
    go with each ``run --rm``); the docker client
    on PATH (28.x at /usr/local/bin) talks to it by API version negotiation."""
    with run_dir(purpose="image-docker") as run:
        root = run.path
        socket = root / "d.sock"
        (root / "daemon.json").write_text("{}\n")
        daemon = start_process(
            name="dockerd",
            argv=[
                "dockerd", f"--data-root={root / 'data'}", f"--exec-root={root / 'exec'}", f"--host=unix://{socket}",
                f"--pidfile={root / 'dockerd.pid'}", f"--config-file={root / 'daemon.json'}", "--bridge=none",
                "--iptables=false", "--ip6tables=false", "--ip-masq=false", "--userland-proxy=false",
                "--storage-driver=overlay2",
            ],
            run=run,
        )  # fmt: skip
        engine = Engine(argv=("docker", f"--host=unix://{socket}"), env={**os.environ, "DOCKER_CONFIG": str(root)})
        try:
            wait_for(
                lambda: subprocess.run([*engine.argv, "version"], capture_output=True, check=False).returncode == 0,
                timeout=60,
                what="the private dockerd",
                abort=lambda: None if daemon.alive() else daemon.failure("exited"),
            )
            yield engine
        finally:
            _stopped(daemon)
