"""The shipped kind cluster config turns on exactly the feature gates and API versions of fakedev's local control
plane, and labels its workers with profiles that exist — so a kind cluster runs what the tests ran."""

from __future__ import annotations

from pathlib import Path

import yaml

from fakedev.profiles import builtin_profile_names
from harness.cluster.config import DRA_FEATURE_GATES, RUNTIME_CONFIG

KIND_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "kind" / "cluster.yaml"


def _config() -> dict[str, object]:
    doc = yaml.safe_load(KIND_CONFIG.read_text())
    assert isinstance(doc, dict)
    return doc


def test_the_kind_config_has_the_local_control_planes_feature_gates() -> None:
    assert _config()["featureGates"] == dict(DRA_FEATURE_GATES)


def test_the_kind_config_serves_the_local_control_planes_api_versions() -> None:
    assert _config()["runtimeConfig"] == {k: str(v).lower() for k, v in RUNTIME_CONFIG.items()}


def test_the_kind_workers_name_built_in_profiles() -> None:
    nodes = _config()["nodes"]
    assert isinstance(nodes, list)
    labels = [n["labels"]["fakedev.io/profile"] for n in nodes if n["role"] == "worker"]
    assert labels and set(labels) <= set(builtin_profile_names())
