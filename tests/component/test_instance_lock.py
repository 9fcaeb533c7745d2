"""The instances' lock on a real file: calls share one descriptor, counted; another instance's start-up (an
exclusive ``flock`` on its own descriptor) waits while any call of this process holds it, even after close."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from fakedev.driver.instance_lock import InstanceLock


def _other_instance_can_load(path: Path) -> bool:
    """What the other instance's start-up would get: an exclusive lock on its own open of the file."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_the_lock_is_held_while_any_call_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "plugin" / "serialize.lock"
    lock = InstanceLock(path=path)
    with lock.shared():
        assert not _other_instance_can_load(path)
        with lock.shared():  # a second call on another claim
            assert lock.holders() == 2
        assert not _other_instance_can_load(path)  # the first call still holds it
    assert lock.holders() == 0
    assert _other_instance_can_load(path)
    lock.close()


def test_close_keeps_the_lock_until_the_last_call_ends(tmp_path: Path) -> None:
    path = tmp_path / "serialize.lock"
    lock = InstanceLock(path=path)
    with lock.shared():
        lock.close()  # the plugin stops while a call the grace period left runs
        assert not _other_instance_can_load(path)
    assert _other_instance_can_load(path)


def test_loading_takes_it_exclusive_and_refuses_under_its_own_calls(tmp_path: Path) -> None:
    path = tmp_path / "serialize.lock"
    lock = InstanceLock(path=path)
    with lock.exclusive():
        assert not _other_instance_can_load(path)
    assert _other_instance_can_load(path)
    with lock.shared(), pytest.raises(RuntimeError, match="held shared"), lock.exclusive():
        pass
    lock.close()
