"""The DeviceClasses fakedev ships per real driver release: the release charts' classes, fakedev's own, the committed
manifests and the Helm chart's class table generated from them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakedev.model.inventory import resolve_inventory
from fakedev.model.releases import DRANET_DEFAULT, NVIDIA_DEFAULT, DranetRelease, DriverReleases, NvidiaRelease
from fakedev.profiles import builtin_profile_names, load_profile
from fakedev.render import Schema, render_node
from fakedev.render.class_manifests import MANIFEST_DIR, compute_generated_files
from fakedev.render.classes import ClassOrigin, render_device_classes, schema_recipes

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "fakedev"
GPU_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '{}'"


def _by_name(schema: Schema, releases: DriverReleases) -> dict[str, Any]:
    return {c["metadata"]["name"]: c["spec"] for c in render_device_classes(schema=schema, releases=releases)}


@pytest.mark.parametrize("profile", builtin_profile_names(), ids=builtin_profile_names())
def test_every_published_nvidia_type_has_a_class_of_the_profiles_release(profile: str) -> None:
    loaded = load_profile(profile)
    rendered = render_node(resolve_inventory(loaded, node_name="n1"), schemas=[Schema.NVIDIA])
    published = {
        d["attributes"]["type"]["string"]
        for s in rendered.slices
        for d in s["spec"].get("devices", [])
        if "type" in d.get("attributes", {})
    }
    classed = {
        t.value
        for r in schema_recipes(schema=Schema.NVIDIA, releases=loaded.releases)
        for t in r.tests
        if t.attribute == "type"
    }
    assert published <= classed


@pytest.mark.parametrize("release", list(NvidiaRelease), ids=[r.value for r in NvidiaRelease])
def test_nvidia_release_classes_select_one_type_each(release: NvidiaRelease) -> None:
    classes = _by_name(Schema.NVIDIA, DriverReleases(nvidia=release))
    assert classes["gpu.nvidia.com"]["selectors"] == [{"cel": {"expression": GPU_SELECTOR.format("gpu")}}]
    assert classes["mig.nvidia.com"]["selectors"] == [{"cel": {"expression": GPU_SELECTOR.format("mig")}}]
    channel = classes["compute-domain-default-channel.nvidia.com"]["selectors"][0]["cel"]["expression"]
    assert channel == (
        "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == "
        "'channel' && device.attributes['compute-domain.nvidia.com'].id == 0"
    )
    assert "compute-domain-daemon.nvidia.com" in classes
    assert all("config" not in spec for spec in classes.values())


@pytest.mark.parametrize(
    ("release", "vfio", "extended"),
    [
        (NvidiaRelease.V25_8_1, False, None),
        (NvidiaRelease.V25_12_0, True, "nvidia.com/gpu"),
        (NvidiaRelease.V0_4_1, True, "nvidia.com/gpu"),
        (NvidiaRelease.MAIN, True, "nvidia.com/gpu"),
    ],
    ids=[r.value for r in NvidiaRelease],
)
def test_vfio_class_and_extended_resource_arrive_in_v25_12_0(
    release: NvidiaRelease, vfio: bool, extended: str | None
) -> None:
    classes = _by_name(Schema.NVIDIA, DriverReleases(nvidia=release))
    assert ("vfio.gpu.nvidia.com" in classes) is vfio
    assert classes["gpu.nvidia.com"].get("extendedResourceName") == extended
    assert [n for n, s in classes.items() if "extendedResourceName" in s] == (
        [] if extended is None else ["gpu.nvidia.com"]
    )


@pytest.mark.parametrize("release", list(DranetRelease), ids=[r.value for r in DranetRelease])
def test_dranet_classes_are_its_repositorys_selecting_the_whole_driver(release: DranetRelease) -> None:
    classes = render_device_classes(schema=Schema.DRANET, releases=DriverReleases(dranet=release))
    assert [c["metadata"]["name"] for c in classes] == ["dra.net", "dranet"]
    assert all(c["spec"] == {"selectors": [{"cel": {"expression": "device.driver == 'dra.net'"}}]} for c in classes)
    assert render_device_classes(schema=Schema.DRANET, origins=[ClassOrigin.CHART]) == []


@pytest.mark.parametrize("schema", list(Schema), ids=[s.value for s in Schema])
def test_fakedevs_own_classes(schema: Schema) -> None:
    own = [c["metadata"]["name"] for c in render_device_classes(schema=schema, origins=[ClassOrigin.FAKEDEV])]
    assert own == {Schema.NVIDIA: ["vgpu.nvidia.com"], Schema.DRANET: [], Schema.EXAMPLE: ["gpu.example.com"]}[schema]


@pytest.mark.parametrize("schema", list(Schema), ids=[s.value for s in Schema])
def test_extended_resource_names_can_be_left_out(schema: Schema) -> None:
    without = render_device_classes(schema=schema, extended_resources=False)
    assert all("extendedResourceName" not in c["spec"] for c in without)
    names = [c["metadata"]["name"] for c in render_device_classes(schema=schema)]
    assert names == [c["metadata"]["name"] for c in without]
    assert len(set(names)) == len(names)


def test_default_is_the_newest_release() -> None:
    assert render_device_classes(schema=Schema.NVIDIA) == render_device_classes(
        schema=Schema.NVIDIA, releases=DriverReleases(nvidia=NvidiaRelease.V0_4_1)
    )


def test_committed_files_equal_the_generated_ones() -> None:
    """`make deviceclasses` regenerates them; run it after changing fakedev/render/classes.py."""
    generated = compute_generated_files()
    for path, text in generated.items():
        assert (REPO / path).read_text() == text, f"{path} is stale: run `make deviceclasses`"
    committed = {p.relative_to(REPO).as_posix() for p in (REPO / MANIFEST_DIR).rglob("*") if p.is_file()}
    assert committed == {p.as_posix() for p in generated if p.is_relative_to(MANIFEST_DIR)}


def test_manifest_documents_are_the_release_classes() -> None:
    text = (REPO / MANIFEST_DIR / "nvidia" / "v25.8.1.yaml").read_text()
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert docs == render_device_classes(
        schema=Schema.NVIDIA, releases=DriverReleases(nvidia=NvidiaRelease.V25_8_1), origins=[ClassOrigin.CHART]
    )


def test_chart_offers_exactly_fakedevs_releases_and_defaults_to_the_newest() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())["definitions"]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert schema["nvidiaDriver"]["properties"]["release"]["enum"] == [r.value for r in NvidiaRelease]
    assert schema["dranetDriver"]["properties"]["release"]["enum"] == [r.value for r in DranetRelease]
    assert values["drivers"]["nvidia"]["release"] == NVIDIA_DEFAULT.value
    assert values["drivers"]["dranet"]["release"] == DRANET_DEFAULT.value
