"""The prepare bench's idle drivers: real processes stopped for another driver's turn and continued after it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakedev.cli.bench.prepare import others_stopped, process_cpu_ns, settled
from harness.node.drivers import DriverContext, DriverProcess, template_driver
from harness.procs import RunDir, run_dir, wait_for


def _state(driver: DriverProcess) -> str:
    assert driver.process is not None
    return Path(f"/proc/{driver.process.pid}/stat").read_text().rpartition(")")[2].split()[0]


def _wait_state(driver: DriverProcess, state: str) -> None:
    wait_for(lambda: _state(driver) == state, timeout=10, interval=0.01, what=f"{driver.name} in state {state}")


@pytest.fixture
def drivers(tmp_path: Path) -> Iterator[list[DriverProcess]]:
    with run_dir(purpose="test", base=tmp_path) as run:
        yield from _started(run, tmp_path)


def _started(run: RunDir, tmp_path: Path) -> Iterator[list[DriverProcess]]:
    started: list[DriverProcess] = []
    try:
        for i in range(3):
            driver = DriverProcess(
                name=f"idle-{i}",
                spec=template_driver(("sleep", "600")),
                context=DriverContext(
                    node=f"node-{i}",
                    kubelet_root=tmp_path / f"k{i}",
                    cdi_dir=tmp_path / f"cdi{i}",
                    kubeconfig=tmp_path / "kubeconfig",
                ),
                run=run,
            )
            driver.start()
            started.append(driver)
        for driver in started:
            _wait_state(driver, "S")
        yield started
    finally:
        for driver in started:
            driver.stop(timeout=5)  # continued first: a stopped process cannot handle SIGTERM


def test_every_other_driver_is_stopped_for_the_turn_and_continued_after(drivers: list[DriverProcess]) -> None:
    called = drivers[1]
    with others_stopped(drivers, called=called, idle="stopped"):
        _wait_state(drivers[0], "T")
        _wait_state(drivers[2], "T")
        assert _state(called) == "S"
    for driver in drivers:
        _wait_state(driver, "S")


def test_drivers_are_continued_when_the_turn_fails(drivers: list[DriverProcess]) -> None:
    with pytest.raises(RuntimeError, match="call failed"), others_stopped(drivers, called=drivers[0], idle="stopped"):
        _wait_state(drivers[2], "T")
        raise RuntimeError("call failed")
    for driver in drivers:
        _wait_state(driver, "S")


def test_running_leaves_every_driver_running(drivers: list[DriverProcess]) -> None:
    with others_stopped(drivers, called=drivers[0], idle="running"):
        assert [_state(d) for d in drivers] == ["S", "S", "S"]


def test_a_turn_starts_once_the_driver_has_caught_up(tmp_path: Path) -> None:
    # A process that works for 0.4 s of CPU, then idles: the wait ends only after the work.
    burn = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\ntime.sleep(600)\n"
    process = subprocess.Popen([sys.executable, "-c", burn])
    try:
        asyncio.run(settled(process.pid, cap=30))
        assert process_cpu_ns(process.pid) >= 0.4e9
        before = process_cpu_ns(process.pid)
        asyncio.run(settled(process.pid, cap=30))  # quiet already: one window
        assert process_cpu_ns(process.pid) - before < 0.02e9
    finally:
        process.kill()
        process.wait()
    assert process_cpu_ns(process.pid) == 0  # gone: nothing to wait for
