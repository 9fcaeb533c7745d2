"""``fakedev deviceclasses``: one release's classes printed, every generated file written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fakedev.cli import main
from fakedev.model.releases import DriverReleases, NvidiaRelease
from fakedev.render import Schema
from fakedev.render.class_manifests import compute_generated_files
from fakedev.render.classes import ClassOrigin, render_device_classes


def test_prints_the_release_charts_classes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deviceclasses", "nvidia@v25.8.1"]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert docs == render_device_classes(
        schema=Schema.NVIDIA, releases=DriverReleases(nvidia=NvidiaRelease.V25_8_1), origins=[ClassOrigin.CHART]
    )


def test_unknown_release_is_refused_with_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deviceclasses", "nvidia@v9"]) == 1
    assert "known: v25.8.1, v25.12.0, v0.4.1, main" in capsys.readouterr().err


def test_update_writes_every_generated_file_and_then_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["deviceclasses", "--update", str(tmp_path)]) == 0
    generated = compute_generated_files()
    assert {str(p) for p in generated} == {str(f.relative_to(tmp_path)) for f in tmp_path.rglob("*") if f.is_file()}
    assert all((tmp_path / p).read_text() == text for p, text in generated.items())
    capsys.readouterr()
    assert main(["deviceclasses", "--update", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""
