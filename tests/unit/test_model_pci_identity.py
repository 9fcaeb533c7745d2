"""PCI address arithmetic and deterministic identities."""

from __future__ import annotations

import re

import pytest

from fakedev.model import identity
from fakedev.model.nic import LinkType, pf_ifname, vf_ifname
from fakedev.model.pci import Bdf, PcieRoot, parse_cpulist, sriov_vf_address


@pytest.mark.parametrize("text", ["0000:53:00.0", "0001:b7:1f.7", "0000:00:01.0"], ids=["gpu", "max", "root-port"])
def test_bdf_round_trips(text: str) -> None:
    assert Bdf.parse(text).render() == text


@pytest.mark.parametrize(
    "text",
    ["0000:53:00", "0:53:00.0", "0000:53:00.8", "0000:53:20.0", "0000:5G:00.0", "0000:B7:00.0"],
    ids=["no-fn", "short-domain", "fn8", "dev32", "hex", "upper"],
)
def test_bdf_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a PCI address|out of range"):
        Bdf.parse(text)


@pytest.mark.parametrize(
    ("pf", "offset", "stride", "index", "vf"),
    [
        ("0000:05:00.0", 2, 1, 0, "0000:05:00.2"),  # ConnectX: PF 05:00.0 → VF0 05:00.2
        ("0000:05:00.0", 2, 1, 6, "0000:05:01.0"),  # devfn carries into the device number
        ("0000:41:00.0", 4, 1, 19, "0000:41:02.7"),  # NVIDIA: VFs from function 4
        ("0000:05:1f.0", 2, 1, 6, "0000:06:00.0"),  # and the routing ID into the next bus
    ],
    ids=["connectx-vf0", "device-carry", "nvidia-vf19", "bus-carry"],
)
def test_sriov_vf_address(pf: str, offset: int, stride: int, index: int, vf: str) -> None:
    assert sriov_vf_address(Bdf.parse(pf), offset=offset, stride=stride, index=index).render() == vf


def test_vf_beyond_the_last_bus_is_an_error() -> None:
    with pytest.raises(ValueError, match="beyond the last bus"):
        sriov_vf_address(Bdf.parse("0000:ff:1f.0"), offset=2, stride=1, index=10)


def test_pcie_root_name() -> None:
    root = PcieRoot.parse("pci0000:b0", numa_node=1)
    assert (root.name, root.bus, root.numa_node, root.root_port.render()) == ("pci0000:b0", 0xB0, 1, "0000:b0:01.0")


def test_cpulist_expands_ranges() -> None:
    assert parse_cpulist("0-2,8,10-11") == (0, 1, 2, 8, 10, 11)


@pytest.mark.parametrize("text", ["", "3-1", "a", "1,1"], ids=["empty", "reversed", "word", "twice"])
def test_cpulist_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="cpulist"):
        parse_cpulist(text)


@pytest.mark.parametrize(
    ("bdf", "link", "name"),
    [
        ("0000:b7:00.0", LinkType.ETHERNET, "enp183s0f0np0"),
        ("0000:08:00.1", LinkType.ETHERNET, "enp8s0f1np0"),
        ("0000:18:00.0", LinkType.INFINIBAND, "ibp24s0"),
        ("0001:08:00.0", LinkType.ETHERNET, "enP1p8s0f0np0"),
    ],
    ids=["decimal-bus", "function", "infiniband", "domain"],
)
def test_pf_interface_names(bdf: str, link: LinkType, name: str) -> None:
    assert pf_ifname(Bdf.parse(bdf), link=link) == name


def test_vf_interface_name_follows_the_pf() -> None:
    assert vf_ifname(Bdf.parse("0000:b7:00.0"), index=3, link=LinkType.ETHERNET) == "enp183s0f0v3"


GPU_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MIG_UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def test_identities_are_deterministic() -> None:
    for make in (identity.gpu_uuid, identity.mig_uuid, identity.mac_address, identity.mdev_uuid):
        assert make(node="n1", key="0000:53:00.0") == make(node="n1", key="0000:53:00.0")


@pytest.mark.parametrize(
    "make",
    [identity.gpu_uuid, identity.mig_uuid, identity.mac_address, identity.mdev_uuid, identity.ib_hardware_address],
    ids=["gpu", "mig", "mac", "mdev", "ib"],
)
def test_identities_differ_between_nodes_and_devices(make: object) -> None:
    assert callable(make)
    values = {make(node=n, key=k) for n in ("n1", "n2") for k in ("0000:53:00.0", "0000:64:00.0")}
    assert len(values) == 4


def test_uuid_formats() -> None:
    assert GPU_UUID.match(identity.gpu_uuid(node="n", key="k"))
    assert MIG_UUID.match(identity.mig_uuid(node="n", key="k"))  # version nibble 5, RFC variant


def test_recreating_a_mig_instance_changes_its_uuid() -> None:
    assert identity.mig_uuid(node="n", key="k", incarnation=0) != identity.mig_uuid(node="n", key="k", incarnation=1)


@pytest.mark.parametrize("key", [f"dev{i}" for i in range(16)], ids=[f"dev{i}" for i in range(16)])
def test_mac_is_locally_administered_unicast(key: str) -> None:
    first = int(identity.mac_address(node="node", key=key).split(":")[0], 16)
    assert first & 0x02 and not first & 0x01


def test_example_uuid_matches_the_example_driver_form() -> None:
    assert re.match(
        r"^gpu-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$",
        identity.example_uuid(node="n", index=0),
    )
