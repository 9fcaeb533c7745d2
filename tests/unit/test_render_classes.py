"""The DeviceClasses fakedev ships with each schema cover every device type its slices publish."""

from __future__ import annotations

import pytest

from fakedev.model.inventory import resolve_inventory
from fakedev.profiles import builtin_profile_names, load_profile
from fakedev.render import Schema, render_node
from fakedev.render.classes import RECIPES, compute_class_expression, render_device_classes


@pytest.mark.parametrize("profile", builtin_profile_names(), ids=builtin_profile_names())
def test_every_published_nvidia_type_has_a_class(profile: str) -> None:
    rendered = render_node(resolve_inventory(load_profile(profile), node_name="n1"), schemas=[Schema.NVIDIA])
    published = {
        d["attributes"]["type"]["string"]
        for s in rendered.slices
        for d in s["spec"].get("devices", [])
        if "type" in d.get("attributes", {})
    }
    classed = {r.device_type for r in RECIPES[Schema.NVIDIA]}
    assert published <= classed


def test_expression_selects_the_type_in_the_drivers_own_domain() -> None:
    assert compute_class_expression(driver="gpu.nvidia.com", device_type="mig") == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
    )
    assert compute_class_expression(driver="dra.net", device_type=None) == "device.driver == 'dra.net'"


@pytest.mark.parametrize("schema", list(Schema), ids=[s.value for s in Schema])
def test_extended_resource_names_can_be_left_out(schema: Schema) -> None:
    without = render_device_classes(schema=schema, extended_resources=False)
    assert all("extendedResourceName" not in c["spec"] for c in without)
    names = [c["metadata"]["name"] for c in render_device_classes(schema=schema)]
    assert names == [c["metadata"]["name"] for c in without]
    assert len(set(names)) == len(names)
