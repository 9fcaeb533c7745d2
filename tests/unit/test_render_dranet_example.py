"""The dra.net (DraNet) and gpu.example.com (dra-example-driver) schemas."""

from __future__ import annotations

from fakedev.model.inventory import NicPf, NicVf, VirtualNic, resolve_inventory
from fakedev.profiles import load_profile
from fakedev.render import RenderedNode, Schema, render_node
from fakedev.render.types import Device

NODE = "node-b"


def _render(profile: str, schema: Schema) -> RenderedNode:
    return render_node(resolve_inventory(load_profile(profile), node_name=NODE), schemas=[schema])


def _devices(node: RenderedNode) -> dict[str, Device]:
    return {d["name"]: d for s in node.slices for d in s["spec"]["devices"]}


def test_pf_attributes() -> None:
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
        "dra.net/rdmaDevice": {"string": "mlx5_0"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:08:00.0"},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        "resource.kubernetes.io/numaNode": {"int": 0},
    }


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
