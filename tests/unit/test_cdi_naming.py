"""CDI naming rules (reference pkg/parser/parser.go): vendor, class, device names, kinds and qualified IDs."""

from __future__ import annotations

import pytest

from cdi import (
    Kind,
    QualifiedName,
    QualifiedNameError,
    parse_kind,
    parse_qualified_name,
    render_kind,
    render_qualified_name,
    validate_class_name,
    validate_device_name,
    validate_vendor_name,
)

VALID_KIND_PARTS = ["a", "nvidia.com", "fake-dev_1.example", "A9", "x.y-z_w"]
INVALID_KIND_PARTS = [
    pytest.param("", id="empty"),
    pytest.param("1vendor", id="starts-with-digit"),
    pytest.param("-vendor", id="starts-with-dash"),
    pytest.param("vendor-", id="ends-with-dash"),
    pytest.param("vendor.", id="ends-with-dot"),
    pytest.param("ven:dor", id="colon"),
    pytest.param("ven/dor", id="slash"),
    pytest.param("vendör", id="non-ascii"),
]


@pytest.mark.parametrize("name", VALID_KIND_PARTS)
def test_valid_vendor_names_pass(name: str) -> None:
    validate_vendor_name(name)


@pytest.mark.parametrize("name", VALID_KIND_PARTS)
def test_valid_class_names_pass(name: str) -> None:
    validate_class_name(name)


@pytest.mark.parametrize("name", INVALID_KIND_PARTS)
def test_invalid_vendor_names_are_rejected(name: str) -> None:
    with pytest.raises(QualifiedNameError, match="vendor name"):
        validate_vendor_name(name)


@pytest.mark.parametrize("name", INVALID_KIND_PARTS)
def test_invalid_class_names_are_rejected(name: str) -> None:
    with pytest.raises(QualifiedNameError, match="class name"):
        validate_class_name(name)


@pytest.mark.parametrize("name", ["0", "gpu0", "0f3c-uuid_1.2:3", "MIG-1g.10gb", "a"])
def test_valid_device_names_pass(name: str) -> None:
    validate_device_name(name)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("", id="empty"),
        pytest.param("_gpu", id="starts-with-underscore"),
        pytest.param("gpu:", id="ends-with-colon"),
        pytest.param("gp u", id="space"),
        pytest.param("gp/u", id="slash"),
        pytest.param("gp=u", id="equals"),
        pytest.param("../x", id="path-traversal"),
    ],
)
def test_invalid_device_names_are_rejected(name: str) -> None:
    with pytest.raises(QualifiedNameError, match="device name"):
        validate_device_name(name)


def test_render_qualified_name_joins_kind_and_device() -> None:
    assert render_qualified_name(kind="fake.example.com/gpu", device="0a1b_0") == "fake.example.com/gpu=0a1b_0"


@pytest.mark.parametrize(
    ("kind", "device"),
    [
        pytest.param("fake.example.com", "gpu0", id="kind-without-class"),
        pytest.param("fake.example.com/gpu", "bad name", id="bad-device"),
        pytest.param("a/b/c", "gpu0", id="two-slashes"),
    ],
)
def test_render_qualified_name_refuses_invalid_parts(kind: str, device: str) -> None:
    with pytest.raises(QualifiedNameError):
        render_qualified_name(kind=kind, device=device)


def test_render_kind_joins_vendor_and_class() -> None:
    assert render_kind(vendor="fake.example.com", class_name="nic") == "fake.example.com/nic"


def test_parse_kind_splits_vendor_and_class() -> None:
    assert parse_kind("fake.example.com/gpu.v2") == Kind(vendor="fake.example.com", class_name="gpu.v2")


def test_parse_qualified_name_splits_all_parts() -> None:
    parsed = parse_qualified_name("fake.example.com/gpu=uid_0:1")

    assert parsed == QualifiedName(kind=Kind(vendor="fake.example.com", class_name="gpu"), device="uid_0:1")
    assert str(parsed) == "fake.example.com/gpu=uid_0:1"


@pytest.mark.parametrize(
    "device_id",
    [
        pytest.param("", id="empty"),
        pytest.param("/dev/nvidia0", id="host-path"),
        pytest.param("gpu0", id="unqualified"),
        pytest.param("vendor/class", id="no-device"),
        pytest.param("=gpu0", id="no-kind"),
        pytest.param("vendor=gpu0", id="no-class"),
        pytest.param("vendor/class=", id="empty-device"),
        pytest.param("vendor/cl/ass=gpu0", id="slash-in-class"),
        pytest.param("vendor/class=gpu=0", id="second-equals"),
        pytest.param("1vendor/class=gpu0", id="bad-vendor"),
    ],
)
def test_parse_qualified_name_rejects_malformed_ids(device_id: str) -> None:
    with pytest.raises(QualifiedNameError):
        parse_qualified_name(device_id)
