"""Node labels and taints from the command line, the Node objects they make, the runtime version a Node reports, and
the controllers a fleet needs."""

from __future__ import annotations

import argparse
import datetime

import pytest

from fakedev.cli.args import node_label, node_taint
from harness.cluster.config import CONTROLLERS
from harness.cluster.nodes import render_node, render_node_status
from harness.runtime.runc import parse_runc_version


def test_labels_parse_as_key_value() -> None:
    assert node_label("team=ml") == ("team", "ml")
    assert node_label("fakedev.io/fleet=f1") == ("fakedev.io/fleet", "f1")
    assert node_label("empty=") == ("empty", "")
    for bad in ("novalue", "=v", "a/b/c=v", "k=has space", "k=a/b"):
        with pytest.raises(argparse.ArgumentTypeError):
            node_label(bad)


def test_taints_parse_as_kubectl_writes_them() -> None:
    assert node_taint("fakedev.io/emulated=true:NoSchedule") == {
        "key": "fakedev.io/emulated",
        "value": "true",
        "effect": "NoSchedule",
    }
    assert node_taint("dedicated:NoExecute") == {"key": "dedicated", "effect": "NoExecute"}
    for bad in ("dedicated", "dedicated=gpu:Sometimes", ":NoSchedule", "a b:NoSchedule"):
        with pytest.raises(argparse.ArgumentTypeError, match="taint"):
            node_taint(bad)


def test_a_node_carries_its_taints_and_labels() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    node = render_node(name="n", labels={"team": "ml"}, taints=[taint])
    assert node["spec"] == {"taints": [taint]}
    assert node["metadata"]["labels"]["team"] == "ml"
    assert render_node(name="n", labels={})["spec"] == {}


def test_a_node_reports_the_runc_it_runs() -> None:
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    status = render_node_status(name="n", capacity={"cpu": "1"}, now=now, container_runtime="runc://1.5.3")
    assert status["status"]["nodeInfo"]["containerRuntimeVersion"] == "runc://1.5.3"
    assert parse_runc_version("runc version 1.5.3\nspec: 1.3.0\n") == "1.5.3"
    assert parse_runc_version("") == "unknown"
    assert parse_runc_version("something else") == "unknown"


def test_the_control_plane_runs_what_fleets_need() -> None:
    assert "statefulset-controller" in CONTROLLERS
    assert "job-controller" in CONTROLLERS  # the chart's pre-delete hook drains a fleet with a Job
