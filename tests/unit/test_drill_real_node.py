"""Drills on the real node: which scenarios it takes, the command line that refuses the others before any node
starts, and the report saying which kind of node a drill ran on."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fakedev.cli import main
from fakedev.cli.drill import scenario_file, shipped_scenario
from harness.drills.real_node import local_images, real_node_refusals
from harness.drills.report import drills_json, render_html
from harness.drills.runner import DrillResult, NodeKind
from harness.drills.scenario import load_scenario
from harness.runtime.images import STANDIN_IMAGE


def test_the_kubevirt_drill_runs_there_and_needs_the_stand_in_image() -> None:
    scenario = load_scenario(shipped_scenario("kubevirt-pci"))
    assert real_node_refusals(scenario) == []
    assert local_images(scenario.workloads) == (STANDIN_IMAGE,)


def test_a_drill_without_local_images_imports_none() -> None:
    assert local_images(load_scenario(shipped_scenario("gpu-exhaustion")).workloads) == ()


def test_node_reboot_is_refused_naming_the_step_and_its_line() -> None:
    scenario = load_scenario(shipped_scenario("node-reboot"))
    (reason,) = real_node_refusals(scenario)
    line = scenario.path.read_text().splitlines().index("  - {name: the node reboots, fault: node-reboot, node: dgx}")
    assert reason.startswith(f"step 4 (line {line + 1}) 'the node reboots': node-reboot is done to emulated nodes only")


def test_a_two_node_drill_is_refused() -> None:
    scenario = load_scenario(shipped_scenario("matrix/optional-node-operations"))
    assert any("one node per host; this drill has 2 nodes" in r for r in real_node_refusals(scenario))


def test_emulated_node_settings_are_refused_by_field() -> None:
    scenario = load_scenario(shipped_scenario("kubevirt-pci"))
    (node,) = scenario.nodes
    changed = dataclasses.replace(
        scenario, nodes=(dataclasses.replace(node, drivers=("nvidia@main",), max_pods=4, wipe_grace=5.0),)
    )
    assert real_node_refusals(changed) == [
        "node kv: driver release pins (nvidia@main) run on emulated nodes only",
        "node kv: maxPods/memory set the emulated Node's capacity; the real kubelet reports its own",
        "node kv: wipeGrace 5s; the real kubelet's is 30s",
    ]


def test_the_command_line_refuses_before_anything_starts() -> None:
    # No cluster, no node: the refusal comes first (a control plane would take many seconds to start).
    with pytest.raises(SystemExit) as refused:
        main(["drill", "kubevirt-pci", "node-reboot", "--real-node"])
    text = str(refused.value)
    assert text.startswith("fakedev drill --real-node: refused before starting anything:")
    assert "node-reboot: step 4 (line " in text and "'the node reboots'" in text
    assert "kubevirt-pci" not in text


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["drill", "--real-node"], "name the drills to run"),
        (["drill", "kubevirt-pci", "--address", "127.0.0.9"], "--address and --ca go with --real-node"),
        (
            ["drill", "kubevirt-pci", "--real-node", "--in-cluster", "--kubeconfig", "k"],
            "--real-node and --in-cluster",
        ),
        (["drill", "no-such-drill", "--real-node"], "no-such-drill is neither a scenario file nor a shipped drill"),
    ],
    ids=["no-drills-named", "address-without-real-node", "with-in-cluster", "unknown-name"],
)
def test_the_command_line_refuses_what_does_not_fit(argv: list[str], error: str) -> None:
    with pytest.raises(SystemExit, match=error):
        main(argv)


def test_a_shipped_name_or_a_file_is_a_scenario(tmp_path: Path) -> None:
    assert scenario_file(Path("kubevirt-pci")) == shipped_scenario("kubevirt-pci")
    assert scenario_file(Path("matrix/optional-node-operations")) == shipped_scenario("matrix/optional-node-operations")
    own = tmp_path / "mine.yaml"
    assert scenario_file(own) == own  # a file name stays a file name, even before it exists (load says why)


def test_the_report_says_which_kind_of_node_and_what_the_pods_printed() -> None:
    scenario = load_scenario(shipped_scenario("kubevirt-pci"))
    result = DrillResult(
        scenario=scenario,
        nodes={"kv": "127.0.0.5"},
        node_kind=NodeKind.REAL,
        outputs={"virt-launcher-testvm": "virt-launcher-standin: 2 hostdevs\n"},
    )
    (entry,) = json.loads(json.dumps(drills_json([result])))
    assert entry["nodeKind"] == "real" and entry["nodes"] == {"kv": "127.0.0.5"}
    assert entry["outputs"] == {"virt-launcher-testvm": "virt-launcher-standin: 2 hostdevs\n"}
    assert "the real node (this machine&#x27;s kubelet and containerd): kv → 127.0.0.5 (nvidia)" in render_html(
        [result], title="t"
    )
    (never_ran,) = drills_json([DrillResult(scenario=scenario, outcome="blocked")])
    assert never_ran["nodeKind"] is None
