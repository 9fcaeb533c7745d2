"""The dra.net (DraNet) and gpu.example.com (dra-example-driver) schemas."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pytest

from fakedev.model.inventory import NicPf, NicVf, NodeInventory, VirtualNic, resolve_inventory
from fakedev.model.releases import DranetRelease, DriverReleases
from fakedev.profiles import load_profile
from fakedev.render import RenderedNode, Schema, render_node
from fakedev.render.dranet import render_ip_list
from fakedev.render.types import Device

NODE = "node-b"
RELEASES = [DranetRelease.V1_4_0, DranetRelease.MAIN]


def _inventory(profile: str, *, dranet: DranetRelease | None = None) -> NodeInventory:
    p = load_profile(profile)
    if dranet is not None:
        p = dataclasses.replace(p, releases=DriverReleases(dranet=dranet))
    return resolve_inventory(p, node_name=NODE)


def _render(
    profile: str,
    schema: Schema,
    *,
    dranet: DranetRelease | None = None,
    addresses: Mapping[str, Sequence[str]] | None = None,
) -> RenderedNode:
    return render_node(_inventory(profile, dranet=dranet), schemas=[schema], addresses=addresses)


def _devices(node: RenderedNode) -> dict[str, Device]:
    return {d["name"]: d for s in node.slices for d in s["spec"]["devices"]}


def test_pf_attributes_of_v1_4_0_the_default() -> None:
    node = _render("nic-only", Schema.DRANET)
    pf = node.device(driver="dra.net", pool=NODE, name="pci-0000-08-00-0").model
    assert isinstance(pf, NicPf)
    assert _devices(node)["pci-0000-08-00-0"]["attributes"] == {
        "dra.net/pciAddress": {"string": "0000:08:00.0"},
        "dra.net/pciVendor": {"string": "Mellanox Technologies"},
        "dra.net/pciDevice": {"string": "MT2910 Family [ConnectX-7]"},
        "dra.net/pciSubsystem": {"string": "0040"},
        "dra.net/numaNode": {"int": 0},
        "dra.net/ifName": {"string": "enp8s0f0np0"},
        "dra.net/mac": {"string": pf.mac},
        "dra.net/mtu": {"int": 9000},
        "dra.net/encapsulation": {"string": "ether"},
        "dra.net/alias": {"string": ""},
        "dra.net/state": {"string": "up"},
        "dra.net/type": {"string": "device"},
        "dra.net/ebpf": {"bool": False},
        "dra.net/sriov": {"bool": True},
        "dra.net/sriovVfs": {"int": 8},
        "dra.net/virtual": {"bool": False},
        "dra.net/rdma": {"bool": True},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
    }


def test_main_adds_the_standard_numa_node_and_rdma_device_of_a_roce_nic() -> None:
    v1_4_0 = _devices(_render("nic-only", Schema.DRANET, dranet=DranetRelease.V1_4_0))["pci-0000-08-00-0"]
    main = _devices(_render("nic-only", Schema.DRANET, dranet=DranetRelease.MAIN))["pci-0000-08-00-0"]
    assert main["attributes"] == v1_4_0["attributes"] | {
        "dra.net/rdmaDevice": {"string": "mlx5_0"},
        "resource.kubernetes.io/numaNode": {"int": 0},
    }


@pytest.mark.parametrize("release", RELEASES, ids=str)
def test_no_release_publishes_the_standard_pci_bus_id(release: DranetRelease) -> None:
    devices = _devices(_render("nic-only", Schema.DRANET, dranet=release))
    assert [n for n, d in devices.items() if "resource.kubernetes.io/pciBusID" in d["attributes"]] == []


@pytest.mark.parametrize(("release", "published"), [(r, r is DranetRelease.MAIN) for r in RELEASES], ids=str)
def test_standard_numa_node_only_on_main(release: DranetRelease, *, published: bool) -> None:
    devices = _devices(_render("nic-only", Schema.DRANET, dranet=release))
    pci = [d for d in devices.values() if "dra.net/pciAddress" in d["attributes"]]
    assert pci and all(("resource.kubernetes.io/numaNode" in d["attributes"]) is published for d in pci)
    # DraNet's own numaNode is in both.
    assert all(d["attributes"]["dra.net/numaNode"] == {"int": 1} for d in pci if d["name"].startswith("pci-0000-b"))


@pytest.mark.parametrize("release", RELEASES, ids=str)
def test_no_numa_node_of_either_kind_without_numa_affinity(release: DranetRelease) -> None:
    inventory = _inventory("nic-only", dranet=release)
    pf = inventory.nics[0]
    unaffine = dataclasses.replace(pf, pci=dataclasses.replace(pf.pci, numa_node=None), vfs=())
    inventory = dataclasses.replace(inventory, nics=(unaffine,))
    attributes = _devices(render_node(inventory, schemas=[Schema.DRANET]))["pci-0000-08-00-0"]["attributes"]
    assert "dra.net/numaNode" not in attributes and "resource.kubernetes.io/numaNode" not in attributes


@pytest.mark.parametrize(("release", "published"), [(r, r is DranetRelease.MAIN) for r in RELEASES], ids=str)
def test_rdma_device_on_netdev_rdma_nics_only_on_main(release: DranetRelease, *, published: bool) -> None:
    devices = _devices(_render("nic-only", Schema.DRANET, dranet=release))
    rdma = [d for d in devices.values() if d["attributes"]["dra.net/rdma"] == {"bool": True}]
    # RoCE PFs and VFs and the IPoIB port: all have a netdev in fakedev's model.
    assert {d["attributes"]["dra.net/type"]["string"] for d in rdma} == {"device", "ipoib"}
    assert all(("dra.net/rdmaDevice" in d["attributes"]) is published for d in rdma)
    assert not any("dra.net/rdmaDevice" in d["attributes"] for d in devices.values() if d not in rdma)


ADDRESSES = {
    "enp8s0f0np0": ["192.168.1.5/16", "10.0.0.2/24", "10.0.0.2/24", "fe80::1/64", "fd00::2/64", "2001:db8::1/64"],
    "veth-fast0": ["169.254.3.3/16", "fe80::2/64"],
    "enp8s0f0v0": ["10.9.9.9/8"],
}


@pytest.mark.parametrize("release", RELEASES, ids=str)
def test_ip_attributes_are_sorted_global_unicast_cidrs_when_the_link_has_any(release: DranetRelease) -> None:
    devices = _devices(_render("nic-only", Schema.DRANET, dranet=release, addresses=ADDRESSES))
    pf, vf = devices["pci-0000-08-00-0"]["attributes"], devices["pci-0000-08-00-2"]["attributes"]
    assert pf["dra.net/ipv4"] == {"string": "10.0.0.2/24,192.168.1.5/16"}
    assert pf["dra.net/ipv6"] == {"string": "2001:db8::1/64,fd00::2/64"}
    assert vf["dra.net/ipv4"] == {"string": "10.9.9.9/8"} and "dra.net/ipv6" not in vf
    # Link-local only, or no addresses at all: no attribute.
    with_link_local_only = devices["veth-fast0"]["attributes"]
    assert "dra.net/ipv4" not in with_link_local_only and "dra.net/ipv6" not in with_link_local_only
    untouched = [d for n, d in devices.items() if n not in ("pci-0000-08-00-0", "pci-0000-08-00-2")]
    assert not [d["name"] for d in untouched if {"dra.net/ipv4", "dra.net/ipv6"} & set(d["attributes"])]


def test_without_addresses_no_device_has_ip_attributes() -> None:
    devices = _devices(_render("nic-only", Schema.DRANET))
    assert not [n for n, d in devices.items() if {"dra.net/ipv4", "dra.net/ipv6"} & set(d["attributes"])]


@pytest.mark.parametrize(
    ("addresses", "version", "expected"),
    [
        ([f"10.96.0.{n}/32" for n in range(1, 6)], 4, ",".join(f"10.96.0.{n}/32" for n in range(1, 6))),
        (  # sorted as strings, then cut before the address that would pass 64 characters
            [f"10.96.0.{n}/32" for n in range(1, 11)],
            4,
            "10.96.0.1/32,10.96.0.10/32,10.96.0.2/32,10.96.0.3/32",
        ),
        ([f"fd00::{n}/128" for n in range(1, 7)], 6, ",".join(f"fd00::{n}/128" for n in range(1, 6))),
        (["127.0.0.1/8", "224.0.0.1/4", "0.0.0.0/0", "255.255.255.255/32", "::1/128", "ff02::1/128"], 4, None),
        (["127.0.0.1/8", "224.0.0.1/4", "0.0.0.0/0", "255.255.255.255/32", "::1/128", "ff02::1/128"], 6, None),
        (["10.0.0.1/24", "fd00::1/64"], 6, "fd00::1/64"),
        ([], 4, None),
    ],
    ids=[
        "five-fit-exactly",
        "truncated-at-whole-addresses",
        "ipv6-truncated",
        "v4-none-global",
        "v6-none-global",
        "one-family-only",
        "none",
    ],
)
def test_ip_list(addresses: list[str], version: int, expected: str | None) -> None:
    joined = render_ip_list(addresses, version=version)
    assert joined == expected
    assert joined is None or len(joined) <= 64


def test_vf_is_marked_and_named_after_its_pf() -> None:
    node = _render("nic-only", Schema.DRANET)
    vf = node.device(driver="dra.net", pool=NODE, name="pci-0000-08-00-2")
    assert isinstance(vf.model, NicVf) and vf.model.index == 0 and vf.model.pf_ifname == "enp8s0f0np0"
    attributes = vf.attributes
    assert attributes["dra.net/isSriovVf"] == {"bool": True}
    assert attributes["dra.net/sriov"] == {"bool": False} and "dra.net/sriovVfs" not in attributes
    assert attributes["dra.net/ifName"] == {"string": "enp8s0f0v0"}
    assert attributes["dra.net/pciDevice"] == {"string": "ConnectX Family mlx5Gen Virtual Function"}


def test_infiniband_port() -> None:
    attributes = _devices(_render("nic-only", Schema.DRANET))["pci-0000-b7-00-0"]["attributes"]
    assert attributes["dra.net/encapsulation"] == {"string": "infiniband"}
    assert attributes["dra.net/type"] == {"string": "ipoib"}
    assert attributes["dra.net/ifName"] == {"string": "ibp183s0"}
    assert len(attributes["dra.net/mac"]["string"].split(":")) == 20


def test_virtual_nic_is_named_after_itself_and_has_no_pci_facts() -> None:
    node = _render("nic-only", Schema.DRANET)
    device = _devices(node)["veth-fast0"]
    assert isinstance(node.device(driver="dra.net", pool=NODE, name="veth-fast0").model, VirtualNic)
    assert device["attributes"]["dra.net/virtual"] == {"bool": True}
    assert device["attributes"]["dra.net/type"] == {"string": "veth"}
    assert not [k for k in device["attributes"] if k.startswith("resource.kubernetes.io/") or "pci" in k]


def test_nic_only_is_one_pool_of_one_slice() -> None:
    node = _render("nic-only", Schema.DRANET)
    [resource_slice] = node.slices
    assert resource_slice["spec"]["driver"] == "dra.net"
    assert resource_slice["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert len(resource_slice["spec"]["devices"]) == 4 + 8 + 16 + 2


def test_example_schema_matches_the_example_driver() -> None:
    node = _render("seed-example", Schema.EXAMPLE)
    [resource_slice] = node.slices
    assert resource_slice["spec"]["driver"] == "gpu.example.com"
    devices = resource_slice["spec"]["devices"]
    assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
    first = devices[0]
    assert first["attributes"]["index"] == {"int": 0}
    assert first["attributes"]["model"] == {"string": "LATEST-GPU-MODEL"}
    assert first["attributes"]["driverVersion"] == {"version": "1.0.0"}
    assert first["attributes"]["uuid"]["string"].startswith("gpu-")
    assert first["capacity"] == {"memory": {"value": "80Gi"}}


def test_default_schemas_follow_the_devices() -> None:
    dgx = render_node(resolve_inventory(load_profile("dgx-h100"), node_name=NODE))
    assert {s["spec"]["driver"] for s in dgx.slices} == {"gpu.nvidia.com", "dra.net"}
    nic_only = render_node(resolve_inventory(load_profile("nic-only"), node_name=NODE), schemas=[Schema.NVIDIA])
    assert nic_only.slices == ()
