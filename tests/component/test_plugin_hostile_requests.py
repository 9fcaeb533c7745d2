"""A whole plugin (no API server) on its real sockets, asked things no kubelet would ask: what the answers and the
logs look like. Claim UIDs with newlines, 100 KB UIDs, bodies that are not protobuf, on every service."""

from __future__ import annotations

import asyncio
import gc
import logging
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

import grpc
import pytest
from grpc import aio

from fakedev.logs import TextFormatter
from fakedev.plugin.app import PluginApp, PluginSettings
from kubeletapi import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
)

T = TypeVar("T")

FORGED_UID: Final = "u\n12:00:00.000 I plugin.app plugin ready driver=gpu.example.com node=n1"
HUGE_UID: Final = "u" * 100_000
DRA_V1: Final = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
DRA_V1BETA1: Final = "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
CORRUPT: Final = b"\xff\xff\xff"
"""A field tag without an end: no protobuf message parses it."""
BAD_UTF8_CLAIM: Final = b"\x0a\x05\x12\x03\xff\xfe\xfd"
"""claims[0].uid (field 1 → Claim field 2) holding bytes that are not UTF-8."""
BAD_UTF8_ERROR: Final = b"\x12\x02\xff\xfe"
"""RegistrationStatus.error holding bytes that are not UTF-8."""


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


def _with_plugin(base: Path, talk: Callable[[PluginApp], Awaitable[T]]) -> T:
    settings = PluginSettings(profile="seed-example", node_name="n1", kubelet_root=base / "k", cdi_dir=base / "cdi")

    async def scenario() -> T:
        app = await PluginApp.build(settings)
        await app.start()
        try:
            return await talk(app)
        finally:
            await app.stop()

    return asyncio.run(scenario())


async def _call(socket: Path, path: str, body: bytes, *, stream: bool = False) -> tuple[grpc.StatusCode, str, bytes]:
    """One call with a raw body; the status code, details and (first) answer."""
    async with aio.insecure_channel(f"unix:{socket}") as channel:
        # Without serializers the bodies go out as given (the stubs' types cannot say so, hence Any).
        method: Any = channel.unary_stream(path) if stream else channel.unary_unary(path)
        try:
            if stream:
                call = method(body, timeout=5)
                async for first in call:
                    call.cancel()
                    return grpc.StatusCode.OK, "", first
                return grpc.StatusCode.OK, "", b""
            return grpc.StatusCode.OK, "", await method(body, timeout=5)
        except aio.AioRpcError as exc:
            return exc.code(), exc.details() or "", b""


@pytest.mark.usefixtures("unfrozen")
def test_a_uid_with_a_newline_gets_a_claim_error_and_forges_no_log_line(
    short_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    request = dra_v1_pb2.NodePrepareResourcesRequest(
        claims=[
            dra_v1_pb2.Claim(uid=FORGED_UID, namespace="ns", name="c"),
            dra_v1_pb2.Claim(uid="uid-2", namespace="ns", name="c2"),
        ]
    )

    async def talk(app: PluginApp) -> dra_v1_pb2.NodePrepareResourcesResponse:
        async with aio.insecure_channel(f"unix:{app.paths.dra_socket}") as channel:
            return await dra_v1_pb2_grpc.DRAPluginStub(channel).NodePrepareResources(request, timeout=5)

    with caplog.at_level(logging.INFO, logger="fakedev"):
        response = _with_plugin(short_dir, talk)
    assert response.claims[FORGED_UID].error == f"claim uid {FORGED_UID!r} is not a valid UID"
    assert response.claims["uid-2"].error == "no API server configured; cannot read claim ns/c2"
    lines = "\n".join(TextFormatter().format(r) for r in caplog.records).splitlines()
    assert len(lines) == len(caplog.records)
    assert [line.split(" ")[2:5] for line in lines if "plugin ready" in line] == [["plugin.app", "plugin", "ready"]]
    assert not any(FORGED_UID in str(getattr(r, "fields", {})) for r in caplog.records)  # never reached a log call


def _prepare(version: Any, claims: list[tuple[str, str, str]]) -> bytes:
    return bytes(
        version.NodePrepareResourcesRequest(
            claims=[version.Claim(uid=u, namespace=ns, name=n) for u, ns, n in claims]
        ).SerializeToString()
    )


def _unprepare(version: Any, claims: list[tuple[str, str, str]]) -> bytes:
    return bytes(
        version.NodeUnprepareResourcesRequest(
            claims=[version.Claim(uid=u, namespace=ns, name=n) for u, ns, n in claims]
        ).SerializeToString()
    )


CALLS: Final = [
    pytest.param(f"{DRA_V1}/NodePrepareResources", dra_v1_pb2, _prepare, id="v1-prepare"),
    pytest.param(f"{DRA_V1}/NodeUnprepareResources", dra_v1_pb2, _unprepare, id="v1-unprepare"),
    pytest.param(f"{DRA_V1BETA1}/NodePrepareResources", dra_v1beta1_pb2, _prepare, id="v1beta1-prepare"),
    pytest.param(f"{DRA_V1BETA1}/NodeUnprepareResources", dra_v1beta1_pb2, _unprepare, id="v1beta1-unprepare"),
]


@pytest.mark.usefixtures("unfrozen")
@pytest.mark.parametrize(("path", "version", "body"), CALLS)
def test_a_repeated_100kb_uid_is_invalid_argument_with_short_details(
    short_dir: Path, path: str, version: Any, body: Callable[[Any, list[tuple[str, str, str]]], bytes]
) -> None:
    request = body(version, [(HUGE_UID, "ns", "c"), (HUGE_UID, "ns", "c")])
    code, details, _ = _with_plugin(short_dir, lambda app: _call(app.paths.dra_socket, path, request))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, f"claims[1] repeats uid '{'u' * 56}...")


@pytest.mark.usefixtures("unfrozen")
@pytest.mark.parametrize(("path", "version", "body"), CALLS)
def test_a_100kb_uid_gets_a_short_error_of_its_own(
    short_dir: Path, path: str, version: Any, body: Callable[[Any, list[tuple[str, str, str]]], bytes]
) -> None:
    request = body(version, [(HUGE_UID, "ns", "c"), ("uid-2", "ns", "c" * 300)])
    code, _, answer = _with_plugin(short_dir, lambda app: _call(app.paths.dra_socket, path, request))
    response_class = (
        version.NodePrepareResourcesResponse if "/NodePrepare" in path else version.NodeUnprepareResourcesResponse
    )
    errors = {uid: claim.error for uid, claim in response_class.FromString(answer).claims.items()}
    assert code == grpc.StatusCode.OK
    assert errors == {
        HUGE_UID: f"claim uid '{'u' * 56}... (100000 characters) is too long to be valid",
        "uid-2": f"claim name '{'c' * 56}... (300 characters) is too long to be valid",
    }


BODIES: Final = [
    pytest.param(False, f"{DRA_V1}/NodePrepareResources", CORRUPT, id="v1-prepare-corrupt"),
    pytest.param(False, f"{DRA_V1}/NodePrepareResources", BAD_UTF8_CLAIM, id="v1-prepare-bad-utf8"),
    pytest.param(False, f"{DRA_V1}/NodeUnprepareResources", CORRUPT, id="v1-unprepare-corrupt"),
    pytest.param(False, f"{DRA_V1}/NodeUnprepareResources", BAD_UTF8_CLAIM, id="v1-unprepare-bad-utf8"),
    pytest.param(False, f"{DRA_V1BETA1}/NodePrepareResources", CORRUPT, id="v1beta1-prepare-corrupt"),
    pytest.param(False, f"{DRA_V1BETA1}/NodePrepareResources", BAD_UTF8_CLAIM, id="v1beta1-prepare-bad-utf8"),
    pytest.param(False, f"{DRA_V1BETA1}/NodeUnprepareResources", CORRUPT, id="v1beta1-unprepare-corrupt"),
    pytest.param(False, "/v1.DRAResourceHealth/NodeWatchResources", CORRUPT, id="health-v1-corrupt"),
    pytest.param(False, "/v1alpha1.DRAResourceHealth/NodeWatchResources", CORRUPT, id="health-v1alpha1-corrupt"),
    pytest.param(True, "/pluginregistration.Registration/GetInfo", CORRUPT, id="registration-info-corrupt"),
    pytest.param(
        True, "/pluginregistration.Registration/NotifyRegistrationStatus", CORRUPT, id="registration-status-corrupt"
    ),
    pytest.param(
        True,
        "/pluginregistration.Registration/NotifyRegistrationStatus",
        BAD_UTF8_ERROR,
        id="registration-status-bad-utf8",
    ),
]


@pytest.mark.usefixtures("unfrozen")
@pytest.mark.parametrize(("registration", "path", "body"), BODIES)
def test_a_body_that_is_not_protobuf_is_invalid_argument(
    short_dir: Path, registration: bool, path: str, body: bytes
) -> None:
    def talk(app: PluginApp) -> Awaitable[tuple[grpc.StatusCode, str, bytes]]:
        socket = app.paths.registration_socket if registration else app.paths.dra_socket
        return _call(socket, path, body, stream=path.endswith("/NodeWatchResources"))

    code, details, _ = _with_plugin(short_dir, talk)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith(f"{path}: the request body is not a valid protobuf message: Error parsing message")
    assert len(details) < 400
