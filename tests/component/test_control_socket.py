"""ControlClient against a real ControlServer on a Unix socket, and a whole PluginApp built without an API server."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from fakedev.cli import main
from fakedev.errors import CheckpointError, ControlRefusedError, ControlUnreachableError
from fakedev.faults import CallFault, Faults
from fakedev.model.inventory import resolve_inventory
from fakedev.plugin.app import PluginApp, PluginSettings, render_status
from fakedev.plugin.control import TAINT_KEY, ControlServer, ControlTarget
from fakedev.plugin.devices import DeviceBoard
from fakedev.plugin.protocol import (
    Call,
    ControlClient,
    StatusBody,
    StatusReply,
    render_call_fault,
)
from fakedev.profiles import load_profile
from fakedev.render import Schema
from kubeclient.values import TaintEffect
from kubeletapi.types import HealthState

T = TypeVar("T")


def _board() -> DeviceBoard:
    inventory = resolve_inventory(load_profile("seed-example"), node_name="n1")
    return DeviceBoard.build(
        inventory=inventory, schema=Schema.EXAMPLE, driver="gpu.example.com", node_name="n1", health_timeout_seconds=30
    )


def _serve(path: Path, target: ControlTarget, talk: Callable[[], T]) -> T:
    """Serve ``target`` on ``path`` while ``talk`` (blocking client calls) runs in a worker thread."""

    async def run() -> T:
        server = ControlServer(path=path, target=target)
        await server.start()
        try:
            return await asyncio.to_thread(talk)
        finally:
            await server.stop()

    return asyncio.run(run())


@pytest.fixture
def board() -> DeviceBoard:
    return _board()


@pytest.fixture
def target(board: DeviceBoard) -> ControlTarget:
    faults = Faults()

    def status() -> StatusBody:
        return {
            "driver": board.driver,
            "node": board.node_name,
            "devices": board.status(),
            "registration": {"registered": False, "error": "", "notifications": 0},
            "claims": [],
            "faults": {"prepare": render_call_fault(faults.prepare), "unprepare": render_call_fault(faults.unprepare)},
            "sliceGeneration": 0,
            "healthSubscribers": 0,
            "udevEvents": 0,
            "statusOwed": 0,
        }

    return ControlTarget(status=status, set_health=board.set_health, faults=faults)


def test_status_lists_every_device_healthy(tmp_path: Path, target: ControlTarget) -> None:
    path = tmp_path / "control.sock"

    def talk() -> tuple[StatusReply, int]:
        return ControlClient(path=path).status(), path.stat().st_mode & 0o777

    status, mode = _serve(path, target, talk)
    assert status["ok"] is True and status["driver"] == "gpu.example.com"
    assert [(d["device"], d["health"], d["taints"]) for d in status["devices"]] == [
        (f"gpu-{i}", "Healthy", []) for i in range(8)
    ]
    assert mode == 0o600


def test_set_health_taints_the_device_and_healthy_lifts_it(
    tmp_path: Path, target: ControlTarget, board: DeviceBoard
) -> None:
    path = tmp_path / "control.sock"
    client = ControlClient(path=path)

    def talk() -> list[tuple[str, list[str]]]:
        seen = []
        for health, taint in ((HealthState.UNHEALTHY, TaintEffect.NO_SCHEDULE), (HealthState.HEALTHY, None)):
            assert client.set_health(device="gpu-2", health=health, message="XID 79", taint=taint) == {"ok": True}
            gpu = next(d for d in client.status()["devices"] if d["device"] == "gpu-2")
            seen.append((gpu["health"], [f"{t['key']}={t['value']}:{t['effect']}" for t in gpu["taints"]]))
        return seen

    assert _serve(path, target, talk) == [("Unhealthy", [f"{TAINT_KEY}=XID-79:NoSchedule"]), ("Healthy", [])]
    assert board.republish.is_set()  # the publisher was asked to write the slices again


def test_set_health_on_an_unknown_device_is_refused(tmp_path: Path, target: ControlTarget) -> None:
    path = tmp_path / "control.sock"

    def talk() -> ControlRefusedError:
        with pytest.raises(ControlRefusedError) as caught:
            ControlClient(path=path).set_health(device="gpu-99", health=HealthState.UNHEALTHY)
        return caught.value

    refused = _serve(path, target, talk)
    assert refused.op == "set-health"
    assert refused.reason == "device 'gpu-99' is not published by gpu.example.com on n1"


def test_set_fault_is_acknowledged_installed_and_cleared(tmp_path: Path, target: ControlTarget) -> None:
    path = tmp_path / "control.sock"
    client = ControlClient(path=path)

    def talk() -> tuple[object, object, object]:
        ack = client.set_fault(call=Call.UNPREPARE, fault=CallFault(fail_times=3, error="stuck"))
        installed = client.status()["faults"]["unprepare"]
        client.clear_faults()
        return ack, installed, client.status()["faults"]

    ack, installed, cleared = _serve(path, target, talk)
    assert ack == {"ok": True, "fault": {"delaySeconds": 0.0, "failTimes": 3, "error": "stuck"}}
    assert installed == {"delaySeconds": 0.0, "failTimes": 3, "error": "stuck"}
    assert target.faults.unprepare == CallFault()
    assert cleared == {"prepare": render_call_fault(CallFault()), "unprepare": render_call_fault(CallFault())}


def test_a_refused_fault_leaves_the_faults_alone(tmp_path: Path, target: ControlTarget) -> None:
    path = tmp_path / "control.sock"

    def talk() -> str:
        with pytest.raises(ControlRefusedError) as caught:
            ControlClient(path=path).set_fault(call=Call.PREPARE, fault=CallFault(delay_seconds=-1.0))
        return caught.value.reason

    assert "delaySeconds must be a finite number >= 0" in _serve(path, target, talk)
    assert target.faults == Faults()


def _exchange(path: Path, data: bytes) -> list[bytes]:
    """Send ``data`` on one connection, close the sending side, and read every reply line until the server closes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(path))
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := s.recv(65536):
            received += chunk
    return received.splitlines(keepends=True)


@pytest.mark.parametrize(
    ("data", "replies"),
    [
        (
            b'{"op": "status"}' + b" " * 70_000 + b'\n{"op": "clear-faults"}\n',
            [
                {"ok": False, "error": "the request line is longer than 65536 bytes (70017 read); dropped"},
                {"ok": True},
            ],
        ),
        (
            b"x" * 200_000,
            [{"ok": False, "error": "the request line is longer than 65536 bytes (200000 read); dropped"}],
        ),
        (
            b'{"op": "set-fault", "call": "prepare", "fault": {"delaySeconds": 1e300}}\n{"op": "clear-faults"}',
            [
                {
                    "ok": False,
                    "error": "set-fault: fault: delaySeconds must be a finite number >= 0 and <= 3600, not 1e+300",
                },
                {"ok": True},
            ],
        ),
        (b"[" * 20_000 + b"\n\n", [{"ok": False}, {"ok": False}]),
    ],
    ids=["long-line-then-request", "long-line-without-newline", "delay-beyond-sleep", "deep-json-then-blank"],
)
def test_every_line_gets_one_reply_and_the_connection_stays_open(
    tmp_path: Path, target: ControlTarget, data: bytes, replies: list[dict[str, object]]
) -> None:
    path = tmp_path / "control.sock"
    lines = _serve(path, target, lambda: _exchange(path, data))
    assert all(line.endswith(b"\n") for line in lines)
    answers = [json.loads(line) for line in lines]
    assert [{k: a[k] for k in r} for a, r in zip(answers, replies, strict=True)] == replies
    assert target.faults == Faults()


def test_a_flood_of_garbage_lines_is_answered_line_by_line_but_logged_twice(
    tmp_path: Path, target: ControlTarget, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "control.sock"
    with caplog.at_level(logging.INFO, logger="fakedev.plugin.control"):
        lines = _serve(path, target, lambda: _exchange(path, b"x\n" * 1000 + b'{"op": "clear-faults"}\n'))
    assert len(lines) == 1001 and json.loads(lines[-1]) == {"ok": True}
    assert [(r.getMessage(), getattr(r, "fields", {})) for r in caplog.records] == [
        ("control", {"op": "malformed", "ok": False, "error": "not JSON: Expecting value: line 1 column 1 (char 0)"}),
        ("control", {"op": "clear-faults", "ok": True}),
        ("control: more lines that were not requests", {"lines": 999}),
    ]


def test_fault_cli_refuses_an_overlong_error_before_sending(
    tmp_path: Path, target: ControlTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "control.sock"

    def talk() -> object:
        with pytest.raises(SystemExit) as caught:
            main(["fault", "--socket", str(path), "prepare", "--fail", "1", "--error", "e" * 70_000])
        return caught.value.code

    assert _serve(path, target, talk) == 2
    assert "argument --error: at most 1024 characters, not 70000" in capsys.readouterr().err
    assert target.faults == Faults()


def _absent(tmp_path: Path, _: contextlib.ExitStack) -> Path:
    return tmp_path / "absent.sock"


def _stale(tmp_path: Path, _: contextlib.ExitStack) -> Path:
    """A socket file nobody listens on any more (a killed plugin's)."""
    path = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
    return path


def _silent(tmp_path: Path, stack: contextlib.ExitStack) -> Path:
    """A socket that takes connections (into its backlog) and never answers, like a plugin under SIGSTOP."""
    path = tmp_path / "silent.sock"
    s = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
    s.bind(str(path))
    s.listen(1)
    return path


@pytest.mark.parametrize("make", [_absent, _stale, _silent], ids=["absent", "stale", "silent"])
def test_an_unreachable_socket_raises_the_unreachable_error(
    make: Callable[[Path, contextlib.ExitStack], Path], tmp_path: Path
) -> None:
    with contextlib.ExitStack() as stack:
        path = make(tmp_path, stack)
        with pytest.raises(ControlUnreachableError, match=f"^cannot reach {path}: "):
            ControlClient(path=path, timeout=0.2).status()


# -- a whole plugin, without an API server -------------------------------------------------------------------------


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """PluginApp.start freezes the collector's view of the heap (right for a plugin process, not for pytest's)."""
    yield
    gc.unfreeze()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Socket paths must stay under 108 bytes; pytest's own temporary directories can be longer under xdist."""
    with tempfile.TemporaryDirectory(prefix="fd-") as base:
        yield Path(base)


def _settings(base: Path) -> PluginSettings:
    return PluginSettings(profile="seed-example", node_name="n1", kubelet_root=base / "k", cdi_dir=base / "cdi")


@pytest.mark.usefixtures("unfrozen")
def test_a_plugin_without_api_server_serves_its_sockets_and_no_publisher(short_dir: Path) -> None:
    settings = _settings(short_dir)

    async def scenario() -> tuple[PluginApp, StatusBody, list[str], list[str]]:
        app = await PluginApp.build(settings)
        before = sorted(p.name for p in app.paths.plugin_dir.glob("*.sock"))
        await app.start()
        try:
            status = await asyncio.to_thread(ControlClient(path=app.paths.control_socket).status)
            serving = sorted(p.name for p in app.paths.plugin_dir.glob("*.sock"))
        finally:
            await app.stop()
        return app, status, before, serving

    app, status, before, serving = asyncio.run(scenario())
    assert (app.publisher, app.binding, app.udev, app.link_watcher, app.address_watcher) == (None,) * 5
    assert before == [] and serving == ["control.sock", "dra.sock"]
    assert app.paths.registration_socket.name == "gpu.example.com-reg.sock"
    assert not list(app.paths.plugin_dir.glob("*.sock"))  # stop removed them
    assert status["node"] == "n1" and len(status["devices"]) == 8 and status["sliceGeneration"] == 0
    assert render_status(
        devices=app.devices, server=app.server, state=app.state, faults=app.faults, publisher=None, udev=None
    ) == {k: v for k, v in status.items() if k != "ok"}


def test_a_corrupt_checkpoint_stops_the_build_before_any_socket(short_dir: Path) -> None:
    settings = _settings(short_dir)
    plugin_dir = settings.kubelet_root / "plugins" / "gpu.example.com"
    plugin_dir.mkdir(parents=True)
    (plugin_dir / "checkpoint.json").write_text("{not json")
    with pytest.raises(CheckpointError):
        asyncio.run(PluginApp.build(settings))
    assert not list(settings.kubelet_root.rglob("*.sock"))
