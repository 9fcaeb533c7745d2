"""The gpu.nvidia.com schema: names, attributes, capacities, counter sets and consumption."""

from __future__ import annotations

from functools import cache

import pytest

from fakedev.model.inventory import GpuDevice, MigDevice, VgpuDevice, resolve_inventory
from fakedev.model.profile import parse_profile
from fakedev.profiles import load_profile
from fakedev.render import RenderedNode, Schema, render_node
from fakedev.render.types import Device

NODE = "node-a"


@cache
def rendered(profile: str) -> RenderedNode:
    return render_node(resolve_inventory(load_profile(profile), node_name=NODE), schemas=[Schema.NVIDIA])


def devices(profile: str) -> dict[str, Device]:
    return {d["name"]: d for s in rendered(profile).slices for d in s["spec"].get("devices", [])}


def test_dgx_pool_is_one_counter_slice_then_a_slice_per_gpu() -> None:
    slices = rendered("dgx-h100").slices
    assert [s["metadata"]["name"] for s in slices] == [f"{NODE}-gpu-nvidia-com-{i}" for i in range(9)]
    assert len(slices[0]["spec"]["sharedCounters"]) == 8 and "devices" not in slices[0]["spec"]
    for index, resource_slice in enumerate(slices[1:]):
        spec = resource_slice["spec"]
        assert "sharedCounters" not in spec
        assert {d["name"].split("-mig-")[0] for d in spec["devices"]} == {f"gpu-{index}"}
    assert {
        (
            s["spec"]["pool"]["name"],
            s["spec"]["pool"]["resourceSliceCount"],
            s["spec"]["pool"]["generation"],
            s["spec"]["nodeName"],
            s["spec"]["driver"],
        )
        for s in slices
    } == {(NODE, 9, 1, NODE, "gpu.nvidia.com")}


def test_devices_in_a_slice_are_sorted_by_name() -> None:
    for resource_slice in rendered("dgx-h100").slices[1:]:
        names = [d["name"] for d in resource_slice["spec"]["devices"]]
        assert names == sorted(names)


H100_NAMES = (
    ["gpu-0"]
    + [f"gpu-0-mig-1g10gb-19-{s}" for s in range(7)]
    + [f"gpu-0-mig-1g10gb-me-20-{s}" for s in range(7)]
    + [f"gpu-0-mig-1g20gb-15-{s}" for s in (0, 2, 4, 6)]
    + [f"gpu-0-mig-2g20gb-14-{s}" for s in (0, 2, 4)]
    + ["gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4", "gpu-0-mig-4g40gb-5-0", "gpu-0-mig-7g80gb-0-0"]
)


def test_h100_publishes_the_full_gpu_and_every_placement() -> None:
    assert sorted(d["name"] for d in rendered("dgx-h100").slices[1]["spec"]["devices"]) == sorted(H100_NAMES)


def test_counter_set_of_an_h100() -> None:
    counter_set = rendered("dgx-h100").slices[0]["spec"]["sharedCounters"][0]
    assert counter_set["name"] == "gpu-0-counter-set"
    assert {k: v["value"] for k, v in counter_set["counters"].items()} == {
        "multiprocessors": "132",
        "copy-engines": "8",
        "decoders": "7",
        "encoders": "0",
        "jpeg-engines": "7",
        "ofa-engines": "1",
        "memory": "81152Mi",  # the 7g.80gb profile's memory, not NVML's total (81559Mi)
        **{f"memory-slice-{i}": "1" for i in range(8)},
    }


def test_full_gpu_attributes_and_capacity_at_the_default_release() -> None:
    gpu = devices("dgx-h100")["gpu-4"]
    inventory_gpu = rendered("dgx-h100").device(driver="gpu.nvidia.com", pool=NODE, name="gpu-4").model
    assert isinstance(inventory_gpu, GpuDevice)
    assert gpu["attributes"] == {
        "type": {"string": "gpu"},
        "uuid": {"string": inventory_gpu.uuid},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "580.95.5"},
        "cudaDriverVersion": {"version": "13.0.0"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:97:00.0"},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:90"},
        "addressingMode": {"string": "HMM"},
    }
    # Under dynamic MIG: the largest profile's value of every MIG dimension.
    assert {k: v["value"] for k, v in gpu["capacity"].items()} == {
        "multiprocessors": "132",
        "copyEngines": "8",
        "decoders": "7",
        "encoders": "0",
        "jpegEngines": "7",
        "ofaEngines": "1",
        "memory": "81152Mi",
    }


def test_full_gpu_consumes_every_counter() -> None:
    counter_set = rendered("dgx-h100").slices[0]["spec"]["sharedCounters"][2]
    [consumption] = devices("dgx-h100")["gpu-2"]["consumesCounters"]
    assert consumption == {"counterSet": "gpu-2-counter-set", "counters": counter_set["counters"]}


@pytest.mark.parametrize(
    ("name", "slices", "expected"),
    [
        (
            "gpu-0-mig-1g10gb-19-3",
            [3],
            {
                "multiprocessors": "16",
                "copy-engines": "1",
                "decoders": "1",
                "jpeg-engines": "1",
                "ofa-engines": "0",
                "memory": "9984Mi",
            },
        ),
        (
            "gpu-0-mig-3g40gb-9-4",
            [4, 5, 6, 7],
            {
                "multiprocessors": "60",
                "copy-engines": "3",
                "decoders": "3",
                "jpeg-engines": "3",
                "ofa-engines": "0",
                "memory": "40448Mi",
            },
        ),
        ("gpu-0-mig-1g20gb-15-6", [6, 7], {"multiprocessors": "26", "memory": "20096Mi"}),
        (
            "gpu-0-mig-7g80gb-0-0",
            list(range(8)),
            {"multiprocessors": "132", "copy-engines": "8", "ofa-engines": "1", "memory": "81152Mi"},
        ),
    ],
    ids=["1g-at-3", "3g-at-4", "1g-double-at-6", "7g"],
)
def test_mig_placement_consumes_its_capacities_and_memory_slices(
    name: str, slices: list[int], expected: dict[str, str]
) -> None:
    [consumption] = devices("dgx-h100")[name]["consumesCounters"]
    counters = {k: v["value"] for k, v in consumption["counters"].items()}
    assert {int(k.removeprefix("memory-slice-")) for k in counters if k.startswith("memory-slice-")} == set(slices)
    assert expected.items() <= counters.items()
    assert "compatibilityGroups" not in consumption


def test_mig_attributes_and_capacity() -> None:
    device = devices("dgx-h100")["gpu-0-mig-2g20gb-14-2"]
    parent = rendered("dgx-h100").device(driver="gpu.nvidia.com", pool=NODE, name="gpu-0").model
    assert isinstance(parent, GpuDevice)
    attributes = device["attributes"]
    assert attributes["type"] == {"string": "mig"}
    assert attributes["profile"] == {"string": "2g.20gb"}
    assert attributes["parentUUID"] == {"string": parent.uuid}
    assert "uuid" not in attributes  # not created yet
    assert attributes["resource.kubernetes.io/pciBusID"] == {"string": "0000:53:00.0"}  # the parent's
    assert attributes["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:50"}
    assert {k: v["value"] for k, v in device["capacity"].items()} == {
        "multiprocessors": "32",
        "copyEngines": "2",
        "decoders": "2",
        "encoders": "0",
        "jpegEngines": "2",
        "ofaEngines": "0",
        "memory": "20096Mi",
    }


def test_static_mig_instances_are_published_with_their_uuid_and_no_counters() -> None:
    published = devices("a100-mixed")
    static = published["gpu-1-mig-3g20gb-9-0"]
    assert static["attributes"]["uuid"]["string"].startswith("MIG-")
    assert "consumesCounters" not in static
    assert "gpu-1" not in published  # in MIG mode the whole GPU is not allocatable
    assert {n for n in published if n.startswith("gpu-1")} == {
        "gpu-1-mig-3g20gb-9-0",
        "gpu-1-mig-2g10gb-14-4",
        "gpu-1-mig-1g5gb-19-6",
    }


def test_disabled_mig_publishes_only_the_whole_gpu() -> None:
    published = devices("a100-mixed")
    assert {n for n in published if n.startswith("gpu-3")} == {"gpu-3"}
    assert "consumesCounters" not in published["gpu-3"]
    counter_sets = [c["name"] for s in rendered("a100-mixed").slices for c in s["spec"].get("sharedCounters", [])]
    assert counter_sets == []  # no dynamic MIG on this node


def test_partitionable_gpu_slices_stay_within_64_devices() -> None:
    for resource_slice in rendered("vgpu-host").slices:
        assert len(resource_slice["spec"].get("devices", [])) <= 64

    def on_gpu2(name: str) -> bool:
        return name == "gpu-2" or name.startswith("gpu-2-")

    h200 = [s for s in rendered("vgpu-host").slices if any(on_gpu2(d["name"]) for d in s["spec"].get("devices", []))]
    assert [len(s["spec"]["devices"]) for s in h200] == [64, 64, 21]


def _groups(device: Device) -> list[str]:
    [consumption] = device["consumesCounters"]
    return consumption.get("compatibilityGroups", [])


def test_compatibility_groups_keep_mig_and_vgpu_apart() -> None:
    published = devices("vgpu-host")
    assert _groups(published["gpu-2-mig-1g18gb-19-0"]) == ["mig"]
    assert _groups(published["gpu-2-vgpu-h200-1-18c-0"]) == ["vgpu-mig"]
    assert _groups(published["gpu-2-vgpu-h200-35c-3"]) == ["vgpu-h200-35c"]
    assert _groups(published["gpu-2"]) == []  # consumes everything anyway
    assert _groups(published["gpu-3-mig-1g10gb-19-0"]) == []  # a GPU without vGPU needs no groups


def test_time_sliced_vgpus_fill_the_slot_counter_exactly() -> None:
    node = rendered("vgpu-host")
    counter_set = node.slices[0]["spec"]["sharedCounters"][0]
    total = int(counter_set["counters"]["vgpu-slots"]["value"])
    assert total == 80  # lcm(1, 2, 4, 5, 8, 10, 16, 20)
    for device in node.devices.values():
        model = device.model
        if isinstance(model, VgpuDevice) and model.parent.minor == 0:
            [consumption] = devices("vgpu-host")[device.ref.device]["consumesCounters"]
            cost = int(consumption["counters"]["vgpu-slots"]["value"])
            assert cost * model.vgpu_type.max_per_gpu == total


def test_mig_backed_vgpu_consumes_like_its_mig_placement() -> None:
    published = devices("vgpu-host")
    vgpu = published["gpu-1-vgpu-h100xm-3-40c-4"]["consumesCounters"][0]["counters"]
    mig = published["gpu-1-mig-3g40gb-9-4"]["consumesCounters"][0]["counters"]
    assert vgpu == mig
    assert published["gpu-1-vgpu-h100xm-3-40c-4"]["attributes"]["vgpuType"] == {"string": "H100XM-3-40C"}


def test_partition_type_attribute_only_on_slices_with_counter_consumers() -> None:
    slices = rendered("hgx-h200").slices
    assert "partitionTypeAttribute" not in slices[0]["spec"]
    assert {s["spec"].get("partitionTypeAttribute") for s in slices[1:]} == {"fakedev.io/partitionType"}
    published = devices("hgx-h200")
    assert published["gpu-0"]["attributes"]["fakedev.io/partitionType"] == {"string": "gpu-0/full"}
    assert published["gpu-0-mig-1g18gb-19-2"]["attributes"]["fakedev.io/partitionType"] == {"string": "gpu-0/1g.18gb@2"}


@pytest.mark.parametrize("profile", ["hgx-h200"])
def test_devices_of_one_partition_type_consume_the_same_counters(profile: str) -> None:
    """1.37's rule for partitionTypeAttribute (the pool-status controller reports PartitionCostMismatch otherwise)."""
    costs: dict[str, set[str]] = {}
    for device in devices(profile).values():
        kind = device["attributes"].get("fakedev.io/partitionType")
        if kind is not None and device.get("consumesCounters"):
            counters = [(c["counterSet"], sorted(c["counters"].items())) for c in device["consumesCounters"]]
            costs.setdefault(kind["string"], set()).add(repr(counters))
    assert costs and all(len(c) == 1 for c in costs.values()), {k: len(v) for k, v in costs.items() if len(v) > 1}


def test_lookup_returns_the_model_and_the_slice_attributes() -> None:
    node = rendered("a100-mixed")
    published = node.device(driver="gpu.nvidia.com", pool=NODE, name="gpu-5-mig-4g40gb-5-0")
    assert isinstance(published.model, MigDevice)
    assert published.model.parent.minor == 5 and published.model.placement.start == 0
    assert published.model.uuid == published.attributes["uuid"]["string"]
    assert dict(published.attributes) == devices("a100-mixed")["gpu-5-mig-4g40gb-5-0"]["attributes"]
    with pytest.raises(KeyError):
        node.device(driver="gpu.nvidia.com", pool=NODE, name="gpu-5")


VGPU_WITHOUT_GROUPS = """
name: plain-vgpu
extensions: [vgpu]
pcieRoots: [{name: "pci0000:50"}]
gpus: [{product: h100-sxm5-80gb, root: "pci0000:50", vgpu: {modes: [time-sliced]}}]
"""


def test_vgpu_without_compatibility_groups_offers_no_bare_mig_and_no_groups() -> None:
    inventory = resolve_inventory(parse_profile(VGPU_WITHOUT_GROUPS, source="plain.yaml"), node_name=NODE)
    node = render_node(inventory)
    published = {d["name"]: d for s in node.slices for d in s["spec"].get("devices", [])}
    assert not [n for n in published if "-mig-" in n]
    assert sum(1 for n in published if "-vgpu-" in n) == 1 + 2 + 4 + 5 + 8 + 10 + 16 + 20
    assert all("compatibilityGroups" not in c for d in published.values() for c in d.get("consumesCounters", []))
