"""The DeviceFault CRD's schema and CEL rules, judged by the real kube-apiserver (what `kubectl apply` would meet)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fakedev.errors import DeviceFaultError
from fakedev.plugin.device_faults import parse_spec
from kubeclient import ApiError, KubeClient
from kubeclient.resources import DEVICE_FAULTS

pytestmark = pytest.mark.cluster


def _body(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "fakedev.io/v1alpha1",
        "kind": "DeviceFault",
        "metadata": {"name": name},
        "spec": {"nodeName": "node-a", "driver": "gpu.example.com", **spec},
    }


VALID = [
    ("unhealthy", {"kind": "Unhealthy", "device": "gpu-0", "unhealthy": {"message": "XID 79"}}),
    ("unhealthy-bare", {"kind": "Unhealthy", "device": "gpu-0"}),
    ("unhealthy-tainted", {"kind": "Unhealthy", "device": "gpu-0", "unhealthy": {"taintEffect": "NoExecute"}}),
    ("taint", {"kind": "Taint", "device": "gpu-1", "taint": {"effect": "NoSchedule", "key": "example.com/m"}}),
    ("fail-prepare", {"kind": "FailPrepare", "failPrepare": {"count": 2, "message": "bus error"}}),
    ("slow-seconds", {"kind": "SlowPrepare", "slowPrepare": {"delay": 3}}),
    ("slow-duration", {"kind": "SlowPrepare", "slowPrepare": {"delay": "1m30.5s"}}),
    ("nic-unplug", {"kind": "NicUnplug", "device": "nic-0", "until": "2030-01-02T03:04:05Z"}),
    ("nic-down", {"kind": "NicDown", "device": "nic-0"}),
]

INVALID = [
    ("no-member", {"kind": "Taint", "device": "gpu-0"}, "taint must be set when kind is Taint, and only then"),
    (
        "wrong-member",
        {"kind": "Unhealthy", "device": "gpu-0", "failPrepare": {"count": 1}},
        "failPrepare must be set when kind is FailPrepare, and only then",
    ),
    (
        "foreign-unhealthy",
        {"kind": "NicDown", "device": "nic-0", "unhealthy": {}},
        "unhealthy may be set only when kind is Unhealthy",
    ),
    ("count-zero", {"kind": "FailPrepare", "failPrepare": {"count": 0}}, "count must be greater than 0"),
    ("count-negative", {"kind": "FailPrepare", "failPrepare": {"count": -3}}, "count must be greater than 0"),
    ("no-device", {"kind": "Unhealthy"}, "device is required when kind is Unhealthy"),
    ("nic-no-device", {"kind": "NicUnplug"}, "device is required when kind is NicUnplug"),
    (
        "device-on-prepare",
        {"kind": "FailPrepare", "device": "gpu-0", "failPrepare": {"count": 1}},
        "device must not be set when kind is FailPrepare",
    ),
    ("effect-none", {"kind": "Taint", "device": "gpu-0", "taint": {"effect": "None"}}, 'Unsupported value: "None"'),
    (
        "delay-too-long",
        {"kind": "SlowPrepare", "slowPrepare": {"delay": "2h"}},
        "delay must be 0 to 3600 seconds, or a duration",
    ),
    ("delay-seconds", {"kind": "SlowPrepare", "slowPrepare": {"delay": 3601}}, "delay must be 0 to 3600 seconds"),
    ("delay-words", {"kind": "SlowPrepare", "slowPrepare": {"delay": "soon"}}, "delay must be 0 to 3600 seconds"),
    ("kind-unknown", {"kind": "Melt", "device": "gpu-0"}, 'Unsupported value: "Melt"'),
    ("until-garbage", {"kind": "NicDown", "device": "nic-0", "until": "tomorrow"}, "spec.until"),
]


@pytest.mark.parametrize(("case", "spec"), VALID, ids=[c for c, _ in VALID])
def test_valid_faults_are_accepted_and_parse(
    kube: KubeClient, device_faults: list[str], unique_name: str, case: str, spec: dict[str, Any]
) -> None:
    name = f"{unique_name[:40]}-{case}"
    device_faults.append(name)
    created = kube.create(DEVICE_FAULTS, _body(name, **spec))
    # What the API stored, our own reading agrees is valid.
    parsed = parse_spec(created["spec"])
    assert parsed.kind.value == spec["kind"]


@pytest.mark.parametrize(("case", "spec", "message"), INVALID, ids=[c for c, _, _ in INVALID])
def test_invalid_faults_are_refused_with_the_rule(
    kube: KubeClient, device_faults: list[str], unique_name: str, case: str, spec: dict[str, Any], message: str
) -> None:
    name = f"{unique_name[:40]}-{case}"
    device_faults.append(name)
    with pytest.raises(ApiError) as refused:
        kube.create(DEVICE_FAULTS, _body(name, **spec))
    assert refused.value.status == 422
    assert message in str(refused.value)
    # Our own reading refuses it too (an object from before a rule, or from an edited CRD, meets the same checks).
    with pytest.raises(DeviceFaultError):
        parse_spec(_body(name, **spec)["spec"])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("nodeName", "node-b", "nodeName is immutable"),
        ("driver", "gpu.nvidia.com", "driver is immutable"),
        ("kind", "Taint", "kind is immutable"),
    ],
    ids=["nodeName", "driver", "kind"],
)
def test_target_and_kind_are_immutable(
    kube: KubeClient, device_faults: list[str], unique_name: str, field: str, value: str, message: str
) -> None:
    name = f"{unique_name[:40]}-{field.lower()}"
    device_faults.append(name)
    kube.create(DEVICE_FAULTS, _body(name, kind="Unhealthy", device="gpu-0"))
    patch: dict[str, Any] = {"spec": {field: value}}
    if field == "kind":
        patch["spec"]["taint"] = {"effect": "NoSchedule"}
    with pytest.raises(ApiError) as refused:
        kube.patch(DEVICE_FAULTS, name, patch)
    assert message in str(refused.value)
    # The device may change: the plugin moves the fault.
    kube.patch(DEVICE_FAULTS, name, {"spec": {"device": "gpu-1"}})
    assert kube.get(DEVICE_FAULTS, name)["metadata"]["generation"] == 2


def test_faults_are_selected_by_node_and_driver(kube: KubeClient, device_faults: list[str], unique_name: str) -> None:
    mine, other_node, other_driver = (f"{unique_name[:40]}-{s}" for s in ("mine", "node", "driver"))
    device_faults.extend([mine, other_node, other_driver])
    node = f"{unique_name[:40]}-n"
    kube.create(DEVICE_FAULTS, {**_body(mine, kind="NicDown", device="nic-0"), "spec": _spec(node, "dra.net")})
    kube.create(DEVICE_FAULTS, {**_body(other_node, kind="NicDown"), "spec": _spec(f"{node}x", "dra.net")})
    kube.create(DEVICE_FAULTS, {**_body(other_driver, kind="NicDown"), "spec": _spec(node, "gpu.example.com")})
    selected = kube.list(DEVICE_FAULTS, field_selector=f"spec.nodeName={node},spec.driver=dra.net")
    assert [f["metadata"]["name"] for f in selected] == [mine]


def _spec(node: str, driver: str) -> dict[str, Any]:
    return {"nodeName": node, "driver": driver, "kind": "NicDown", "device": "nic-0"}


def test_the_shipped_example_is_accepted(kube: KubeClient, device_faults: list[str]) -> None:
    example = yaml.safe_load((Path(__file__).parents[2] / "deploy/examples/devicefault-unhealthy.yaml").read_text())
    device_faults.append(example["metadata"]["name"])
    created = kube.create(DEVICE_FAULTS, example)
    assert parse_spec(created["spec"]).device == "gpu-0"
