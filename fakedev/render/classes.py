"""The DeviceClasses that go with each schema: the real drivers' classes, release by release, so the same claims
select fake devices; and the few classes that are fakedev's own.

Facts: docs/research/nvidia-releases.md sections 1.6, 2.6, 3.6 and 6; docs/research/dranet-releases.md section 1.7.

- NVIDIA: the classes each release's Helm chart renders (``gpu.nvidia.com``, ``mig.nvidia.com``, from v25.12.0
  ``vfio.gpu.nvidia.com``, and the two ComputeDomain classes of the same chart). From v25.12.0 the chart gives the
  full-GPU class ``extendedResourceName: nvidia.com/gpu`` when it renders ``resource.k8s.io/v1`` — always here.
- DraNet: its chart renders no DeviceClass at any release. fakedev ships the class of DraNet's e2e tests
  (``dra.net``) and the one its user guides create (``dranet``); both select every device of the driver.
- fakedev's own: ``vgpu.nvidia.com`` (vGPU is fakedev's extension, no release publishes it) and the example
  driver's ``gpu.example.com``, to which fakedev adds the extended resource of its migration example.

The manifests under ``deploy/deviceclasses/`` and the Helm chart's class table are generated from these tables
(:mod:`fakedev.render.class_manifests`, ``make deviceclasses``); tests hold them equal.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Final, NotRequired, TypedDict

from fakedev.model.releases import DranetRelease, DriverReleases, NvidiaRelease
from fakedev.render.published import Schema


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


class ClassOrigin(StrEnum):
    """Where a class comes from, which decides whether a cluster running the real driver already has it."""

    CHART = "chart"
    """The release's Helm chart renders it (the real driver's install creates the same object)."""
    REPOSITORY = "repository"
    """The release's repository has it (tests, user guides), its chart does not: users create it themselves."""
    FAKEDEV = "fakedev"
    """fakedev's own: no release of the real driver has it."""


@dataclass(frozen=True, kw_only=True)
class AttributeTest:
    """``device.attributes['<driver>'].<attribute> == <value>`` (a string is quoted, an int is not)."""

    attribute: str
    value: str | int


@dataclass(frozen=True, kw_only=True)
class ClassRecipe:
    name: str
    driver: str
    origin: ClassOrigin
    tests: tuple[AttributeTest, ...] = ()
    """Attribute equalities in the driver's own domain, after the driver test; none: every device of the driver."""
    extended_resource: str | None = None


NVIDIA_DRIVER: Final = "gpu.nvidia.com"
COMPUTE_DOMAIN_DRIVER: Final = "compute-domain.nvidia.com"
DRANET_DRIVER: Final = "dra.net"
EXAMPLE_DRIVER: Final = "gpu.example.com"


def _nvidia_type(name: str, device_type: str) -> ClassRecipe:
    return ClassRecipe(
        name=name,
        driver=NVIDIA_DRIVER,
        origin=ClassOrigin.CHART,
        tests=(AttributeTest(attribute="type", value=device_type),),
    )


_GPU: Final = _nvidia_type("gpu.nvidia.com", "gpu")
_GPU_EXTENDED: Final = replace(_GPU, extended_resource="nvidia.com/gpu")
_MIG: Final = _nvidia_type("mig.nvidia.com", "mig")  # static and dynamic MIG devices alike
_VFIO: Final = _nvidia_type("vfio.gpu.nvidia.com", "vfio")
_CD_DAEMON: Final = ClassRecipe(
    name="compute-domain-daemon.nvidia.com",
    driver=COMPUTE_DOMAIN_DRIVER,
    origin=ClassOrigin.CHART,
    tests=(AttributeTest(attribute="type", value="daemon"),),
)
_CD_CHANNEL: Final = ClassRecipe(
    name="compute-domain-default-channel.nvidia.com",
    driver=COMPUTE_DOMAIN_DRIVER,
    origin=ClassOrigin.CHART,
    tests=(AttributeTest(attribute="type", value="channel"), AttributeTest(attribute="id", value=0)),
)
_SINCE_V25_12: Final = (_GPU_EXTENDED, _MIG, _VFIO, _CD_DAEMON, _CD_CHANNEL)

NVIDIA_CLASSES: Final[Mapping[NvidiaRelease, tuple[ClassRecipe, ...]]] = MappingProxyType(
    {
        NvidiaRelease.V25_8_1: (_GPU, _MIG, _CD_DAEMON, _CD_CHANNEL),
        NvidiaRelease.V25_12_0: _SINCE_V25_12,
        NvidiaRelease.V0_4_1: _SINCE_V25_12,
        # main's chart skips the daemon class only in host-managed IMEX mode, which is not its default.
        NvidiaRelease.MAIN: _SINCE_V25_12,
    }
)
"""The classes each release's chart renders (with its default values, as ``resource.k8s.io/v1``)."""

_DRANET_REPOSITORY: Final = (
    ClassRecipe(name="dra.net", driver=DRANET_DRIVER, origin=ClassOrigin.REPOSITORY),  # tests/manifests
    ClassRecipe(name="dranet", driver=DRANET_DRIVER, origin=ClassOrigin.REPOSITORY),  # the user guides' class
)
DRANET_CLASSES: Final[Mapping[DranetRelease, tuple[ClassRecipe, ...]]] = MappingProxyType(
    {DranetRelease.V1_4_0: _DRANET_REPOSITORY, DranetRelease.MAIN: _DRANET_REPOSITORY}
)
"""No DraNet chart renders a class; these are the ones its repository creates at each release."""

FAKEDEV_CLASSES: Final[Mapping[Schema, tuple[ClassRecipe, ...]]] = MappingProxyType(
    {
        Schema.NVIDIA: (
            ClassRecipe(
                name="vgpu.nvidia.com",
                driver=NVIDIA_DRIVER,
                origin=ClassOrigin.FAKEDEV,
                tests=(AttributeTest(attribute="type", value="vgpu"),),
            ),
        ),
        Schema.DRANET: (),
        Schema.EXAMPLE: (
            ClassRecipe(
                name="gpu.example.com",
                driver=EXAMPLE_DRIVER,
                origin=ClassOrigin.FAKEDEV,
                extended_resource="gpu.example.com/device",
            ),
        ),
    }
)
"""fakedev's own classes per schema, whatever the release."""

SOURCES: Final[Mapping[NvidiaRelease | DranetRelease, str]] = MappingProxyType(
    {
        NvidiaRelease.V25_8_1: "kubernetes-sigs/dra-driver-nvidia-gpu v25.8.1 (fc69d985), chart "
        "deployments/helm/nvidia-dra-driver-gpu 25.8.1, templates/deviceclass-*.yaml",
        NvidiaRelease.V25_12_0: "kubernetes-sigs/dra-driver-nvidia-gpu v25.12.0 (0882da87), chart "
        "deployments/helm/nvidia-dra-driver-gpu 25.12.0, templates/deviceclass-*.yaml",
        NvidiaRelease.V0_4_1: "kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 (764900e7), chart "
        "deployments/helm/dra-driver-nvidia-gpu 0.4.1, templates/deviceclass-*.yaml",
        NvidiaRelease.MAIN: "kubernetes-sigs/dra-driver-nvidia-gpu main (95932046, 2026-08-07), chart "
        "deployments/helm/dra-driver-nvidia-gpu 0.5.0-dev, templates/deviceclass-*.yaml",
        DranetRelease.V1_4_0: "kubernetes-sigs/dranet v1.4.0 (ca195e29): its chart (deployments/helm/dranet) renders "
        "no DeviceClass; dra.net is tests/manifests/deviceclass.yaml, dranet the class of its user guides",
        DranetRelease.MAIN: "kubernetes-sigs/dranet main (f258477c, 2026-08-21): its chart renders no DeviceClass; "
        "dra.net is tests/manifests/deviceclass.yaml, dranet the class of its user guides",
    }
)
"""Where each release's classes were read (docs/research has the details)."""


def release_recipes(release: NvidiaRelease | DranetRelease) -> tuple[ClassRecipe, ...]:
    """The real driver's classes at ``release``."""
    match release:
        case NvidiaRelease():
            return NVIDIA_CLASSES[release]
        case DranetRelease():
            return DRANET_CLASSES[release]


def schema_recipes(*, schema: Schema, releases: DriverReleases) -> tuple[ClassRecipe, ...]:
    """Every class that goes with ``schema``: its release's (when it has releases), then fakedev's own."""
    own = FAKEDEV_CLASSES[schema]
    match schema:
        case Schema.NVIDIA:
            return release_recipes(releases.nvidia) + own
        case Schema.DRANET:
            return release_recipes(releases.dranet) + own
        case Schema.EXAMPLE:
            return own


def _literal(value: str | int) -> str:
    return f"'{value}'" if isinstance(value, str) else str(value)


def compute_class_expression(recipe: ClassRecipe) -> str:
    """The CEL selector: the driver, then each attribute test in the driver's own domain."""
    parts = [f"device.driver == '{recipe.driver}'"]
    parts += [f"device.attributes['{recipe.driver}'].{t.attribute} == {_literal(t.value)}" for t in recipe.tests]
    return " && ".join(parts)


def render_class(recipe: ClassRecipe, *, extended_resources: bool = True) -> DeviceClass:
    spec: DeviceClassSpec = {"selectors": [{"cel": {"expression": compute_class_expression(recipe)}}]}
    if extended_resources and recipe.extended_resource is not None:
        spec["extendedResourceName"] = recipe.extended_resource
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": recipe.name}, "spec": spec}


def render_device_classes(
    *,
    schema: Schema,
    releases: DriverReleases | None = None,
    origins: Collection[ClassOrigin] = tuple(ClassOrigin),
    extended_resources: bool = True,
) -> list[DeviceClass]:
    """The schema's DeviceClasses at ``releases`` (default: the newest releases), of the given origins;
    ``extended_resources`` False leaves ``extendedResourceName`` out (a cluster where other classes map those names).
    """
    recipes = schema_recipes(schema=schema, releases=releases or DriverReleases())
    return [render_class(r, extended_resources=extended_resources) for r in recipes if r.origin in origins]
