"""What the fuzz targets found in the driver's input parsers, each kept as a plain regression test: names with a
trailing newline, opaque config values that are lists or objects, a checkpoint nested too deep."""

from __future__ import annotations

from typing import Any

import pytest

from fakedev.driver.checkpoint import parse_checkpoint
from fakedev.driver.claims import check_claim_ref
from fakedev.driver.config import GPU_KINDS, NIC_KINDS, parse_config
from fakedev.errors import CheckpointError, ClaimError

GPU = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
NIC = {"apiVersion": "resource.fakedev.io/v1alpha1", "kind": "NicConfig"}


@pytest.mark.parametrize(
    ("uid", "namespace", "name", "error"),
    [
        ("uid-1\n", "ns", "c", "claim uid 'uid-1\\n' is not a valid UID"),
        ("uid-1", "ns\n", "c", "claim namespace 'ns\\n' is not a valid namespace name"),
        ("uid-1", "ns", "c\n", "claim name 'c\\n' is not a valid object name"),
    ],
    ids=["uid", "namespace", "name"],
)
def test_a_name_with_a_trailing_newline_is_refused(uid: str, namespace: str, name: str, error: str) -> None:
    # `$` in a Python regex also matches before a final newline, which let these through into file names.
    with pytest.raises(ClaimError, match="^" + error.replace("\\", "\\\\") + "$"):
        check_claim_ref(uid=uid, namespace=namespace, name=name)


@pytest.mark.parametrize(
    ("parameters", "kinds", "error"),
    [
        (
            {"apiVersion": ["resource.nvidia.com/v1beta1"], "kind": "GpuConfig"},
            GPU_KINDS,
            "parameters.apiVersion: must be one of gpu.resource.example.com/v1alpha1, resource.fakedev.io/v1alpha1, "
            "resource.nvidia.com/v1beta1, not ['resource.nvidia.com/v1beta1']",
        ),
        (
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": {"GpuConfig": 1}},
            GPU_KINDS,
            "parameters.kind: must be one of GpuConfig, MigDeviceConfig, VfioDeviceConfig for this device, "
            "not {'GpuConfig': 1}",
        ),
        (
            {**GPU, "sharing": {"strategy": ["MPS"]}},
            GPU_KINDS,
            "parameters.sharing.strategy: must be one of MPS, SpaceSharing, TimeSlicing, not ['MPS']",
        ),
        (
            {**GPU, "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": []}}},
            GPU_KINDS,
            "parameters.sharing.timeSlicingConfig.interval: must be one of Default, Long, Medium, Short",
        ),
        ({**GPU, "env": {"A\n": "x"}}, GPU_KINDS, "parameters.env.'A\\n': is not a valid environment variable name"),
        (
            {**NIC, "interfaceName": "eth0\n"},
            NIC_KINDS,
            "parameters.interfaceName: must be 1-15 characters of letters, digits, '_', '.', '-'",
        ),
        (
            {**GPU, "x" * 10_000: 1},
            GPU_KINDS,
            f"parameters.'{'x' * 56}...: unknown field (allowed: apiVersion, env, kind, sharing)",
        ),
        (
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig", "iommu": {"enableAPIDevice": 1}},
            GPU_KINDS,
            "parameters.iommu.enableAPIDevice: must be true or false",
        ),
        (
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig", "iommu": {"backendPolicy": []}},
            GPU_KINDS,
            "parameters.iommu.backendPolicy: must be one of LegacyOnly, PreferIommuFD",
        ),
        (
            {**GPU, "iommu": {"enableAPIDevice": True}},
            GPU_KINDS,
            "parameters.iommu: unknown field (allowed: apiVersion, env, kind, sharing)",
        ),
    ],
    ids=[
        "api-version-list",
        "kind-object",
        "strategy-list",
        "interval-list",
        "env-newline",
        "ifname-newline",
        "long",
        "iommu-api-device-int",
        "iommu-policy-list",
        "iommu-on-a-gpu",
    ],
)
def test_an_opaque_config_value_of_any_shape_is_a_claim_error_naming_the_field(
    parameters: dict[str, Any], kinds: frozenset[str], error: str
) -> None:
    with pytest.raises(ClaimError) as caught:
        parse_config(parameters, kinds=kinds)
    assert str(caught.value) == f"invalid opaque config: {error}"


def test_a_checkpoint_nested_too_deep_is_a_checkpoint_error() -> None:
    with pytest.raises(CheckpointError, match=r"^checkpoint\.json: not valid JSON \(maximum recursion depth"):
        parse_checkpoint(b'{"claims": ' + b"[" * 100_000, source="checkpoint.json")
