"""The Go test driver's command line: every mode is one flag set, and every placeholder is one the harness fills."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.node.drivers import DriverContext, render_driver_argv
from tests.drivers.faulty_plugin import DEFECTS, VARIANTS
from tests.drivers.minidra import MODE_FLAGS, MiniMode, compute_source_digest, minidra_command

CONTEXT = DriverContext(node="n1", kubelet_root=Path("/k"), cdi_dir=Path("/c"), kubeconfig=Path("/kc"))


@pytest.mark.parametrize("mode", list(MiniMode), ids=[m.value for m in MiniMode])
def test_each_mode_renders_with_the_harness_placeholders(mode: MiniMode) -> None:
    argv = render_driver_argv(minidra_command(binary=Path("/bin/minidra"), mode=mode), context=CONTEXT)
    assert argv[:11] == [
        "/bin/minidra",
        "--node-name",
        "n1",
        "--registry-dir",
        "/k/plugins_registry",
        "--plugins-dir",
        "/k/plugins",
        "--cdi-dir",
        "/c",
        "--kubeconfig",
        "/kc",
    ]
    assert tuple(argv[11:]) == MODE_FLAGS[mode]


@pytest.mark.parametrize("mode", list(MiniMode), ids=[m.value for m in MiniMode])
def test_the_faulty_plugin_has_the_same_mode(mode: MiniMode) -> None:
    assert mode.value in VARIANTS
    assert mode.value not in DEFECTS  # a behaviour, not the defect of one check


def test_the_source_digest_follows_the_go_sources(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module x\n")
    (tmp_path / "main.go").write_text("package main\n")
    before = compute_source_digest(source=tmp_path)
    (tmp_path / "notes.txt").write_text("not part of the build\n")
    assert compute_source_digest(source=tmp_path) == before
    (tmp_path / "main.go").write_text("package main\n\nfunc main() {}\n")
    assert compute_source_digest(source=tmp_path) != before
