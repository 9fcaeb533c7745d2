"""The fake node rig's pure parts: the plugin's command line and what each schema's plugin needs of the hardware."""

from __future__ import annotations

import sys
from pathlib import Path

from fakedev.cli.rig import PLUGIN_PLACEHOLDERS, NodeHardware, RigSpec, plugin_arguments, plugin_command
from fakedev.model.inventory import resolve_inventory
from fakedev.nics.hardware import NicHardware
from fakedev.nics.node import NodeNics
from fakedev.nics.ports import compute_ports
from fakedev.profiles import load_profile
from fakedev.render import Schema, parse_schema
from harness.node.drivers import DriverContext, render_driver_argv


def _hardware(profile: str, *, with_nics: bool) -> NodeHardware:
    inventory = resolve_inventory(load_profile(profile), node_name="node-a")
    nics = (
        NodeNics(
            hardware=NicHardware(node_netns="fakedev-x-host", fabric_netns="fakedev-x-fabric"),
            ports=tuple(compute_ports(inventory)),
        )
        if with_nics
        else None
    )
    return NodeHardware(profile=profile, inventory=inventory, nics=nics)


def test_the_plugin_command_fills_in_per_node_through_placeholders() -> None:
    command = plugin_command(profile="dgx-h100", schema=Schema.NVIDIA, extra=("--log-level", "WARNING"))
    assert command[:4] == (sys.executable, "-m", "fakedev", "plugin")
    assert command[4:] == plugin_arguments(profile="dgx-h100", schema=Schema.NVIDIA, extra=("--log-level", "WARNING"))
    argv = render_driver_argv(
        command,
        context=DriverContext(node="node-a", kubelet_root=Path("/k"), cdi_dir=Path("/cdi"), kubeconfig=Path("/kc")),
    )
    assert argv[4:] == [
        "--profile",
        "dgx-h100",
        "--schema",
        "nvidia",
        "--node-name",
        "node-a",
        "--kubelet-root",
        "/k",
        "--cdi-dir",
        "/cdi",
        "--kubeconfig",
        "/kc",
        "--log-level",
        "WARNING",
    ]


def test_without_a_schema_the_plugin_chooses_the_profiles_only_one() -> None:
    assert plugin_arguments(profile="seed-example") == ("--profile", "seed-example", *PLUGIN_PLACEHOLDERS)


def test_only_the_dranet_plugin_is_pointed_at_the_nics() -> None:
    hardware = _hardware("dgx-h100", with_nics=True)
    assert hardware.schemas == (Schema.NVIDIA, Schema.DRANET)
    assert hardware.plugin_args(Schema.DRANET) == ("--netns", "fakedev-x-host", "--fabric-netns", "fakedev-x-fabric")
    assert hardware.plugin_args(Schema.NVIDIA) == ()


def test_a_node_whose_nics_were_left_out_gives_the_dranet_plugin_nothing() -> None:
    hardware = _hardware("dgx-h100", with_nics=False)
    assert hardware.plugin_args(Schema.DRANET) == ()
    assert _hardware("seed-example", with_nics=False).schemas == (Schema.EXAMPLE,)


def test_a_pinned_release_is_passed_to_the_plugin() -> None:
    _, pin = parse_schema("nvidia@main")
    arguments = plugin_arguments(profile="dgx-h100", schema=Schema.NVIDIA, pin=pin)
    assert arguments[:4] == ("--profile", "dgx-h100", "--schema", "nvidia@main")


def test_a_rig_pins_only_the_schemas_its_spec_names() -> None:
    pins = tuple(parse_schema(d)[1] for d in ("nvidia@main", "dranet"))
    spec = RigSpec(name="n", profile="dgx-h100", pins=pins)
    assert spec.pin_of(Schema.NVIDIA) == pins[0]
    assert spec.pin_of(Schema.DRANET) is None  # no release named: the profile's
