"""Node profiles: the built-in ones load, and every broken rule is reported with file, field path and rule."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fakedev.errors import ProfileError
from fakedev.model.inventory import resolve_inventory
from fakedev.model.profile import MigMode, parse_profile
from fakedev.profiles import builtin_profile_names, load_profile

BUILTIN = builtin_profile_names()


def test_builtin_profiles_are_the_promised_ones() -> None:
    assert {"dgx-h100", "hgx-h200", "a100-mixed", "vgpu-host", "nic-only", "seed-example"} <= set(BUILTIN)


@pytest.mark.parametrize("name", BUILTIN, ids=BUILTIN)
def test_builtin_profile_loads_and_resolves(name: str) -> None:
    profile = load_profile(name)
    assert profile.name == name
    inventory = resolve_inventory(profile, node_name="node-a")
    assert inventory.gpus or inventory.nics or inventory.example_gpus


def test_dgx_h100_topology() -> None:
    inventory = resolve_inventory(load_profile("dgx-h100"), node_name="n")
    assert [g.bdf.bus for g in inventory.gpus] == [0x53, 0x64, 0x75, 0x86, 0x97, 0xA8, 0xB9, 0xCA]
    assert [g.minor for g in inventory.gpus] == list(range(8))
    assert [g.pci.numa_node for g in inventory.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    # Every GPU shares its root complex with exactly one NIC.
    assert sorted(g.pci.root.name for g in inventory.gpus) == sorted(n.pci.root.name for n in inventory.nics)


def test_missing_addresses_get_the_lowest_free_bus_below_their_root() -> None:
    inventory = resolve_inventory(load_profile("hgx-h200"), node_name="n")
    assert [n.pci.bdf.render() for n in inventory.nics] == [
        "0000:16:00.0",
        "0000:4f:00.0",
        "0000:98:00.0",
        "0000:ce:00.0",
    ]


def test_static_mig_layout_is_kept() -> None:
    profile = load_profile("a100-mixed")
    static = [g for g in profile.gpus if g.mig.mode is MigMode.STATIC]
    assert [(i.profile.name, i.start) for i in static[0].mig.instances] == [
        ("3g.20gb", 0),
        ("2g.10gb", 4),
        ("1g.5gb", 6),
    ]


BASE = """\
name: t
numaNodes: [{id: 0, cpus: "0-7"}]
pcieRoots: [{name: "pci0000:50", numaNode: 0}, {name: "pci0000:60", numaNode: 0}]
"""

# (profile body appended to BASE, the line the error names, field path, rule fragment)
BAD = {
    "unknown-product": ('gpus: [{product: h300, root: "pci0000:50"}]', 4, "gpus[0].product", "unknown product 'h300'"),
    "invalid-start": (
        'gpus: [{product: h100-sxm5-80gb, root: "pci0000:50", mig: {mode: static, instances: '
        "[{profile: 3g.40gb, start: 2}]}}]",
        4,
        "gpus[0].mig.instances[0].start",
        "3g.40gb cannot start at memory slice 2 (valid: 0, 4)",
    ),
    "overlapping-placement": (
        'gpus: [{product: h100-sxm5-80gb, root: "pci0000:50", mig: {mode: static, instances: '
        "[{profile: 4g.40gb, start: 0}, {profile: 2g.20gb, start: 2}]}}]",
        4,
        "gpus[0].mig.instances[1].start",
        "2g.20gb@2 overlaps 4g.40gb@0",
    ),
    "unknown-mig-profile": (
        'gpus: [{product: a100-sxm4-40gb, root: "pci0000:50", mig: {mode: static, instances: '
        "[{profile: 1g.10gb+me, start: 0}]}}]",
        4,
        "gpus[0].mig.instances[0].profile",
        "a100-sxm4-40gb has no MIG profile '1g.10gb+me'",
    ),
    "static-without-instances": (
        'gpus: [{product: h100-sxm5-80gb, root: "pci0000:50", mig: {mode: static}}]',
        4,
        "gpus[0].mig.mode",
        "needs `instances`",
    ),
    "too-many-vfs": (
        'nics: [{product: connectx-7, root: "pci0000:50", vfs: 17}]',
        4,
        "nics[0].vfs",
        "17 VFs is more than the connectx-7 PF allows",
    ),
    "unknown-key": (
        'gpus: [{product: h100-sxm5-80gb, root: "pci0000:50", colour: green}]',
        4,
        "gpus[0].colour",
        "unknown key",
    ),
    "wrong-type": (
        'nics: [{product: connectx-7, root: "pci0000:50", vfs: "four"}]',
        4,
        "nics[0].vfs",
        "must be an integer, not a string",
    ),
    "duplicate-bus": (
        'gpus: [{product: h100-sxm5-80gb, root: "pci0000:50", address: "0000:53:00.0"}]\n'
        'nics: [{product: connectx-7, root: "pci0000:50", address: "0000:53:00.1"}]',
        5,
        "nics[0].address",
        "bus 53 is already used by gpus[0]",
    ),
    "bus-outside-root": (
        'gpus: [{product: h100-sxm5-80gb, root: "pci0000:50", address: "0000:64:00.0"}]',
        4,
        "gpus[0].address",
        "bus 64 is not below pci0000:50 (its buses are 51-5f)",
    ),
    "unknown-root": (
        'gpus: [{product: h100-sxm5-80gb, root: "pci0000:70"}]',
        4,
        "gpus[0].root",
        "unknown PCIe root 'pci0000:70'",
    ),
    "vgpu-unsupported": (
        'gpus: [{product: b200-180gb, root: "pci0000:50", vgpu: {modes: [time-sliced]}}]',
        4,
        "gpus[0].vgpu",
        "b200-180gb has no vGPU types",
    ),
    "both-vgpu-modes-without-groups": (
        'gpus: [{product: h100-sxm5-80gb, root: "pci0000:50", vgpu: {modes: [time-sliced, mig-backed]}}]',
        4,
        "gpus[0].vgpu",
        "needs features.compatibilityGroups: true",
    ),
    "vgpu-without-the-extension": (
        'gpus: [{product: h100-sxm5-80gb, root: "pci0000:50", vgpu: {modes: [time-sliced]}}]',
        4,
        "gpus[0].vgpu",
        "opt in with `extensions: [vgpu]`",
    ),
    "unknown-release": ("releases: {nvidia: v26.1.0}", 4, "releases.nvidia", "unknown nvidia release 'v26.1.0'"),
    "unknown-extension": ("extensions: [mps]", 4, "extensions[0]", "unknown extension 'mps' (known: vgpu)"),
    "vgpu-and-mig": (
        'gpus: [{product: h100-sxm5-80gb, root: "pci0000:50", vgpu: {modes: [mig-backed]}, mig: {mode: disabled}}]',
        4,
        "gpus[0].mig",
        "drop `mig`",
    ),
    "bad-shares": ("example: {count: 1, shares: half}", 4, "example.shares", "is not a share of one device"),
    "bad-fabric-attach": (
        "example: {count: 2, fabricAttach: [ready, maybe]}",
        4,
        "example.fabricAttach",
        "item 1: 'maybe' is not ready or fails",
    ),
    "fabric-attach-too-long": (
        "example: {count: 1, fabricAttach: [ready, fails]}",
        4,
        "example.fabricAttach",
        "lists 2 devices but count is 1",
    ),
    "skip-prepare-alone": (
        "example: {count: 1, skipNodeOperations: [NodePrepareResources]}",
        4,
        "example.skipNodeOperations",
        "only be skipped together with NodeUnprepareResources",
    ),
    "passthrough-and-mig": (
        'gpus: [{product: h100-sxm5-80gb, root: "pci0000:50", passthrough: true, mig: {mode: dynamic}}]',
        4,
        "gpus[0].passthrough",
        "bound to vfio-pci for passthrough has no MIG or vGPU",
    ),
    "passthrough-not-boolean": (
        'gpus: [{product: h100-sxm5-80gb, root: "pci0000:50", passthrough: vfio}]',
        4,
        "gpus[0].passthrough",
        "must be true or false",
    ),
    "bad-virtual-nic": ("virtualNics: [{name: Eth_0}]", 4, "virtualNics[0].name", "must be a DNS label"),
    "bad-numa": (
        'nics: [{product: connectx-7, root: "pci0000:50"}]\nfeatures: {compatibilityGroups: yes-please}',
        5,
        "features.compatibilityGroups",
        "must be true or false",
    ),
    "no-devices": ("", 1, "<top level>", "declares no devices"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_profile_names_file_line_field_and_rule(case: str) -> None:
    body, line, field, rule = BAD[case]
    with pytest.raises(ProfileError) as info:
        parse_profile(BASE + body, source="bad.yaml")
    message = str(info.value)
    assert message.startswith(f"bad.yaml:{line}: {field}: "), message
    assert rule in message, message


def test_invalid_yaml_is_a_profile_error() -> None:
    with pytest.raises(
        ProfileError, match=r"^bad\.yaml:2:1: not valid YAML: .* \(while parsing a flow sequence at 1:7\)$"
    ):
        parse_profile("name: [unclosed\n", source="bad.yaml")


def test_unknown_top_level_key() -> None:
    with pytest.raises(ProfileError, match=r"^bad\.yaml:4: gpu: unknown key"):
        parse_profile(BASE + "gpu: []", source="bad.yaml")


def test_duplicate_numa_node() -> None:
    text = textwrap.dedent("""\
        name: t
        numaNodes: [{id: 0, cpus: "0-7"}, {id: 0, cpus: "8-15"}]
        virtualNics: [{name: v0}]
        """)
    with pytest.raises(ProfileError, match=r"^bad\.yaml:2: numaNodes\[1\]\.id: NUMA node 0 is declared twice"):
        parse_profile(text, source="bad.yaml")


def test_load_profile_reports_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read the profile"):
        load_profile(tmp_path / "absent.yaml")


def test_load_profile_reads_a_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(BASE + 'gpus: [{product: h100-sxm5-80gb, root: "pci0000:50"}]\n')
    profile = load_profile(path)
    assert profile.source == str(path) and profile.gpus[0].address.render() == "0000:51:00.0"
