"""The kubelet wire contract, stated as data and checked against the generated descriptors.

The tables below are the executable form of ``shared/reference/kubelet-contract.md`` §1 (verified against upstream
``staging/src/k8s.io/kubelet/pkg/apis/{dra,dra-health,pluginregistration}/*/api.proto``). A change of a field number,
name, type or presence, of a proto package or of a method path fails here before it can reach a real kubelet.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Final

import pytest
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor

import kubeletapi
from kubeletapi import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    generate,
    health_v1_pb2,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from kubeletapi.errors import GenerationError

# A field as the contract writes it: (number, name, type). Types read like proto source: "string", "int64", "bool",
# "repeated string", "optional string" (proto3 optional = explicit presence), "map<string, X>", a message or enum name.
Field = tuple[int, str, str]

_CLAIM: Final[list[Field]] = [(1, "namespace", "string"), (2, "uid", "string"), (3, "name", "string")]
_DEVICE_V1BETA1: Final[list[Field]] = [
    (1, "request_names", "repeated string"),
    (2, "pool_name", "string"),
    (3, "device_name", "string"),
    (4, "cdi_device_ids", "repeated string"),
]


def _dra_messages(*, device: list[Field]) -> dict[str, list[Field]]:
    return {
        "NodePrepareResourcesRequest": [(1, "claims", "repeated Claim")],
        "NodePrepareResourcesResponse": [(1, "claims", "map<string, NodePrepareResourceResponse>")],
        "NodePrepareResourceResponse": [(1, "devices", "repeated Device"), (2, "error", "string")],
        "Device": device,
        "NodeUnprepareResourcesRequest": [(1, "claims", "repeated Claim")],
        "NodeUnprepareResourcesResponse": [(1, "claims", "map<string, NodeUnprepareResourceResponse>")],
        "NodeUnprepareResourceResponse": [(1, "error", "string")],
        "Claim": _CLAIM,
    }


_HEALTH_MESSAGES: Final[dict[str, list[Field]]] = {
    "NodeWatchResourcesRequest": [],
    "NodeWatchResourcesResponse": [(1, "devices", "repeated DeviceHealth")],
    "DeviceHealth": [
        (1, "device", "DeviceIdentifier"),
        (2, "health", "HealthStatus"),
        (3, "last_updated_time", "int64"),
        (4, "health_check_timeout_seconds", "int64"),
        (5, "message", "string"),
    ],
    "DeviceIdentifier": [(1, "pool_name", "string"), (2, "device_name", "string")],
}

_REGISTRATION_MESSAGES: Final[dict[str, list[Field]]] = {
    "InfoRequest": [],
    "PluginInfo": [
        (1, "type", "string"),
        (2, "name", "string"),
        (3, "endpoint", "string"),
        (4, "supported_versions", "repeated string"),
    ],
    "RegistrationStatus": [(1, "plugin_registered", "bool"), (2, "error", "string")],
    "RegistrationStatusResponse": [],
}


@dataclass(frozen=True, kw_only=True)
class ApiFile:
    """One proto file of the contract: its module, proto package, messages and methods."""

    label: str
    module: ModuleType
    grpc_module: ModuleType
    package: str
    messages: dict[str, list[Field]]
    # Full method path on the wire → (request type, response type, server streaming).
    methods: dict[str, tuple[str, str, bool]]


_DRA_METHODS: Final = {
    "NodePrepareResources": ("NodePrepareResourcesRequest", "NodePrepareResourcesResponse", False),
    "NodeUnprepareResources": ("NodeUnprepareResourcesRequest", "NodeUnprepareResourcesResponse", False),
}
_HEALTH_METHODS: Final = {"NodeWatchResources": ("NodeWatchResourcesRequest", "NodeWatchResourcesResponse", True)}

CONTRACT: Final = (
    ApiFile(
        label="pluginregistration.v1",
        module=pluginregistration_v1_pb2,
        grpc_module=pluginregistration_v1_pb2_grpc,
        package="pluginregistration",
        messages=_REGISTRATION_MESSAGES,
        methods={
            "/pluginregistration.Registration/GetInfo": ("InfoRequest", "PluginInfo", False),
            "/pluginregistration.Registration/NotifyRegistrationStatus": (
                "RegistrationStatus",
                "RegistrationStatusResponse",
                False,
            ),
        },
    ),
    ApiFile(
        label="dra.v1",
        module=dra_v1_pb2,
        grpc_module=dra_v1_pb2_grpc,
        package="k8s.io.kubelet.pkg.apis.dra.v1",
        messages=_dra_messages(device=[*_DEVICE_V1BETA1, (5, "share_id", "optional string")]),
        methods={f"/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/{name}": sig for name, sig in _DRA_METHODS.items()},
    ),
    ApiFile(
        label="dra.v1beta1",
        module=dra_v1beta1_pb2,
        grpc_module=dra_v1beta1_pb2_grpc,
        package="k8s.io.kubelet.pkg.apis.dra.v1beta1",
        messages=_dra_messages(device=_DEVICE_V1BETA1),
        methods={f"/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/{name}": sig for name, sig in _DRA_METHODS.items()},
    ),
    ApiFile(
        label="health.v1",
        module=health_v1_pb2,
        grpc_module=health_v1_pb2_grpc,
        package="v1",
        messages=_HEALTH_MESSAGES,
        methods={f"/v1.DRAResourceHealth/{name}": sig for name, sig in _HEALTH_METHODS.items()},
    ),
    ApiFile(
        label="health.v1alpha1",
        module=health_v1alpha1_pb2,
        grpc_module=health_v1alpha1_pb2_grpc,
        package="v1alpha1",
        messages=_HEALTH_MESSAGES,
        methods={f"/v1alpha1.DRAResourceHealth/{name}": sig for name, sig in _HEALTH_METHODS.items()},
    ),
)

MESSAGE_CASES: Final = [
    pytest.param(api, name, fields, id=f"{api.label}/{name}")
    for api in CONTRACT
    for name, fields in api.messages.items()
]
METHOD_CASES: Final = [
    pytest.param(api, path, signature, id=path) for api in CONTRACT for path, signature in api.methods.items()
]
API_CASES: Final = [pytest.param(api, id=api.label) for api in CONTRACT]

_SCALAR_NAMES: Final = {
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_INT64: "int64",
    FieldDescriptor.TYPE_BOOL: "bool",
}


def _element_type(field: FieldDescriptor) -> str:
    if field.message_type is not None:
        return field.message_type.name
    if field.enum_type is not None:
        return field.enum_type.name
    # Any other scalar type is outside the contract; name it by number so the mismatch is visible in the diff.
    return _SCALAR_NAMES.get(field.type, f"type#{field.type}")


def describe_field(field: FieldDescriptor) -> Field:
    """A descriptor field in the contract's notation."""
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
        return field.number, field.name, f"map<{_element_type(key)}, {_element_type(value)}>"
    kind = _element_type(field)
    if field.is_repeated:
        return field.number, field.name, f"repeated {kind}"
    # Message fields always have presence; for scalars presence means proto3 `optional`.
    if field.has_presence and field.type != FieldDescriptor.TYPE_MESSAGE:
        return field.number, field.name, f"optional {kind}"
    return field.number, field.name, kind


def _file(api: ApiFile) -> FileDescriptor:
    descriptor: FileDescriptor = api.module.DESCRIPTOR
    return descriptor


def _message(api: ApiFile, name: str) -> Descriptor:
    return _file(api).message_types_by_name[name]


@pytest.mark.parametrize(("api", "name", "fields"), MESSAGE_CASES)
def test_message_fields_match_the_contract(api: ApiFile, name: str, fields: list[Field]) -> None:
    assert [describe_field(field) for field in _message(api, name).fields] == fields


@pytest.mark.parametrize("api", API_CASES)
def test_proto_package_is_upstreams(api: ApiFile) -> None:
    assert _file(api).package == api.package


@pytest.mark.parametrize("api", API_CASES)
def test_file_defines_exactly_the_contract_messages(api: ApiFile) -> None:
    assert set(_file(api).message_types_by_name) == set(api.messages)


@pytest.mark.parametrize(("api", "path", "signature"), METHOD_CASES)
def test_method_path_and_signature_match_the_contract(
    api: ApiFile, path: str, signature: tuple[str, str, bool]
) -> None:
    _, service_name, method_name = path.split("/")
    service = _file(api).services_by_name[service_name.rsplit(".", 1)[1]]
    method = service.methods_by_name[method_name]
    request, response, server_streaming = signature
    assert kubeletapi.method_path(service=service.full_name, method=method.name) == path
    assert (method.input_type.name, method.output_type.name) == (request, response)
    assert (method.client_streaming, method.server_streaming) == (False, server_streaming)


@pytest.mark.parametrize("api", API_CASES)
def test_file_defines_exactly_the_contract_methods(api: ApiFile) -> None:
    paths = {
        kubeletapi.method_path(service=service.full_name, method=method.name)
        for service in _file(api).services_by_name.values()
        for method in service.methods
    }
    assert paths == set(api.methods)


class _RecordingChannel:
    """Stands in for grpc.Channel to capture the paths the generated client stubs would put on the wire."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def _record(self, path: str, **_options: object) -> Callable[..., None]:
        self.paths.append(path)
        return lambda *args, **kwargs: None

    unary_unary = _record
    unary_stream = _record
    stream_unary = _record
    stream_stream = _record


@pytest.mark.parametrize("api", API_CASES)
def test_generated_client_stubs_call_the_contract_paths(api: ApiFile) -> None:
    channel = _RecordingChannel()
    for service in _file(api).services_by_name.values():
        getattr(api.grpc_module, f"{service.name}Stub")(channel)
    assert sorted(channel.paths) == sorted(api.methods)


@pytest.mark.parametrize("module", [health_v1_pb2, health_v1alpha1_pb2], ids=["health.v1", "health.v1alpha1"])
def test_health_status_enum_values(module: ModuleType) -> None:
    enum = module.DESCRIPTOR.enum_types_by_name["HealthStatus"]
    assert [(value.name, value.number) for value in enum.values] == [("UNKNOWN", 0), ("HEALTHY", 1), ("UNHEALTHY", 2)]


def test_share_id_has_presence_in_v1() -> None:
    field = dra_v1_pb2.Device.DESCRIPTOR.fields_by_name["share_id"]
    assert field.has_presence
    assert not dra_v1_pb2.Device().HasField("share_id")
    assert dra_v1_pb2.Device(share_id="").HasField("share_id")


def test_share_id_unset_and_empty_differ_on_the_wire() -> None:
    unset = dra_v1_pb2.Device(device_name="gpu-0").SerializeToString()
    empty = dra_v1_pb2.Device(device_name="gpu-0", share_id="").SerializeToString()
    assert unset != empty
    assert dra_v1_pb2.Device.FromString(empty).HasField("share_id")
    assert not dra_v1_pb2.Device.FromString(unset).HasField("share_id")


def test_v1beta1_device_has_no_share_id() -> None:
    descriptor = dra_v1beta1_pb2.Device.DESCRIPTOR
    assert "share_id" not in descriptor.fields_by_name
    assert 5 not in descriptor.fields_by_number


@pytest.mark.parametrize(
    ("constant", "module", "service"),
    [
        (kubeletapi.REGISTRATION_SERVICE, pluginregistration_v1_pb2, "Registration"),
        (kubeletapi.DRA_V1_SERVICE, dra_v1_pb2, "DRAPlugin"),
        (kubeletapi.DRA_V1BETA1_SERVICE, dra_v1beta1_pb2, "DRAPlugin"),
        (kubeletapi.HEALTH_V1_SERVICE, health_v1_pb2, "DRAResourceHealth"),
        (kubeletapi.HEALTH_V1ALPHA1_SERVICE, health_v1alpha1_pb2, "DRAResourceHealth"),
    ],
    ids=["registration", "dra.v1", "dra.v1beta1", "health.v1", "health.v1alpha1"],
)
def test_service_name_constants_match_the_descriptors(constant: str, module: ModuleType, service: str) -> None:
    assert module.DESCRIPTOR.services_by_name[service].full_name == constant


def test_advertised_versions_prefer_v1_and_map_to_their_services() -> None:
    assert kubeletapi.DRA_PLUGIN_TYPE == "DRAPlugin"
    assert kubeletapi.SUPPORTED_VERSIONS == (
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    )
    assert dict(kubeletapi.SERVICE_FOR_VERSION) == {
        "v1.DRAPlugin": "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
        "v1beta1.DRAPlugin": "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
        "v1.DRAResourceHealth": "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth": "v1alpha1.DRAResourceHealth",
    }


@pytest.mark.parametrize(
    "symbol",
    [
        "k8s.io.kubelet.pkg.apis.dra.v1.Device",
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.Device",
        "v1.DeviceHealth",
        "v1alpha1.DeviceHealth",
        "pluginregistration.PluginInfo",
    ],
    ids=str,
)
def test_same_named_messages_coexist_in_one_descriptor_pool(symbol: str) -> None:
    assert descriptor_pool.Default().FindMessageTypeByName(symbol).full_name == symbol


def test_all_modules_import_together_in_a_fresh_interpreter() -> None:
    # A fresh process, because in this one the modules may have been imported in a friendlier order already; the
    # emulator imports all of them, so a descriptor-pool clash must show up here and not there.
    modules = sorted(name for api in CONTRACT for name in (api.module.__name__, api.grpc_module.__name__))
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    # Run from the directory holding the package under test (`-c` puts the cwd first on sys.path), so the child
    # imports this tree and not some other installed copy.
    root = Path(kubeletapi.__file__).resolve().parent.parent
    for order in (modules, modules[::-1]):
        result = subprocess.run(
            [sys.executable, "-W", "error", "-c", code, *order], cwd=root, capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stderr


def test_committed_modules_match_the_protos() -> None:
    drifts = generate.check()
    assert drifts == (), "\n".join(drift.summary() for drift in drifts)


def test_generation_is_byte_identical_across_runs() -> None:
    assert generate.compile_protos() == generate.compile_protos()


@pytest.mark.parametrize(
    ("expected", "committed", "summaries"),
    [
        ({"a_pb2.py": b"x\n"}, {"a_pb2.py": b"x\n"}, []),
        ({"a_pb2.py": b"x\ny\n"}, {"a_pb2.py": b"x\nz\nw\n"}, ["changed  a_pb2.py (+1 -2 lines)"]),
        ({"a_pb2.py": b"x\n"}, {}, ["missing  a_pb2.py (the protos produce it, it is not committed)"]),
        ({}, {"old_pb2.py": b"x\n"}, ["stale    old_pb2.py (committed, but no proto produces it any more)"]),
    ],
    ids=["in-sync", "changed", "missing", "stale"],
)
def test_drift_is_reported_per_file(
    expected: dict[str, bytes], committed: dict[str, bytes], summaries: list[str]
) -> None:
    drifts = generate.compute_drift(expected=expected, committed=committed)
    assert [drift.summary() for drift in drifts] == summaries


@pytest.mark.parametrize(
    ("name", "generated"),
    [
        ("dra_v1_pb2.py", True),
        ("dra_v1_pb2.pyi", True),
        ("dra_v1_pb2_grpc.py", True),
        ("dra_v1_pb2_grpc.pyi", True),
        ("generate.py", False),
        ("__init__.py", False),
        ("errors.py", False),
    ],
    ids=str,
)
def test_only_generated_names_are_owned_by_the_generator(name: str, generated: bool) -> None:
    assert generate.is_generated_name(name) is generated


def test_check_command_exits_zero_when_in_sync(capsys: pytest.CaptureFixture[str]) -> None:
    assert generate.main(["--check"]) == 0
    assert "match the protos" in capsys.readouterr().out


def test_a_directory_without_protos_is_refused(tmp_path: Path) -> None:
    with pytest.raises(GenerationError, match=r"no \.proto files in"):
        generate.compile_protos(proto_dir=tmp_path)


def test_a_broken_proto_fails_with_protocs_complaint(tmp_path: Path) -> None:
    (tmp_path / "broken.proto").write_text('syntax = "proto3";\nmessage Broken { string field = 0; }\n')
    with pytest.raises(GenerationError, match=r"broken\.proto.*(?i:field numbers must be positive)"):
        generate.compile_protos(proto_dir=tmp_path)
