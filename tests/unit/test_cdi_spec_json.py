"""The CDI spec model's JSON form: camelCase keys, omitted empties, strict decoding with JSON paths."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from cdi import (
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    IntelRdt,
    Mount,
    NetDevice,
    Spec,
    SpecError,
    SpecFormat,
    parse_spec_text,
)

FULL_DOCUMENT: dict[str, Any] = {
    "cdiVersion": "1.1.0",
    "kind": "fake.example.com/gpu",
    "annotations": {"fake.example.com/node": "n1"},
    "devices": [
        {
            "name": "uid1_gpu0",
            "annotations": {"claim": "c1"},
            "containerEdits": {
                "env": ["FAKE_VISIBLE_DEVICES=GPU-0"],
                "deviceNodes": [
                    {
                        "path": "/dev/fake0",
                        "hostPath": "/tmp/dev/fake0",
                        "type": "c",
                        "major": 240,
                        "minor": 0,
                        "fileMode": 438,
                        "permissions": "rw",
                        "uid": 0,
                        "gid": 44,
                    }
                ],
                "netDevices": [{"hostInterfaceName": "fk0v1", "name": "net1"}],
                "hooks": [
                    {
                        "hookName": "createContainer",
                        "path": "/bin/hook",
                        "args": ["hook", "x"],
                        "env": ["A=1"],
                        "timeout": 5,
                    }
                ],
                "mounts": [
                    {
                        "hostPath": "/tmp/meta",
                        "containerPath": "/var/run/meta",
                        "options": ["ro", "bind"],
                        "type": "bind",
                    }
                ],
                "intelRdt": {
                    "closID": "c1",
                    "l3CacheSchema": "L3:0=f",
                    "schemata": ["MB:0=50"],
                    "enableMonitoring": True,
                },
                "additionalGids": [44],
            },
        }
    ],
    "containerEdits": {"env": ["FAKE_DRIVER=1"]},
}

FULL_SPEC = Spec(
    version="1.1.0",
    kind="fake.example.com/gpu",
    annotations={"fake.example.com/node": "n1"},
    devices=(
        Device(
            name="uid1_gpu0",
            annotations={"claim": "c1"},
            container_edits=ContainerEdits(
                env=("FAKE_VISIBLE_DEVICES=GPU-0",),
                device_nodes=(
                    DeviceNode(
                        path="/dev/fake0",
                        host_path="/tmp/dev/fake0",
                        type="c",
                        major=240,
                        minor=0,
                        file_mode=0o666,
                        permissions="rw",
                        uid=0,
                        gid=44,
                    ),
                ),
                net_devices=(NetDevice(host_interface_name="fk0v1", name="net1"),),
                hooks=(
                    Hook(hook_name="createContainer", path="/bin/hook", args=("hook", "x"), env=("A=1",), timeout=5),
                ),
                mounts=(
                    Mount(host_path="/tmp/meta", container_path="/var/run/meta", options=("ro", "bind"), type="bind"),
                ),
                intel_rdt=IntelRdt(
                    clos_id="c1", l3_cache_schema="L3:0=f", schemata=("MB:0=50",), enable_monitoring=True
                ),
                additional_gids=(44,),
            ),
        ),
    ),
    container_edits=ContainerEdits(env=("FAKE_DRIVER=1",)),
)


def test_from_json_builds_the_typed_model() -> None:
    assert Spec.from_json(FULL_DOCUMENT) == FULL_SPEC


def test_to_json_uses_the_cdi_camel_case_keys() -> None:
    assert FULL_SPEC.to_json() == FULL_DOCUMENT


def test_to_json_leaves_out_empty_optional_fields() -> None:
    spec = Spec(version="0.5.0", kind="a.com/b", devices=(Device(name="d", container_edits=ContainerEdits()),))

    assert spec.to_json() == {
        "cdiVersion": "0.5.0",
        "kind": "a.com/b",
        "devices": [{"name": "d", "containerEdits": {}}],
    }


def test_null_fields_count_as_absent() -> None:
    document = {
        "cdiVersion": "0.5.0",
        "kind": "a.com/b",
        "annotations": None,
        "devices": [{"name": "d", "containerEdits": {"env": None, "mounts": None}}],
    }

    spec = Spec.from_json(document)

    assert spec.devices[0].container_edits == ContainerEdits()


def _with(path: list[str | int], value: object) -> dict[str, Any]:
    """FULL_DOCUMENT with one more (or replaced) entry at ``path``."""
    document = copy.deepcopy(FULL_DOCUMENT)
    target: Any = document
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return document


UNKNOWN_FIELD_CASES = [
    pytest.param(["extra"], "$.extra", id="spec"),
    pytest.param(["devices", 0, "id"], "$.devices[0].id", id="device"),
    pytest.param(["devices", 0, "containerEdits", "devices"], "$.devices[0].containerEdits.devices", id="edits"),
    pytest.param(
        ["devices", 0, "containerEdits", "deviceNodes", 0, "mode"],
        "$.devices[0].containerEdits.deviceNodes[0].mode",
        id="device-node",
    ),
    pytest.param(
        ["devices", 0, "containerEdits", "mounts", 0, "source"],
        "$.devices[0].containerEdits.mounts[0].source",
        id="mount",
    ),
    pytest.param(
        ["devices", 0, "containerEdits", "hooks", 0, "name"], "$.devices[0].containerEdits.hooks[0].name", id="hook"
    ),
    pytest.param(
        ["devices", 0, "containerEdits", "netDevices", 0, "mac"],
        "$.devices[0].containerEdits.netDevices[0].mac",
        id="net-device",
    ),
    pytest.param(
        ["devices", 0, "containerEdits", "intelRdt", "enableCMT"],
        "$.devices[0].containerEdits.intelRdt.enableCMT",
        id="intel-rdt-dropped-field",
    ),
    pytest.param(["containerEdits", "Env"], "$.containerEdits.Env", id="wrong-case"),
]


@pytest.mark.parametrize(("path", "json_path"), UNKNOWN_FIELD_CASES)
def test_unknown_fields_are_rejected_at_their_json_path(path: list[str | int], json_path: str) -> None:
    with pytest.raises(SpecError) as caught:
        Spec.from_json(_with(path, "x"), source="/cdi/fake.json")

    assert caught.value.problems[0].json_path == json_path
    assert str(caught.value).startswith(f"/cdi/fake.json: {json_path}: unknown field")


TYPE_CASES = [
    pytest.param(["cdiVersion"], 1.1, "$.cdiVersion", id="version-number"),
    pytest.param(["devices"], {}, "$.devices", id="devices-object"),
    pytest.param(["devices", 0, "containerEdits", "env"], "A=1", "$.devices[0].containerEdits.env", id="env-string"),
    pytest.param(["devices", 0, "containerEdits", "env", 0], 5, "$.devices[0].containerEdits.env[0]", id="env-item"),
    pytest.param(
        ["devices", 0, "containerEdits", "deviceNodes", 0, "major"],
        "240",
        "$.devices[0].containerEdits.deviceNodes[0].major",
        id="major-string",
    ),
    pytest.param(
        ["devices", 0, "containerEdits", "deviceNodes", 0, "uid"],
        True,
        "$.devices[0].containerEdits.deviceNodes[0].uid",
        id="uid-bool",
    ),
    pytest.param(
        ["devices", 0, "containerEdits", "intelRdt", "enableMonitoring"],
        "yes",
        "$.devices[0].containerEdits.intelRdt.enableMonitoring",
        id="bool-string",
    ),
    pytest.param(["annotations"], {"a": 1}, "$.annotations", id="annotation-value"),
]


@pytest.mark.parametrize(("path", "value", "json_path"), TYPE_CASES)
def test_wrong_types_are_rejected_at_their_json_path(path: list[str | int], value: object, json_path: str) -> None:
    with pytest.raises(SpecError) as caught:
        Spec.from_json(_with(path, value))

    assert caught.value.problems[0].json_path == json_path


@pytest.mark.parametrize(
    ("path", "json_path"),
    [
        pytest.param([], "$.kind", id="kind"),
        pytest.param(["devices", 0], "$.devices[0].name", id="device-name"),
        pytest.param(
            ["devices", 0, "containerEdits", "mounts", 0],
            "$.devices[0].containerEdits.mounts[0].containerPath",
            id="mount-container-path",
        ),
    ],
)
def test_missing_required_fields_are_named(path: list[str | int], json_path: str) -> None:
    document = copy.deepcopy(FULL_DOCUMENT)
    target: Any = document
    for step in path:
        target = target[step]
    del target[json_path.rsplit(".", 1)[1]]

    with pytest.raises(SpecError, match="required field is missing") as caught:
        Spec.from_json(document)

    assert caught.value.problems[0].json_path == json_path


def test_yaml_text_parses_like_json() -> None:
    text = "cdiVersion: 0.5.0\nkind: a.com/b\ndevices:\n- name: d\n  containerEdits:\n    env: [A=1]\n"

    spec = parse_spec_text(text, source="s.yaml", fmt="yaml")

    assert spec.devices[0].container_edits.env == ("A=1",)


def test_json_text_round_trips() -> None:
    assert parse_spec_text(json.dumps(FULL_DOCUMENT), source="s.json", fmt="json") == FULL_SPEC


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        pytest.param('{"kind": "a.com/b", "kind": "a.com/c"}', "json", id="json"),
        pytest.param("kind: a.com/b\nkind: a.com/c\n", "yaml", id="yaml"),
        pytest.param("devices:\n- name: d\n  name: e\n", "yaml", id="yaml-nested"),
    ],
)
def test_duplicate_keys_are_rejected(text: str, fmt: SpecFormat) -> None:
    with pytest.raises(SpecError, match="duplicate key"):
        parse_spec_text(text, source="dup", fmt=fmt)


@pytest.mark.parametrize(
    ("text", "fmt", "rule"),
    [
        pytest.param("{", "json", "invalid JSON", id="json"),
        pytest.param('{"a": NaN}', "json", "invalid JSON", id="json-nan"),
        pytest.param("a: [", "yaml", "invalid YAML", id="yaml"),
        pytest.param("a: &x [*x]\n", "yaml", "invalid YAML", id="yaml-recursive-alias"),
        pytest.param("[" * 5000, "yaml", "invalid YAML", id="yaml-deep"),
        pytest.param("a: \ud800\n", "yaml", "invalid YAML", id="yaml-lone-surrogate"),
        pytest.param("kind: \x01\n", "yaml", "invalid YAML", id="yaml-control-character"),
    ],
)
def test_syntax_errors_name_the_source(text: str, fmt: SpecFormat, rule: str) -> None:
    with pytest.raises(SpecError, match=f"^/etc/cdi/x: \\$: {rule}"):
        parse_spec_text(text, source="/etc/cdi/x", fmt=fmt)


def test_parsed_text_is_validated() -> None:
    text = '{"cdiVersion": "0.5.0", "kind": "a.com/b", "devices": [{"name": "d", "containerEdits": {}}]}'

    with pytest.raises(SpecError, match=r"\$\.devices\[0\]\.containerEdits: a device must have non-empty"):
        parse_spec_text(text, source="s.json", fmt="json")
