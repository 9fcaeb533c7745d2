"""KubeVirt's admission rules and virt-launcher's metadata reading, on in-memory inputs (pure logic)."""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import Any

import pytest

from harness.errors import LauncherError
from harness.kubevirt.launcher import (
    ContainerFiles,
    HostDevice,
    read_host_device,
    render_hostdev,
    request_dir,
)
from harness.kubevirt.vmi import check_admission, dra_devices

ROOT = PurePosixPath("/var/run/kubernetes.io/dra-device-attributes")


def _vmi(gpus: list[dict[str, Any]], claims: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    claims = claims if claims is not None else [{"name": "c", "resourceClaimName": "claim-c"}]
    return {"spec": {"resourceClaims": claims, "domain": {"devices": {"gpus": gpus, **extra}}}}


def _failed(vmi: dict[str, Any]) -> set[str]:
    return {f.rule for f in check_admission(vmi) if not f.ok}


def test_admission_accepts_a_well_formed_vmi() -> None:
    assert _failed(_vmi([{"name": "g", "claimName": "c", "requestName": "r"}])) == set()


@pytest.mark.parametrize(
    ("vmi", "rule"),
    [
        (_vmi([{"name": "g", "claimName": "c"}]), "admission/both-names"),
        (
            _vmi([{"name": "g", "claimName": "c", "requestName": "r", "deviceName": "nvidia.com/GH100"}]),
            "admission/device-name-or-claim",
        ),
        (
            _vmi(
                [{"name": "g", "claimName": "c", "requestName": "r"}],
                hostDevices=[{"name": "h", "claimName": "c", "requestName": "r"}],
            ),
            "admission/unique-pairs",
        ),
        (_vmi([{"name": "g", "claimName": "d", "requestName": "r"}]), "admission/claim-listed"),
        (_vmi([], claims=[{"name": "c"}]), "admission/claim-sources"),
    ],
    ids=["half-reference", "device-name-and-claim", "repeated-pair", "unlisted-claim", "claim-without-source"],
)
def test_admission_rejects(vmi: dict[str, Any], rule: str) -> None:
    assert _failed(vmi) == {rule}


def test_direct_and_template_claim_paths() -> None:
    vmi = _vmi(
        [{"name": "a", "claimName": "c", "requestName": "r"}, {"name": "b", "claimName": "t", "requestName": "q"}],
        claims=[{"name": "c", "resourceClaimName": "claim-c"}, {"name": "t", "resourceClaimTemplateName": "tmpl"}],
    )
    direct, template = dra_devices(vmi)
    assert request_dir(direct) == ROOT / "resourceclaims" / "claim-c" / "r"
    assert request_dir(template) == ROOT / "resourceclaimtemplates" / "t" / "q"


def _files(tree: dict[PurePosixPath, bytes]) -> ContainerFiles:
    def list_dir(d: PurePosixPath) -> list[str]:
        names = [p.name for p in tree if p.parent == d]
        if not names:
            raise FileNotFoundError(str(d))
        return names

    return ContainerFiles(list_dir=list_dir, read=lambda p: tree[p])


def _stream(
    attributes: dict[str, Any], *, versions: tuple[str, ...] = ("v1beta1", "v1alpha1"), devices: int = 1
) -> bytes:
    obj = {
        "kind": "DeviceMetadata",
        "requests": [
            {"name": "r", "devices": [{"driver": "d", "pool": "p", "name": "x", "attributes": attributes}] * devices}
        ],
    }
    return b"\n".join(json.dumps({"apiVersion": f"metadata.resource.k8s.io/{v}", **obj}).encode() for v in versions)


def _read(files: dict[str, bytes]) -> HostDevice:
    (device,) = dra_devices(_vmi([{"name": "g", "claimName": "c", "requestName": "r"}]))
    base = ROOT / "resourceclaims" / "claim-c" / "r"
    return read_host_device(device, _files({base / k: v for k, v in files.items()}))


PCI = {"resource.kubernetes.io/pciBusID": {"string": "0000:4b:00.0"}}


def test_pci_hostdev() -> None:
    host = _read({"d-metadata.json": _stream(PCI)})
    assert host.kind == "pci" and host.address == "0000:4b:00.0"
    assert "<address domain='0x0000' bus='0x4b' slot='0x00' function='0x0'/>" in render_hostdev(host)
    assert "<alias name='ua-dra-gpu-g'/>" in render_hostdev(host)


def test_mdev_uuid_wins_over_pci_bus_id() -> None:
    host = _read({"d-metadata.json": _stream({**PCI, "mdevUUID": {"string": "0b6e2f38-4f6d-4b8e-9e55-6a7e9c2f1d10"}})})
    assert host.kind == "mdev" and "type='mdev'" in render_hostdev(host)


@pytest.mark.parametrize(
    ("files", "rule"),
    [
        ({"d-metadata.json": _stream(PCI), "e-metadata.json": _stream(PCI)}, "launcher/one-metadata-file"),
        ({}, "launcher/one-metadata-file"),
        ({"d-metadata.json": _stream(PCI, versions=("v1beta1",))}, "launcher/v1alpha1-object"),
        ({"d-metadata.json": _stream(PCI, devices=2)}, "launcher/one-device"),
        (
            {"d-metadata.json": _stream({"resource.kubernetes.io/pciBusID": {"string": "0000:4b:00"}})},
            "launcher/bdf-format",
        ),
        ({"d-metadata.json": _stream({})}, "launcher/address"),
        ({"d-metadata.json": b"{not json"}, "launcher/v1alpha1-object"),
    ],
    ids=["two-files", "no-file", "no-v1alpha1", "two-devices", "malformed-bdf", "no-address", "not-json"],
)
def test_launcher_refuses(files: dict[str, bytes], rule: str) -> None:
    with pytest.raises(LauncherError) as info:
        _read(files)
    assert info.value.rule == rule


def test_other_files_in_the_directory_are_ignored() -> None:
    assert _read({"d-metadata.json": _stream(PCI), "README": b"x"}).address == "0000:4b:00.0"
