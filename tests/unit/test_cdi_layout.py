"""CDI kinds, file names and device IDs per driver release (docs/research/nvidia-releases.md §1.4, §2.4, §3.4, §7)."""

from __future__ import annotations

import pytest

from fakedev.driver.cdi_layout import (
    VfioApiNode,
    cdi_layout_for,
    claim_spec_files,
    is_claim_spec,
    spec_file_prefixes,
)
from fakedev.model.releases import NvidiaRelease
from fakedev.render import Schema

UID = "dab5ab50-d59a-42a6-af16-cfd4628c0f7a"


@pytest.mark.parametrize(
    ("schema", "release", "kind", "file_name", "device_id"),
    [
        (
            Schema.NVIDIA,
            NvidiaRelease.V25_12_0,
            "k8s.gpu.nvidia.com/claim",
            f"k8s.gpu.nvidia.com-claim_{UID}.yaml",
            f"k8s.gpu.nvidia.com/claim={UID}-gpu-0",
        ),
        (
            Schema.NVIDIA,
            NvidiaRelease.V0_4_1,
            "k8s.gpu.nvidia.com/claim",
            f"k8s.gpu.nvidia.com-claim_{UID}.yaml",
            f"k8s.gpu.nvidia.com/claim={UID}-gpu-0",
        ),
        (
            Schema.NVIDIA,
            NvidiaRelease.MAIN,
            "k8s.gpu.nvidia.com/claim",
            f"k8s.gpu.nvidia.com-claim_{UID}.yaml",
            f"k8s.gpu.nvidia.com/claim={UID}-gpu-0",
        ),
        # v25.8.1 writes a claim spec only for edits a claim's config adds (MPS on the real driver); same names.
        (
            Schema.NVIDIA,
            NvidiaRelease.V25_8_1,
            "k8s.gpu.nvidia.com/claim",
            f"k8s.gpu.nvidia.com-claim_{UID}.yaml",
            f"k8s.gpu.nvidia.com/claim={UID}-gpu-0",
        ),
        # Drivers with one shape keep fakedev's own layout, whatever the NVIDIA release.
        (
            Schema.EXAMPLE,
            NvidiaRelease.V25_12_0,
            "k8s.gpu.example.com/device",
            f"k8s.gpu.example.com-device_{UID}.json",
            f"k8s.gpu.example.com/device={UID}-gpu-0",
        ),
        (
            Schema.DRANET,
            NvidiaRelease.V0_4_1,
            "k8s.dra.net/device",
            f"k8s.dra.net-device_{UID}.json",
            f"k8s.dra.net/device={UID}-gpu-0",
        ),
    ],
    ids=["nvidia-v25.12.0", "nvidia-v0.4.1", "nvidia-main", "nvidia-v25.8.1", "example", "dranet"],
)
def test_claim_specs_are_named_as_the_release_names_them(
    schema: Schema, release: NvidiaRelease, kind: str, file_name: str, device_id: str
) -> None:
    layout = cdi_layout_for(schema=schema, nvidia=release, driver=schema.driver)
    assert (
        layout.claim_kind(),
        layout.claim_spec_file(UID),
        layout.claim_device_id(claim_uid=UID, device="gpu-0"),
    ) == (
        kind,
        file_name,
        device_id,
    )


@pytest.mark.parametrize(
    ("release", "base"),
    [
        (NvidiaRelease.V25_8_1, True),
        (NvidiaRelease.V25_12_0, False),
        (NvidiaRelease.V0_4_1, False),
        (NvidiaRelease.MAIN, False),
    ],
    ids=lambda v: str(v),
)
def test_only_v25_8_1_has_a_base_spec(release: NvidiaRelease, *, base: bool) -> None:
    layout = cdi_layout_for(schema=Schema.NVIDIA, nvidia=release, driver="gpu.nvidia.com")
    assert layout.has_base_spec is base


def test_the_base_spec_names_devices_by_their_own_name() -> None:
    layout = cdi_layout_for(schema=Schema.NVIDIA, nvidia=NvidiaRelease.V25_8_1, driver="gpu.nvidia.com")
    assert (layout.base_spec_file(), layout.base_kind(), layout.base_device_id("gpu-0-mig-19-0-1")) == (
        "k8s.gpu.nvidia.com-device_base.yaml",
        "k8s.gpu.nvidia.com/device",
        "k8s.gpu.nvidia.com/device=gpu-0-mig-19-0-1",
    )
    assert layout.style.base_spec_env == ("NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=void")


@pytest.mark.parametrize(
    ("release", "placement"),
    [
        (NvidiaRelease.V25_8_1, VfioApiNode.ON_DEVICE),  # no vfio devices in that release: fakedev's own placement
        (NvidiaRelease.V25_12_0, VfioApiNode.CLAIM_SPEC),
        (NvidiaRelease.V0_4_1, VfioApiNode.ON_REQUEST),
        (NvidiaRelease.MAIN, VfioApiNode.ON_REQUEST),
    ],
    ids=lambda v: str(v),
)
def test_the_vfio_api_node_is_placed_by_release(release: NvidiaRelease, placement: VfioApiNode) -> None:
    layout = cdi_layout_for(schema=Schema.NVIDIA, nvidia=release, driver="gpu.nvidia.com")
    assert layout.style.vfio_api_node is placement


def test_a_claims_spec_names_cover_every_layout_and_no_other_driver() -> None:
    assert claim_spec_files(driver="gpu.nvidia.com", claim_uid=UID) == (
        f"k8s.gpu.nvidia.com-device_{UID}.json",
        f"k8s.gpu.nvidia.com-claim_{UID}.yaml",
    )
    assert spec_file_prefixes("gpu.nvidia.com") == ("k8s.gpu.nvidia.com-device_", "k8s.gpu.nvidia.com-claim_")
    assert is_claim_spec(f"k8s.gpu.nvidia.com-claim_{UID}.yaml", driver="gpu.nvidia.com")
    assert not is_claim_spec("k8s.gpu.nvidia.com-device_base.yaml", driver="gpu.nvidia.com")
    assert not is_claim_spec(f"k8s.gpu.nvidia.com.other-claim_{UID}.yaml", driver="gpu.nvidia.com")
