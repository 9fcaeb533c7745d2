"""The real node's runc and CNI plugins as ``make build`` caches them: the releases they report and what they support.

A missing or stale cache entry fails the test (``cached_binaries`` names ``fakedev cluster build``), as any missing
binary does.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.cluster.build import CNI_PLUGINS, CNI_PLUGINS_VERSION, RUNC, RUNC_VERSION, cached_binaries

CNI_PLUGIN_NAMES = [p.name for p in CNI_PLUGINS.programs]


def _run(argv: list[str], *, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=30)
    assert done.returncode == 0, f"{argv} exited {done.returncode}: {done.stderr}"
    return done


def test_runc_reports_its_release() -> None:
    runc = cached_binaries(groups=(RUNC,)).path("runc")
    lines = _run([str(runc), "--version"]).stdout.splitlines()
    assert lines[0] == f"runc version {RUNC_VERSION.lstrip('v')}"
    assert "spec: 1.3.0" in lines  # the runtime-spec that defines linux.netDevices


def test_runc_moves_net_devices() -> None:
    """runc >= 1.4 moves ``linux.netDevices`` into the container's namespace; ``runc features`` says so."""
    runc = cached_binaries(groups=(RUNC,)).path("runc")
    features = json.loads(_run([str(runc), "features"]).stdout)
    assert features["linux"]["netDevices"] == {"enabled": True}
    assert features["annotations"]["org.opencontainers.runc.version"] == RUNC_VERSION.lstrip("v")


@pytest.mark.parametrize("name", CNI_PLUGIN_NAMES, ids=CNI_PLUGIN_NAMES)
def test_cni_plugin_answers_version_with_cni_1_0(name: str) -> None:
    """The conflist's ``cniVersion: 1.0.0`` must be one the plugin supports."""
    plugin = cached_binaries(groups=(CNI_PLUGINS,)).path(name)
    answer = json.loads(_run([str(plugin)], env={"CNI_COMMAND": "VERSION"}).stdout)
    assert "1.0.0" in answer["supportedVersions"]


@pytest.mark.parametrize("name", CNI_PLUGIN_NAMES, ids=CNI_PLUGIN_NAMES)
def test_cni_plugin_reports_its_release(name: str) -> None:
    plugin = cached_binaries(groups=(CNI_PLUGINS,)).path(name)
    # Run bare, a plugin describes itself on stderr.
    assert f"CNI {name} plugin {CNI_PLUGINS_VERSION}" in _run([str(plugin)], env={}).stderr.splitlines()
