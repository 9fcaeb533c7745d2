"""The host lock that keeps two real nodes (two kubelets sharing the kubepods cgroup) off one host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import HostBusyError
from harness.realnode.hostlock import HostLock


def test_a_second_node_is_refused_with_the_holder_named_then_admitted_after_release(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "realnode.lock"
    first, second = HostLock(path=path), HostLock(path=path)
    first.acquire(owner="node 127.0.0.1", timeout=0)
    with pytest.raises(HostBusyError, match=r"another real node runs on this host \(pid \d+ node 127\.0\.0\.1"):
        second.acquire(owner="node 127.0.0.2", timeout=0)
    first.release()
    second.acquire(owner="node 127.0.0.2", timeout=0)
    assert "node 127.0.0.2" in path.read_text()
    second.release()


def test_a_waiting_node_gets_the_lock_when_the_holder_dies(tmp_path: Path) -> None:
    path = tmp_path / "realnode.lock"
    holder = subprocess.Popen(
        [
            sys.executable, "-c",
            "import sys; from pathlib import Path; from harness.realnode.hostlock import HostLock; "
            f"lock = HostLock(path=Path({str(path)!r})); lock.acquire(owner='crashed run', timeout=0); "
            "print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    waits: list[str] = []
    waiter = HostLock(path=path)
    with pytest.raises(HostBusyError, match="crashed run"):
        waiter.acquire(owner="next", timeout=0)
    holder.kill()  # no release: the kernel drops a dead process's flock
    holder.communicate()
    waiter.acquire(owner="next", timeout=10, on_wait=waits.append)
    assert "next" in path.read_text()
    waiter.release()
