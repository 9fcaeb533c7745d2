"""Run directories and supervised processes that never outlive their owner.

Every OS object the harness creates carries the run's prefix. A run directory ``fakedev-<purpose>-<id>`` holds an
``owner.lock`` that its owning process keeps locked for its whole life and a ``run-id`` file naming its id (the
reaper reads the id from there, never from the directory's name); every process started for the run gets
``FAKEDEV_RUN_ID=<id>`` in its environment, its own process group, and a parent-death signal. The reaper takes any run
whose lock it can grab (its owner is gone), kills the processes tagged with its id, runs the registered cleaners
(network namespaces, veths, mounts, containers) and removes the directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final

from harness.errors import ComponentError

RUN_ENV: Final = "FAKEDEV_RUN_ID"
RUN_PREFIX: Final = "fakedev-"
SOURCE_ROOT: Final = Path(__file__).resolve().parents[1]
"""The directory holding the ``harness`` package: what a child Python process that imports it needs on its path."""
_LOCK_NAME: Final = "owner.lock"
RUN_ID_FILE: Final = "run-id"
YOUNG_RUN_SECONDS: Final = 30.0

Cleaner = Callable[[str, Path], None]
"""Removes whatever a subsystem created for a dead run, given its id and its run directory."""


def default_run_base() -> Path:
    """``$FAKEDEV_RUN_BASE`` or the system temp dir."""
    return Path(os.environ.get("FAKEDEV_RUN_BASE") or tempfile.gettempdir())


@dataclass(kw_only=True)
class RunDir:
    """A directory owned by this process for one run; closing it releases the lock (it does not delete)."""

    path: Path
    run_id: str
    _lock: IO[bytes] | None = field(default=None, repr=False)

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def remove(self) -> None:
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)


def new_run_id() -> str:
    return secrets.token_hex(4)


def open_run_dir(*, purpose: str, base: Path | None = None, run_id: str | None = None, reuse: bool = False) -> RunDir:
    """Create ``<base>/fakedev-<purpose>-<id>`` (or, with ``reuse``, take over an existing one) and lock it."""
    rid = run_id or new_run_id()
    path = (base or default_run_base()) / f"{RUN_PREFIX}{purpose}-{rid}"
    path.mkdir(parents=True, exist_ok=reuse, mode=0o750)
    # Labelled before anything can run under the id, and replaced atomically: a reaper never reads half an id.
    # (Taking over a directory rewrites the same id: the path is made from it.)
    label = path / f".{RUN_ID_FILE}.{os.getpid()}"
    label.write_text(f"{rid}\n")
    label.replace(path / RUN_ID_FILE)
    lock = (path / _LOCK_NAME).open("wb")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise ComponentError(f"{path} is in use by another process") from None
    lock.write(f"{os.getpid()}\n".encode())
    lock.flush()
    return RunDir(path=path, run_id=rid, _lock=lock)


def read_run_id(path: Path) -> str | None:
    """The id ``path`` was labelled with when it was opened; None if its owner died before labelling it (and so
    before starting anything)."""
    try:
        return (path / RUN_ID_FILE).read_text().strip() or None
    except (FileNotFoundError, NotADirectoryError):
        return None


def owner_alive(path: Path) -> bool:
    lock_path = path / _LOCK_NAME
    try:
        f = lock_path.open("rb")
    except FileNotFoundError:
        # A run directory is made moments before its lock: a young one without a lock is still being set up.
        try:
            return time.time() - path.stat().st_mtime < YOUNG_RUN_SECONDS
        except FileNotFoundError:
            return False
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


PF_KTHREAD: Final = 0x00200000
"""``/proc/<pid>/stat``'s flags bit for a kernel thread (it has no environment, ever)."""
EXEC_SETTLE_TRIES: Final = 50
EXEC_SETTLE_SECONDS: Final = 0.002


def compute_environ_pending(stat: str) -> bool:
    """Whether a process whose environment read empty is still in ``execve`` (pure, from ``/proc/<pid>/stat``).

    ``subprocess.Popen`` returns once the child's close-on-exec descriptors are closed, which the kernel does
    before it places the new program's environment: for a moment the process shows none, and its ``env_end``
    (field 51) is still 0. A zombie, a kernel thread or a program started with an empty environment has none for
    good."""
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 49:
        return False  # a kernel older than 3.5 does not say; take the empty environment as it is
    state, flags, env_end = fields[0], int(fields[6]), int(fields[48])
    return state not in ("Z", "X") and not flags & PF_KTHREAD and env_end == 0


def _environ(entry: Path) -> list[bytes] | None:
    """The process's environment; None when it is gone or unreadable."""
    try:
        return (entry / "environ").read_bytes().split(b"\0")
    except OSError:
        return None


def _settled_environ(entry: Path) -> list[bytes] | None:
    """The environment of a process caught in ``execve``, read again until it shows (0.1 s at most)."""
    for _ in range(EXEC_SETTLE_TRIES):
        try:
            if not compute_environ_pending((entry / "stat").read_text()):
                return _environ(entry)
        except OSError:
            return None
        if (environ := _environ(entry)) is None or environ != [b""]:
            return environ
        time.sleep(EXEC_SETTLE_SECONDS)
    return _environ(entry)


def tagged_pids(run_id: str) -> list[int]:
    """Processes whose environment carries ``FAKEDEV_RUN_ID=<run_id>``, including one whose ``execve`` is still
    under way (it was started just before a reap)."""
    needle = f"{RUN_ENV}={run_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        environ = _environ(entry)
        if environ == [b""]:
            environ = _settled_environ(entry)
        if environ is not None and needle in environ:
            pids.append(int(entry.name))
    return pids


def kill_run_processes(run_id: str) -> int:
    """SIGKILL every process of a run; returns how many were signalled."""
    pids = tagged_pids(run_id)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def reap(*, base: Path | None = None, cleaners: Sequence[Cleaner] = ()) -> list[str]:
    """Clean up after every run under ``base`` whose owner has died; returns the reaped run ids.

    Use :func:`harness.reaper.reap_all` to include the runtime's cleaners (containers, namespaces, veths).
    """
    root = base or default_run_base()
    reaped = []
    for path in sorted(root.glob(f"{RUN_PREFIX}*")):
        if not path.is_dir() or owner_alive(path):
            continue  # (a directory removed meanwhile is neither: owner_alive says False, rmtree ignores it)
        run_id = read_run_id(path)
        # An unlabelled directory's owner died right after making it: nothing ran under an id yet.
        if run_id is not None:
            kill_run_processes(run_id)
            for cleaner in cleaners:
                with contextlib.suppress(Exception):  # a cleaner's failure must not stop the others
                    cleaner(run_id, path)
        shutil.rmtree(path, ignore_errors=True)
        if run_id is not None:
            reaped.append(run_id)
    return reaped


@dataclass(kw_only=True)
class Process:
    """A child process in its own group, with its output in a log file, killed if this process dies."""

    name: str
    argv: Sequence[str]
    log_path: Path
    popen: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, *, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)

    def stop(self, *, timeout: float = 10.0) -> int:
        """SIGTERM the group, SIGKILL after ``timeout``; returns the exit code."""
        if self.alive():
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.popen.wait()
        # Children of the component that stayed in its group go with it.
        self.signal(signal.SIGKILL)
        return self.popen.returncode

    def failure(self, what: str) -> ComponentError:
        return ComponentError(f"{self.name} {what}; last log lines ({self.log_path}):\n{self.log_tail()}")


def start_process(
    *,
    name: str,
    argv: Sequence[str],
    run: RunDir,
    log_path: Path | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    die_with_parent: bool = True,
) -> Process:
    """Start ``argv`` tagged with the run id, in a new session, with SIGKILL as its parent-death signal.

    ``die_with_parent=False`` is for container shims, which must outlive a restarting node emulator (as containers
    outlive a restarting kubelet); the reaper still finds them by their run id.
    """
    log = log_path or run.path / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    child_env = dict(os.environ if env is None else env)
    child_env[RUN_ENV] = run.run_id
    full = (
        ["setpriv", "--pdeathsig", "KILL", "--", *argv] if die_with_parent and shutil.which("setpriv") else list(argv)
    )
    with log.open("ab") as out:
        try:
            popen = subprocess.Popen(
                full,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_env,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise ComponentError(f"cannot start {name} ({argv[0]}): {exc}") from exc
    return Process(name=name, argv=list(argv), log_path=log, popen=popen)


def wait_for(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    abort: Callable[[], Exception | None] | None = None,
) -> None:
    """Poll ``predicate`` until true; ``abort`` may return an error to raise early (e.g. the process died).

    A predicate that raises counts as "not yet" (the thing it reads may not exist yet); the last such exception is
    named in the timeout's message and chained as its ``__cause__``, so a wait that never had a chance says why.
    """
    from harness.errors import NotReadyError

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        if abort is not None and (err := abort()) is not None:
            raise err
        try:
            if predicate():
                return
        except Exception as exc:  # any failure of the check means "not yet"
            last = exc
        if time.monotonic() >= deadline:
            why = f" (the check last raised {type(last).__name__}: {last})" if last is not None else ""
            raise NotReadyError(f"timed out after {timeout:.0f}s waiting for {what}{why}") from last
        time.sleep(interval)


@contextlib.contextmanager
def run_dir(*, purpose: str, base: Path | None = None, keep: bool = False) -> Iterator[RunDir]:
    """A locked run directory removed on exit unless ``keep``."""
    rd = open_run_dir(purpose=purpose, base=base)
    try:
        yield rd
    finally:
        if keep:
            rd.close()
        else:
            rd.remove()
