"""How the plugin serves gRPC: the core's settings in place before grpc loads, and one server for both sockets."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from grpc import aio

from fakedev.plugin.app import PluginApp, PluginSettings
from kubeletapi import dra_v1_pb2, dra_v1_pb2_grpc
from kubeletapi import pluginregistration_v1_pb2 as reg_pb
from kubeletapi import pluginregistration_v1_pb2_grpc as reg_grpc

PROBE: Final = """
import os, sys
import fakedev.cli
before = "grpc" in sys.modules
try:
    fakedev.cli.main(["plugin", "--help"])
except SystemExit:
    pass
print(before, "grpc" in sys.modules, repr(os.environ.get("GRPC_EXPERIMENTS")))
"""


def _probe(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip().splitlines()[-1]


def test_the_plugin_command_sets_the_grpc_core_before_grpc_is_imported() -> None:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    assert _probe(env) == "False True '-event_engine_listener'"


def test_the_plugin_command_keeps_experiments_the_user_set() -> None:
    assert _probe({**os.environ, "GRPC_EXPERIMENTS": ""}) == "False True ''"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fd-") as base:
        yield Path(base)


def test_one_threaded_server_answers_registration_and_dra(short_dir: Path) -> None:
    settings = PluginSettings(
        profile="seed-example", node_name="n1", kubelet_root=short_dir / "k", cdi_dir=short_dir / "cdi"
    )

    async def scenario() -> tuple[reg_pb.PluginInfo, dra_v1_pb2.NodeUnprepareResourcesResponse, bool, bool]:
        app = await PluginApp.build(settings)
        await app.start()
        try:
            async with aio.insecure_channel(f"unix:{app.paths.registration_socket}") as channel:
                registration = reg_grpc.RegistrationStub(channel)
                info = await registration.GetInfo(reg_pb.InfoRequest(), timeout=5)
                await registration.NotifyRegistrationStatus(
                    reg_pb.RegistrationStatus(plugin_registered=True), timeout=5
                )
            async with aio.insecure_channel(f"unix:{info.endpoint}") as channel:
                answer = await dra_v1_pb2_grpc.DRAPluginStub(channel).NodeUnprepareResources(
                    dra_v1_pb2.NodeUnprepareResourcesRequest(
                        claims=[dra_v1_pb2.Claim(uid="u-1", namespace="default", name="never-prepared")]
                    ),
                    timeout=5,
                )
            state = app.server.registration
            return info, answer, state.registered and state.changed.is_set(), app.server.threaded
        finally:
            await app.stop()
            gc.unfreeze()  # PluginApp.start froze the collector's view of pytest's heap

    info, answer, registered, threaded = asyncio.run(scenario())
    assert threaded
    assert info.endpoint == str(short_dir / "k" / "plugins" / "gpu.example.com" / "dra.sock")
    assert registered
    assert answer.claims["u-1"].error == ""  # an unknown claim unprepares as success
    assert not list((short_dir / "k").rglob("*.sock"))  # both sockets removed on stop
