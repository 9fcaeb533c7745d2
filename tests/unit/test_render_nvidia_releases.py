"""Each pinned NVIDIA driver release renders that release's attributes, capacities, names and device mixes
(docs/research/nvidia-releases.md sections 1–4 and 7; issue 21's done-when items)."""

from __future__ import annotations

import re
import uuid

import pytest

from fakedev.errors import RenderError
from fakedev.model.catalog import GPU_PRODUCTS, AddressingMode
from fakedev.model.inventory import GpuDevice, resolve_inventory
from fakedev.model.profile import parse_profile
from fakedev.model.releases import NvidiaRelease
from fakedev.render import RenderedNode, Schema, render_node
from fakedev.render.nvidia_schema import ATTRIBUTES, NvidiaKind
from fakedev.render.types import Device

NODE = "node-a"
RELEASES = list(NvidiaRelease)
IDS = [r.value for r in RELEASES]
AFTER_V25_8 = [r for r in RELEASES if r is not NvidiaRelease.V25_8_1]

NVML = {"type", "productName", "brand", "architecture", "cudaComputeCapability", "driverVersion", "cudaDriverVersion"}
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"


def _profile(gpus: str, *, release: NvidiaRelease, extra: str = "") -> str:
    return f"""
name: pinned
releases: {{nvidia: {release.value}}}
{extra}
numaNodes: [{{id: 0, cpus: "0-7"}}, {{id: 1, cpus: "8-15"}}]
pcieRoots: [{{name: "pci0000:50", numaNode: 0}}, {{name: "pci0000:90", numaNode: 1}}]
gpus:
{gpus}
"""


PLAIN_H100 = '  - {product: h100-sxm5-80gb, root: "pci0000:50", address: "0000:53:00.0", mig: {mode: disabled}}'
DYNAMIC_H100 = '  - {product: h100-sxm5-80gb, root: "pci0000:50", address: "0000:53:00.0"}'
DYNAMIC_A100 = '  - {product: a100-sxm4-40gb, root: "pci0000:90", address: "0000:97:00.0"}'
PLAIN_A100 = '  - {product: a100-sxm4-40gb, root: "pci0000:90", address: "0000:97:00.0", mig: {mode: disabled}}'
STATIC_A100 = """  - product: a100-sxm4-40gb
    root: "pci0000:90"
    address: "0000:97:00.0"
    mig: {mode: static, instances: [{profile: 3g.20gb, start: 4}, {profile: 1g.5gb, start: 0}]}"""
VFIO_H100 = '  - {product: h100-sxm5-80gb, root: "pci0000:90", address: "0000:97:00.0", passthrough: true}'


def _render(gpus: str, *, release: NvidiaRelease, extra: str = "") -> RenderedNode:
    profile = parse_profile(_profile(gpus, release=release, extra=extra), source="pinned.yaml")
    return render_node(resolve_inventory(profile, node_name=NODE), schemas=[Schema.NVIDIA])


def _devices(node: RenderedNode) -> dict[str, Device]:
    return {d["name"]: d for s in node.slices for d in s["spec"].get("devices", [])}


def _device(gpus: str, name: str, *, release: NvidiaRelease) -> Device:
    return _devices(_render(gpus, release=release))[name]


# -- full GPU, plain path ------------------------------------------------------------------------------------------

PLAIN_GPU = {
    NvidiaRelease.V25_8_1: NVML | {"uuid", "pcieBusID", PCIE_ROOT},
    NvidiaRelease.V25_12_0: NVML | {"uuid", PCI_BUS_ID, PCIE_ROOT, "addressingMode"},
    NvidiaRelease.V0_4_1: NVML | {"uuid", PCI_BUS_ID, PCIE_ROOT, "addressingMode"},
    NvidiaRelease.MAIN: NVML | {"uuid", PCI_BUS_ID, PCIE_ROOT, "addressingMode", NUMA_NODE},
}


@pytest.mark.parametrize("release", RELEASES, ids=IDS)
def test_plain_full_gpu_carries_exactly_the_release_attributes(release: NvidiaRelease) -> None:
    gpu = _device(PLAIN_H100, "gpu-0", release=release)
    assert set(gpu["attributes"]) == PLAIN_GPU[release]
    assert gpu["capacity"] == {"memory": {"value": "81559Mi"}}  # NVML's total


@pytest.mark.parametrize("release", AFTER_V25_8, ids=[r.value for r in AFTER_V25_8])
def test_pci_bus_id_is_the_standard_attribute_after_v25_8_1(release: NvidiaRelease) -> None:
    attributes = _device(PLAIN_H100, "gpu-0", release=release)["attributes"]
    assert attributes[PCI_BUS_ID] == {"string": "0000:53:00.0"}
    assert "pcieBusID" not in attributes


def test_v25_8_1_publishes_the_bare_pcie_bus_id() -> None:
    attributes = _device(PLAIN_H100, "gpu-0", release=NvidiaRelease.V25_8_1)["attributes"]
    assert attributes["pcieBusID"] == {"string": "0000:53:00.0"}
    assert PCI_BUS_ID not in attributes


@pytest.mark.parametrize(
    ("product", "mode"),
    [("h100-sxm5-80gb", "HMM"), ("a100-sxm4-40gb", "HMM")],
    ids=["h100", "a100"],
)
def test_addressing_mode_comes_from_the_catalogue(product: str, mode: str) -> None:
    gpus = f'  - {{product: {product}, root: "pci0000:50", mig: {{mode: disabled}}}}'
    assert _device(gpus, "gpu-0", release=NvidiaRelease.V0_4_1)["attributes"]["addressingMode"] == {"string": mode}


def test_every_catalogue_product_has_an_addressing_mode_and_a_pci_ids_name() -> None:
    for product in GPU_PRODUCTS.values():
        assert product.addressing_mode in set(AddressingMode)
        assert "[" in product.pci_name


# -- numaNode only on main -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("release", AFTER_V25_8, ids=[r.value for r in AFTER_V25_8])
@pytest.mark.parametrize("gpus", [DYNAMIC_H100, STATIC_A100, VFIO_H100], ids=["dynamic-mig", "static-mig", "vfio"])
def test_standard_numa_node_only_on_main(release: NvidiaRelease, gpus: str) -> None:
    published = _devices(_render(gpus, release=release))
    with_numa = {n for n, d in published.items() if NUMA_NODE in d["attributes"]}
    assert with_numa == (set(published) if release is NvidiaRelease.MAIN else set())


def test_main_numa_node_is_the_gpu_pci_numa_node() -> None:
    published = _devices(_render(STATIC_A100, release=NvidiaRelease.MAIN))
    assert {d["attributes"][NUMA_NODE]["int"] for d in published.values()} == {1}


# -- dynamic MIG ---------------------------------------------------------------------------------------------------

DYNAMIC_GPU = {
    NvidiaRelease.V25_12_0: NVML | {"uuid", PCI_BUS_ID, PCIE_ROOT},
    NvidiaRelease.V0_4_1: NVML | {"uuid", PCI_BUS_ID, PCIE_ROOT, "addressingMode"},
    NvidiaRelease.MAIN: NVML | {"uuid", PCI_BUS_ID, PCIE_ROOT, "addressingMode", NUMA_NODE},
}
DYNAMIC_MIG = {
    NvidiaRelease.V25_12_0: NVML | {"parentUUID", "profile", PCI_BUS_ID},
    NvidiaRelease.V0_4_1: NVML | {"parentUUID", "profile", PCI_BUS_ID, PCIE_ROOT, "addressingMode"},
    NvidiaRelease.MAIN: NVML | {"parentUUID", "profile", PCI_BUS_ID, PCIE_ROOT, "addressingMode", NUMA_NODE},
}


@pytest.mark.parametrize("release", AFTER_V25_8, ids=[r.value for r in AFTER_V25_8])
def test_dynamic_mig_full_gpu_attributes(release: NvidiaRelease) -> None:
    assert set(_device(DYNAMIC_H100, "gpu-0", release=release)["attributes"]) == DYNAMIC_GPU[release]


@pytest.mark.parametrize("release", AFTER_V25_8, ids=[r.value for r in AFTER_V25_8])
def test_dynamic_mig_device_attributes_and_no_uuid(release: NvidiaRelease) -> None:
    device = _device(DYNAMIC_H100, "gpu-0-mig-1g10gb-19-3", release=release)
    assert set(device["attributes"]) == DYNAMIC_MIG[release]
    assert "memorySlice3" not in device["capacity"]


@pytest.mark.parametrize("release", AFTER_V25_8, ids=[r.value for r in AFTER_V25_8])
def test_dynamic_mig_full_gpu_publishes_every_mig_dimension(release: NvidiaRelease) -> None:
    capacity = _device(DYNAMIC_H100, "gpu-0", release=release)["capacity"]
    assert {k: v["value"] for k, v in capacity.items()} == {
        "multiprocessors": "132",
        "copyEngines": "8",
        "decoders": "7",
        "encoders": "0",
        "jpegEngines": "7",
        "ofaEngines": "1",
        "memory": "81152Mi",  # the 7g.80gb profile, not NVML's 81559Mi
    }


def test_dynamic_mig_maxima_are_per_dimension() -> None:
    """A100's 1g.5gb+me has a JPEG and an OFA engine like the 7g: the maxima come from any profile."""
    node = _render(DYNAMIC_A100, release=NvidiaRelease.V25_12_0)
    capacity = _devices(node)["gpu-0"]["capacity"]
    assert {k: v["value"] for k, v in capacity.items()} == {
        "multiprocessors": "98",
        "copyEngines": "7",
        "decoders": "5",
        "encoders": "0",
        "jpegEngines": "1",
        "ofaEngines": "1",
        "memory": "40192Mi",
    }
    [counter_set] = node.slices[0]["spec"]["sharedCounters"]
    assert counter_set["counters"]["memory"] == {"value": "40192Mi"}


@pytest.mark.parametrize(
    ("release", "full_gpu"),
    [(NvidiaRelease.V25_12_0, True), (NvidiaRelease.V0_4_1, False), (NvidiaRelease.MAIN, False)],
    ids=["v25.12.0", "v0.4.1", "main"],
)
def test_ampere_with_mig_mode_on_publishes_dynamic_mig_without_the_full_gpu_from_v0_4_1(
    release: NvidiaRelease, full_gpu: bool
) -> None:
    node = _render(DYNAMIC_A100, release=release)
    published = _devices(node)
    assert ("gpu-0" in published) is full_gpu
    assert "gpu-0-mig-1g5gb-19-0" in published
    # The counter set stays: the MIG placements still share the GPU through it.
    assert [c["name"] for s in node.slices for c in s["spec"].get("sharedCounters", [])] == ["gpu-0-counter-set"]


def test_hopper_keeps_its_full_gpu_next_to_dynamic_mig() -> None:
    assert "gpu-0" in _devices(_render(DYNAMIC_H100, release=NvidiaRelease.V0_4_1))


def test_ampere_with_mig_off_stays_plain_next_to_dynamic_gpus_from_v0_4_1() -> None:
    published = _devices(_render(f"{DYNAMIC_H100}\n{PLAIN_A100}", release=NvidiaRelease.V0_4_1))
    assert "consumesCounters" not in published["gpu-1"]
    assert published["gpu-1"]["capacity"] == {"memory": {"value": "40Gi"}}
    assert not [n for n in published if n.startswith("gpu-1-mig-")]


# -- static MIG ----------------------------------------------------------------------------------------------------

STATIC_NAMES = {
    NvidiaRelease.V25_8_1: {"gpu-0-mig-9-4-4", "gpu-0-mig-19-0-1"},
    NvidiaRelease.V25_12_0: {"gpu-0-mig-3g20gb-9-4", "gpu-0-mig-1g5gb-19-0"},
    NvidiaRelease.V0_4_1: {"gpu-0-mig-3g20gb-9-4", "gpu-0-mig-1g5gb-19-0"},
    NvidiaRelease.MAIN: {"gpu-0-mig-3g20gb-9-4", "gpu-0-mig-1g5gb-19-0"},
}
STATIC_MIG = {
    NvidiaRelease.V25_8_1: NVML | {"uuid", "parentUUID", "profile", "pcieBusID", PCIE_ROOT},
    NvidiaRelease.V25_12_0: NVML | {"uuid", "parentUUID", "profile", PCI_BUS_ID, PCIE_ROOT, "addressingMode"},
    NvidiaRelease.V0_4_1: NVML | {"uuid", "parentUUID", "profile", PCI_BUS_ID, PCIE_ROOT, "addressingMode"},
    NvidiaRelease.MAIN: NVML | {"uuid", "parentUUID", "profile", PCI_BUS_ID, PCIE_ROOT, "addressingMode", NUMA_NODE},
}


@pytest.mark.parametrize("release", RELEASES, ids=IDS)
def test_static_mig_names_per_release(release: NvidiaRelease) -> None:
    assert set(_devices(_render(STATIC_A100, release=release))) == STATIC_NAMES[release]


@pytest.mark.parametrize("release", RELEASES, ids=IDS)
def test_static_mig_attributes_per_release(release: NvidiaRelease) -> None:
    for device in _devices(_render(STATIC_A100, release=release)).values():
        assert set(device["attributes"]) == STATIC_MIG[release]
        assert device["attributes"]["uuid"]["string"].startswith("MIG-")


@pytest.mark.parametrize("release", RELEASES, ids=IDS)
def test_static_mig_has_a_memory_slice_capacity_per_slice_of_its_placement(release: NvidiaRelease) -> None:
    [big] = [d for d in _devices(_render(STATIC_A100, release=release)).values() if "3g" in str(d["attributes"])]
    capacity = {k: v["value"] for k, v in big["capacity"].items()}
    assert {k: v for k, v in capacity.items() if k.startswith("memorySlice")} == {
        f"memorySlice{i}": "1" for i in (4, 5, 6, 7)
    }
    assert capacity["memory"] == "19968Mi" and capacity["multiprocessors"] == "42"
    assert "consumesCounters" not in big


# -- vfio ----------------------------------------------------------------------------------------------------------

VFIO = {
    NvidiaRelease.V25_12_0: {"type", "uuid", "productName", "deviceID", "vendorID", "numa", PCI_BUS_ID, PCIE_ROOT},
    NvidiaRelease.V0_4_1: {
        "type",
        "uuid",
        "productName",
        "deviceID",
        "vendorID",
        "numa",
        "iommuFDEnabled",
        PCI_BUS_ID,
        PCIE_ROOT,
    },
    NvidiaRelease.MAIN: {
        "type",
        "uuid",
        "productName",
        "deviceID",
        "vendorID",
        "iommuFDEnabled",
        PCI_BUS_ID,
        PCIE_ROOT,
        NUMA_NODE,
    },
}


@pytest.mark.parametrize("release", AFTER_V25_8, ids=[r.value for r in AFTER_V25_8])
def test_vfio_attributes_per_release(release: NvidiaRelease) -> None:
    device = _device(VFIO_H100, "gpu-vfio-0", release=release)
    assert set(device["attributes"]) == VFIO[release]
    assert device["capacity"] == {"addressableMemory": {"value": "81559Mi"}}


def test_vfio_values_are_pci_facts() -> None:
    attributes = _device(VFIO_H100, "gpu-vfio-0", release=NvidiaRelease.V0_4_1)["attributes"]
    assert attributes["uuid"] == {"string": str(uuid.uuid5(uuid.NAMESPACE_DNS, "0000:97:00.0"))}
    assert attributes["productName"] == {"string": "GH100 [H100 SXM5 80GB]"}
    assert attributes["deviceID"] == {"string": "0x2330"} and attributes["vendorID"] == {"string": "0x10de"}
    assert attributes["numa"] == {"int": 1}
    assert attributes["iommuFDEnabled"] == {"bool": False}
    assert attributes[PCI_BUS_ID] == {"string": "0000:97:00.0"}


def test_vfio_publishes_next_to_a_full_gpu_in_one_slice() -> None:
    node = _render(f"{PLAIN_H100}\n{VFIO_H100}", release=NvidiaRelease.V25_12_0)
    assert [sorted(d["name"] for d in s["spec"]["devices"]) for s in node.slices] == [["gpu-0", "gpu-vfio-0"]]


STATIC_H100 = """  - product: h100-sxm5-80gb
    root: "pci0000:50"
    address: "0000:53:00.0"
    mig: {mode: static, instances: [{profile: 3g.40gb, start: 0}]}"""


@pytest.mark.parametrize("release", [NvidiaRelease.V0_4_1, NvidiaRelease.MAIN], ids=["v0.4.1", "main"])
def test_vfio_publishes_next_to_a_gpu_with_mig_devices(release: NvidiaRelease) -> None:
    """A GPU with MIG devices gets no vfio sibling in the real driver, so the node is as the release has it."""
    node = _render(f"{STATIC_H100}\n{VFIO_H100}", release=release)
    assert sorted(ref.device for ref in node.devices) == ["gpu-0-mig-3g40gb-9-0", "gpu-vfio-0"]


# -- refusals ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "release", "says"),
    [
        (DYNAMIC_H100, NvidiaRelease.V25_8_1, "nvidia@v25.8.1 has no dynamic MIG"),
        (VFIO_H100, NvidiaRelease.V25_8_1, "nvidia@v25.8.1 publishes no vfio devices"),
        (f"{DYNAMIC_H100}\n{VFIO_H100}", NvidiaRelease.V0_4_1, "vfio devices next to dynamic MIG"),
        (f"{DYNAMIC_H100}\n{VFIO_H100}", NvidiaRelease.MAIN, "DynamicMIG and PassthroughSupport"),
        (f"{PLAIN_H100}\n{VFIO_H100}", NvidiaRelease.V0_4_1, "beside every GPU without MIG devices"),
        (f"{PLAIN_H100}\n{VFIO_H100}", NvidiaRelease.MAIN, "make it `passthrough: true` too"),
        (f"{DYNAMIC_H100}\n{STATIC_A100}", NvidiaRelease.V25_12_0, "pre-created and dynamic MIG devices"),
        (f"{DYNAMIC_H100}\n{STATIC_A100}", NvidiaRelease.V0_4_1, "pre-created and dynamic MIG devices"),
        (f"{DYNAMIC_H100}\n{PLAIN_A100}", NvidiaRelease.V25_12_0, "has MIG disabled next to dynamic GPUs"),
        (
            f"{DYNAMIC_A100}\n{PLAIN_H100.replace('0000:53:00.0', '0000:54:00.0')}",
            NvidiaRelease.V0_4_1,
            "Hopper-or-newer",
        ),
    ],
    ids=[
        "dynamic-on-v25.8.1",
        "vfio-on-v25.8.1",
        "vfio-with-dynamic-v0.4.1",
        "vfio-with-dynamic-main",
        "plain-gpu-with-vfio-v0.4.1",
        "plain-gpu-with-vfio-main",
        "static-and-dynamic-v25.12.0",
        "static-and-dynamic-v0.4.1",
        "disabled-next-to-dynamic-v25.12.0",
        "disabled-hopper-next-to-dynamic-v0.4.1",
    ],
)
def test_mixes_the_release_cannot_publish_are_refused(gpus: str, release: NvidiaRelease, says: str) -> None:
    with pytest.raises(RenderError, match=re.escape(says)) as raised:
        _render(gpus, release=release)
    assert f"nvidia@{release.value}" in str(raised.value)


# -- fakedev's own extensions and the slice layout -----------------------------------------------------------------

TIME_SLICED = '  - {product: h100-sxm5-80gb, root: "pci0000:50", vgpu: {modes: [time-sliced]}}'


@pytest.mark.parametrize("release", RELEASES, ids=IDS)
def test_vgpu_is_rendered_for_every_release(release: NvidiaRelease) -> None:
    published = _devices(_render(TIME_SLICED, release=release, extra="extensions: [vgpu]"))
    vgpus = [d for d in published.values() if d["attributes"]["type"] == {"string": "vgpu"}]
    assert vgpus and all(PCIE_ROOT in d["attributes"] and PCI_BUS_ID not in d["attributes"] for d in vgpus)
    assert all((NUMA_NODE in d["attributes"]) is (release is NvidiaRelease.MAIN) for d in vgpus)


def test_without_dynamic_mig_the_pool_is_one_slice() -> None:
    node = _render(f"{PLAIN_H100}\n{STATIC_A100}", release=NvidiaRelease.V25_8_1)
    assert len(node.slices) == 1
    assert len(node.slices[0]["spec"]["devices"]) == 3


def test_published_lookup_agrees_with_the_slice_for_the_full_gpu() -> None:
    node = _render(PLAIN_H100, release=NvidiaRelease.MAIN)
    published = node.device(driver="gpu.nvidia.com", pool=NODE, name="gpu-0")
    assert isinstance(published.model, GpuDevice)
    assert dict(published.attributes) == _devices(node)["gpu-0"]["attributes"]


def test_attribute_table_names_each_attribute_once_and_only_publishable_kinds() -> None:
    assert len({row.name for row in ATTRIBUTES}) == len(ATTRIBUTES)
    v25_8 = {k for row in ATTRIBUTES for k in row.kinds[NvidiaRelease.V25_8_1]}
    assert v25_8 == {NvidiaKind.GPU, NvidiaKind.MIG_STATIC}


def test_bare_mig_beside_vgpu_is_dynamic_mig_which_v25_8_1_lacks() -> None:
    both = '  - {product: h100-sxm5-80gb, root: "pci0000:50", vgpu: {modes: [time-sliced, mig-backed]}}'
    extra = "extensions: [vgpu]\nfeatures: {compatibilityGroups: true}"
    with pytest.raises(RenderError, match=re.escape("nvidia@v25.8.1 has no dynamic MIG")):
        _render(both, release=NvidiaRelease.V25_8_1, extra=extra)
    assert "gpu-0-mig-1g10gb-19-0" in _devices(_render(both, release=NvidiaRelease.V25_12_0, extra=extra))
