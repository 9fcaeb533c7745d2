"""The plugin manager lists its registry directory again only when the directory changed: a fleet's thousand
emulated kubelets poll theirs every second, and a listing that finds nothing new was most of what that cost. A
change within the directory's coarse time tick is never missed."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.node.plugins import LISTING_SETTLE_NS, PluginManager


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    made: list[socket.socket] = []
    yield made
    for s in made:
        s.close()


def _bind(path: Path, made: list[socket.socket]) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    made.append(s)


def _age(directory: Path) -> None:
    """Set the directory's modification time a second back: settled, as it is a moment after its last change."""
    past = time.time_ns() - 20 * LISTING_SETTLE_NS
    os.utime(directory, ns=(past, past))


def test_an_unchanged_directory_is_not_listed_again_and_a_new_socket_is_found(
    tmp_path: Path, sockets: list[socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = tmp_path / "registry"
    registry.mkdir()
    manager = PluginManager(registry_dir=registry, on_health=lambda *_: None, watch_directory=False)
    seen: list[str] = []

    async def register(path: Path, sid: tuple[int, int]) -> None:
        seen.append(path.name)  # a handshake that never completes: each listing offers the socket again

    monkeypatch.setattr(manager, "_register", register)

    async def rounds(n: int) -> None:
        for _ in range(n):
            await manager.reconcile()

    _bind(registry / "a-reg.sock", sockets)
    asyncio.run(rounds(2))  # just changed: not trusted to stay current, so listed both times
    assert seen == ["a-reg.sock", "a-reg.sock"]

    _age(registry)
    asyncio.run(rounds(3))  # settled: one listing, then nothing to do
    assert seen == ["a-reg.sock"] * 3

    _bind(registry / "b-reg.sock", sockets)  # a new socket changes the directory's time
    asyncio.run(rounds(1))
    assert seen[3:] == ["a-reg.sock", "b-reg.sock"]
