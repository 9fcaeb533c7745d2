"""The DeviceClasses that go with each schema: the real drivers' classes, so the same claims select fake devices.

The NVIDIA driver's chart ships ``gpu.nvidia.com``, ``mig.nvidia.com`` and ``vfio.gpu.nvidia.com`` (each selecting one
``type``; the full-GPU class also names the extended resource ``nvidia.com/gpu``), DraNet ships ``dranet``, and the
dra-example-driver ``gpu.example.com``. fakedev adds ``vgpu.nvidia.com`` for the vGPUs its nvidia schema publishes,
and gives the example class the extended resource of its migration example (``gpu.example.com/device``). The Helm
chart renders the same objects; a test holds the two together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NotRequired, TypedDict

from fakedev.render.published import DRIVERS, Schema


class CelSelector(TypedDict):
    expression: str


class DeviceSelector(TypedDict):
    cel: CelSelector


class DeviceClassSpec(TypedDict):
    selectors: list[DeviceSelector]
    extendedResourceName: NotRequired[str]


class ObjectMeta(TypedDict):
    name: str


class DeviceClass(TypedDict):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: DeviceClassSpec


@dataclass(frozen=True, kw_only=True)
class ClassRecipe:
    name: str
    device_type: str | None
    """The driver's ``type`` attribute this class selects; None: every device of the driver."""
    extended_resource: str | None = None


RECIPES: Final[Mapping[Schema, tuple[ClassRecipe, ...]]] = {
    Schema.NVIDIA: (
        ClassRecipe(name="gpu.nvidia.com", device_type="gpu", extended_resource="nvidia.com/gpu"),
        ClassRecipe(name="mig.nvidia.com", device_type="mig"),
        ClassRecipe(name="vfio.gpu.nvidia.com", device_type="vfio"),
        ClassRecipe(name="vgpu.nvidia.com", device_type="vgpu"),
    ),
    Schema.DRANET: (ClassRecipe(name="dranet", device_type=None),),
    Schema.EXAMPLE: (
        ClassRecipe(name="gpu.example.com", device_type=None, extended_resource="gpu.example.com/device"),
    ),
}


def compute_class_expression(*, driver: str, device_type: str | None) -> str:
    """The CEL selector: the driver, and the ``type`` attribute in the driver's own domain when one is given."""
    own = f"device.driver == '{driver}'"
    return own if device_type is None else f"{own} && device.attributes['{driver}'].type == '{device_type}'"


def render_device_classes(*, schema: Schema, extended_resources: bool = True) -> list[DeviceClass]:
    """The schema's DeviceClasses; ``extended_resources`` False leaves ``extendedResourceName`` out (a cluster where
    another class already maps those names)."""
    driver = DRIVERS[schema]
    out: list[DeviceClass] = []
    for recipe in RECIPES[schema]:
        spec: DeviceClassSpec = {
            "selectors": [
                {"cel": {"expression": compute_class_expression(driver=driver, device_type=recipe.device_type)}}
            ]
        }
        if extended_resources and recipe.extended_resource is not None:
            spec["extendedResourceName"] = recipe.extended_resource
        out.append(
            {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": recipe.name}, "spec": spec}
        )
    return out
