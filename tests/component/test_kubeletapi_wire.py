"""The generated kubeletapi stubs on a real Unix socket: every field survives the wire, on upstream's method paths.

One gRPC server serves Registration, DRAPlugin v1 and v1beta1 and both health versions, the way a real DRA plugin
does on one socket; one client channel calls all of them, the way the kubelet does (one connection per endpoint).
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc
import pytest

import kubeletapi
from kubeletapi import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)

# Unix socket paths must stay below 108 bytes (sun_path); keep a margin.
_MAX_SOCKET_PATH: Final = 100
_CALL_TIMEOUT_S: Final = 5.0

CLAIMS_V1: Final = [
    dra_v1_pb2.Claim(namespace="ns-a", uid="uid-1", name="claim-1"),
    dra_v1_pb2.Claim(namespace="ns-b", uid="uid-2", name="claim-2"),
]

PREPARE_V1: Final = dra_v1_pb2.NodePrepareResourcesResponse(
    claims={
        "uid-1": dra_v1_pb2.NodePrepareResourceResponse(
            devices=[
                dra_v1_pb2.Device(
                    request_names=["gpu", "nic"],
                    pool_name="node-a",
                    device_name="gpu-0",
                    cdi_device_ids=["example.com/gpu=uid-1-gpu-0", "example.com/metadata=uid-1_gpu"],
                    share_id="share-7",
                ),
                dra_v1_pb2.Device(pool_name="node-a", device_name="gpu-1", share_id=""),
                dra_v1_pb2.Device(pool_name="node-a", device_name="gpu-2"),
            ]
        ),
        "uid-2": dra_v1_pb2.NodePrepareResourceResponse(error="claim uid-2: unknown device gpu-9"),
    }
)

UNPREPARE_V1: Final = dra_v1_pb2.NodeUnprepareResourcesResponse(
    claims={
        "uid-1": dra_v1_pb2.NodeUnprepareResourceResponse(),
        "uid-2": dra_v1_pb2.NodeUnprepareResourceResponse(error="claim uid-2: still in use"),
    }
)

PREPARE_V1BETA1: Final = dra_v1beta1_pb2.NodePrepareResourcesResponse(
    claims={
        "uid-3": dra_v1beta1_pb2.NodePrepareResourceResponse(
            devices=[
                dra_v1beta1_pb2.Device(
                    request_names=["gpu"],
                    pool_name="node-a",
                    device_name="gpu-3",
                    cdi_device_ids=["example.com/gpu=uid-3-gpu-3"],
                )
            ]
        )
    }
)

PLUGIN_INFO: Final = pluginregistration_v1_pb2.PluginInfo(
    type=kubeletapi.DRA_PLUGIN_TYPE,
    name="gpu.example.com",
    endpoint="/var/lib/kubelet/plugins/gpu.example.com/dra.sock",
    supported_versions=list(kubeletapi.SUPPORTED_VERSIONS),
)


def _health_reports(module: Any) -> list[Any]:
    """Two reports covering every field and every enum value, built from the given health module."""
    return [
        module.NodeWatchResourcesResponse(
            devices=[
                module.DeviceHealth(
                    device=module.DeviceIdentifier(pool_name="node-a", device_name="gpu-0"),
                    health=module.HEALTHY,
                    last_updated_time=1_700_000_000,
                    health_check_timeout_seconds=45,
                    message="ok",
                ),
                module.DeviceHealth(
                    device=module.DeviceIdentifier(pool_name="node-a", device_name="gpu-1"),
                    health=module.UNKNOWN,
                    last_updated_time=1_700_000_001,
                    health_check_timeout_seconds=-1,
                ),
            ]
        ),
        module.NodeWatchResourcesResponse(
            devices=[
                module.DeviceHealth(
                    device=module.DeviceIdentifier(pool_name="node-a", device_name="gpu-0"),
                    health=module.UNHEALTHY,
                    last_updated_time=1_700_000_002,
                    message="XID 79: fell off the bus",
                )
            ]
        ),
    ]


HEALTH_V1_REPORTS: Final = _health_reports(health_v1_pb2)
HEALTH_V1ALPHA1_REPORTS: Final = _health_reports(health_v1alpha1_pb2)


@dataclass(kw_only=True)
class Received:
    """What the servicers were sent, so the test can compare it with what the client sent."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: list[Any] = field(default_factory=list)

    def add(self, request: Any) -> None:
        with self.lock:
            self.requests.append(request)


# Method names are fixed by the generated servicers (upstream's CamelCase), hence the N802 exemptions.
class Registration(pluginregistration_v1_pb2_grpc.RegistrationServicer):
    def __init__(self, *, received: Received) -> None:
        self.received = received

    def GetInfo(
        self, request: pluginregistration_v1_pb2.InfoRequest, context: grpc.ServicerContext
    ) -> pluginregistration_v1_pb2.PluginInfo:
        self.received.add(request)
        return PLUGIN_INFO

    def NotifyRegistrationStatus(
        self, request: pluginregistration_v1_pb2.RegistrationStatus, context: grpc.ServicerContext
    ) -> pluginregistration_v1_pb2.RegistrationStatusResponse:
        self.received.add(request)
        return pluginregistration_v1_pb2.RegistrationStatusResponse()


class DraV1(dra_v1_pb2_grpc.DRAPluginServicer):
    def __init__(self, *, received: Received) -> None:
        self.received = received

    def NodePrepareResources(
        self, request: dra_v1_pb2.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodePrepareResourcesResponse:
        self.received.add(request)
        return PREPARE_V1

    def NodeUnprepareResources(
        self, request: dra_v1_pb2.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodeUnprepareResourcesResponse:
        self.received.add(request)
        return UNPREPARE_V1


class DraV1beta1(dra_v1beta1_pb2_grpc.DRAPluginServicer):
    def __init__(self, *, received: Received) -> None:
        self.received = received

    def NodePrepareResources(
        self, request: dra_v1beta1_pb2.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1beta1_pb2.NodePrepareResourcesResponse:
        self.received.add(request)
        return PREPARE_V1BETA1

    def NodeUnprepareResources(
        self, request: dra_v1beta1_pb2.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1beta1_pb2.NodeUnprepareResourcesResponse:
        self.received.add(request)
        return dra_v1beta1_pb2.NodeUnprepareResourcesResponse(
            claims={claim.uid: dra_v1beta1_pb2.NodeUnprepareResourceResponse() for claim in request.claims}
        )


class HealthV1(health_v1_pb2_grpc.DRAResourceHealthServicer):
    def NodeWatchResources(
        self, request: health_v1_pb2.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[health_v1_pb2.NodeWatchResourcesResponse]:
        yield from HEALTH_V1_REPORTS


class HealthV1alpha1(health_v1alpha1_pb2_grpc.DRAResourceHealthServicer):
    def NodeWatchResources(
        self, request: health_v1alpha1_pb2.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[health_v1alpha1_pb2.NodeWatchResourcesResponse]:
        yield from HEALTH_V1ALPHA1_REPORTS


@dataclass(frozen=True, kw_only=True)
class Plugin:
    """A served socket, a client channel to it, and what the servicers received."""

    socket: Path
    channel: Any
    received: Received


@pytest.fixture
def socket_dir(tmp_path: Path) -> Iterator[Path]:
    if len(str(tmp_path / "dra.sock")) <= _MAX_SOCKET_PATH:
        yield tmp_path
        return
    # A deep --basetemp would overflow sun_path; fall back to a short private directory.
    with tempfile.TemporaryDirectory(prefix="kapi-", dir="/tmp") as short:
        yield Path(short)


@pytest.fixture
def plugin(socket_dir: Path) -> Iterator[Plugin]:
    received = Received()
    socket = socket_dir / "dra.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server(Registration(received=received), server)
    dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(DraV1(received=received), server)
    dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(DraV1beta1(received=received), server)
    health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(HealthV1(), server)
    health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(HealthV1alpha1(), server)
    assert server.add_insecure_port(f"unix://{socket}") != 0, f"cannot bind {socket}"
    server.start()
    channel = grpc.insecure_channel(f"unix://{socket}")
    try:
        grpc.channel_ready_future(channel).result(timeout=_CALL_TIMEOUT_S)
        yield Plugin(socket=socket, channel=channel, received=received)
    finally:
        channel.close()
        server.stop(grace=None).wait()


def test_server_listens_on_the_unix_socket(plugin: Plugin) -> None:
    assert plugin.socket.is_socket()


def test_registration_round_trips(plugin: Plugin) -> None:
    stub = pluginregistration_v1_pb2_grpc.RegistrationStub(plugin.channel)
    info = stub.GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=_CALL_TIMEOUT_S)
    status = pluginregistration_v1_pb2.RegistrationStatus(plugin_registered=False, error="driver already registered")
    reply = stub.NotifyRegistrationStatus(status, timeout=_CALL_TIMEOUT_S)
    assert info == PLUGIN_INFO
    assert reply == pluginregistration_v1_pb2.RegistrationStatusResponse()
    assert plugin.received.requests == [pluginregistration_v1_pb2.InfoRequest(), status]


def test_v1_prepare_round_trips_every_field(plugin: Plugin) -> None:
    request = dra_v1_pb2.NodePrepareResourcesRequest(claims=CLAIMS_V1)
    response = dra_v1_pb2_grpc.DRAPluginStub(plugin.channel).NodePrepareResources(request, timeout=_CALL_TIMEOUT_S)
    assert response == PREPARE_V1
    assert plugin.received.requests == [request]


def test_v1_share_id_keeps_unset_apart_from_empty(plugin: Plugin) -> None:
    request = dra_v1_pb2.NodePrepareResourcesRequest(claims=CLAIMS_V1)
    response = dra_v1_pb2_grpc.DRAPluginStub(plugin.channel).NodePrepareResources(request, timeout=_CALL_TIMEOUT_S)
    devices = response.claims["uid-1"].devices
    assert [(device.HasField("share_id"), device.share_id) for device in devices] == [
        (True, "share-7"),
        (True, ""),
        (False, ""),
    ]


def test_v1_unprepare_round_trips(plugin: Plugin) -> None:
    request = dra_v1_pb2.NodeUnprepareResourcesRequest(claims=CLAIMS_V1)
    response = dra_v1_pb2_grpc.DRAPluginStub(plugin.channel).NodeUnprepareResources(request, timeout=_CALL_TIMEOUT_S)
    assert response == UNPREPARE_V1
    assert plugin.received.requests == [request]


def test_v1beta1_is_served_next_to_v1(plugin: Plugin) -> None:
    request = dra_v1beta1_pb2.NodePrepareResourcesRequest(
        claims=[dra_v1beta1_pb2.Claim(namespace="ns-c", uid="uid-3", name="claim-3")]
    )
    stub = dra_v1beta1_pb2_grpc.DRAPluginStub(plugin.channel)
    prepared = stub.NodePrepareResources(request, timeout=_CALL_TIMEOUT_S)
    unprepared = stub.NodeUnprepareResources(
        dra_v1beta1_pb2.NodeUnprepareResourcesRequest(claims=request.claims), timeout=_CALL_TIMEOUT_S
    )
    assert prepared == PREPARE_V1BETA1
    assert list(unprepared.claims) == ["uid-3"]
    assert plugin.received.requests[0] == request


@pytest.mark.parametrize(
    ("stub_class", "request_message", "expected"),
    [
        (health_v1_pb2_grpc.DRAResourceHealthStub, health_v1_pb2.NodeWatchResourcesRequest(), HEALTH_V1_REPORTS),
        (
            health_v1alpha1_pb2_grpc.DRAResourceHealthStub,
            health_v1alpha1_pb2.NodeWatchResourcesRequest(),
            HEALTH_V1ALPHA1_REPORTS,
        ),
    ],
    ids=["v1", "v1alpha1"],
)
def test_health_stream_round_trips_every_field(
    plugin: Plugin, stub_class: Any, request_message: Any, expected: list[Any]
) -> None:
    stream = stub_class(plugin.channel).NodeWatchResources(request_message, timeout=_CALL_TIMEOUT_S)
    assert list(stream) == expected


# Raw calls on the literal upstream paths, bypassing the generated client stubs: the server must answer exactly there.
WIRE_CALLS: Final = [
    pytest.param(
        "/pluginregistration.Registration/GetInfo",
        pluginregistration_v1_pb2.InfoRequest(),
        pluginregistration_v1_pb2.PluginInfo,
        [PLUGIN_INFO],
        id="registration-GetInfo",
    ),
    pytest.param(
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
        dra_v1_pb2.NodePrepareResourcesRequest(claims=CLAIMS_V1),
        dra_v1_pb2.NodePrepareResourcesResponse,
        [PREPARE_V1],
        id="dra.v1-NodePrepareResources",
    ),
    pytest.param(
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
        dra_v1_pb2.NodeUnprepareResourcesRequest(claims=CLAIMS_V1),
        dra_v1_pb2.NodeUnprepareResourcesResponse,
        [UNPREPARE_V1],
        id="dra.v1-NodeUnprepareResources",
    ),
    pytest.param(
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
        dra_v1beta1_pb2.NodePrepareResourcesRequest(),
        dra_v1beta1_pb2.NodePrepareResourcesResponse,
        [PREPARE_V1BETA1],
        id="dra.v1beta1-NodePrepareResources",
    ),
    pytest.param(
        "/v1.DRAResourceHealth/NodeWatchResources",
        health_v1_pb2.NodeWatchResourcesRequest(),
        health_v1_pb2.NodeWatchResourcesResponse,
        HEALTH_V1_REPORTS,
        id="health.v1-NodeWatchResources",
    ),
    pytest.param(
        "/v1alpha1.DRAResourceHealth/NodeWatchResources",
        health_v1alpha1_pb2.NodeWatchResourcesRequest(),
        health_v1alpha1_pb2.NodeWatchResourcesResponse,
        HEALTH_V1ALPHA1_REPORTS,
        id="health.v1alpha1-NodeWatchResources",
    ),
]


@pytest.mark.parametrize(("path", "request_message", "response_class", "expected"), WIRE_CALLS)
def test_upstream_method_paths_are_served(
    plugin: Plugin, path: str, request_message: Any, response_class: Any, expected: list[Any]
) -> None:
    options = {
        "request_serializer": type(request_message).SerializeToString,
        "response_deserializer": response_class.FromString,
    }
    streaming = path.endswith("/NodeWatchResources")
    call = plugin.channel.unary_stream(path, **options) if streaming else plugin.channel.unary_unary(path, **options)
    answer = call(request_message, timeout=_CALL_TIMEOUT_S)
    assert (list(answer) if streaming else [answer]) == expected
