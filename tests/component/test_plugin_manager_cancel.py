"""The plugin manager's reconcile loop ends when cancelled, even when its wake-up lands in the same loop turn: on
Python 3.11 ``asyncio.wait_for`` returned the event's result instead of the cancellation, and the emulator's stop
then waited forever for the loop (CI: "timed out after 120s on the emulator loop; pending: …-plugins: run")."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harness.node.plugins import PluginManager


def test_a_cancel_that_meets_a_wake_up_still_ends_the_loop(tmp_path: Path) -> None:
    async def scenario() -> bool:
        manager = PluginManager(registry_dir=tmp_path / "registry", on_health=lambda *_: None)
        task = asyncio.create_task(manager.run())
        for _ in range(3):  # into the loop's wait
            await asyncio.sleep(0)
        manager._wake.set()  # a socket appeared or went: the waiting side is woken ...
        await asyncio.sleep(0)  # ... and its wait finishes in this turn
        task.cancel()  # ... just as the emulator stops
        done, _ = await asyncio.wait({task}, timeout=5)
        return task in done and task.cancelled()

    assert asyncio.run(scenario())
