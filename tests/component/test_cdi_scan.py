"""Loading spec files from real (temp) CDI directories: formats, errors naming the file, directory priority."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdi import DeviceConflictError, SpecError, load_registry, load_spec_file, scan_spec_dirs


def spec_document(*, devices: dict[str, str], kind: str = "fake.example.com/gpu") -> dict[str, Any]:
    return {
        "cdiVersion": "0.5.0",
        "kind": kind,
        "devices": [{"name": name, "containerEdits": {"env": [f"FAKE={value}"]}} for name, value in devices.items()],
    }


def put(path: Path, document: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


def test_a_yaml_spec_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "fake.yaml"
    path.write_text(
        "cdiVersion: 0.5.0\nkind: fake.example.com/gpu\ndevices:\n- name: gpu0\n  containerEdits:\n    env: [A=1]\n"
    )

    assert load_spec_file(path).devices[0].name == "gpu0"


def test_an_unknown_field_in_a_file_names_the_file_and_path(tmp_path: Path) -> None:
    document = spec_document(devices={"gpu0": "a"})
    document["devices"][0]["containerEdits"]["deviceNodes"] = [{"path": "/dev/x", "major": 1, "Minor": 2}]
    path = put(tmp_path / "fake.json", document)

    with pytest.raises(SpecError) as caught:
        load_spec_file(path)

    assert str(caught.value).startswith(f"{path}: $.devices[0].containerEdits.deviceNodes[0].Minor: unknown field")


def test_scan_skips_missing_dirs_non_spec_files_and_subdirectories(tmp_path: Path) -> None:
    put(tmp_path / "cdi" / "a.json", spec_document(devices={"gpu0": "a"}))
    put(tmp_path / "cdi" / "notes.txt", {"ignored": True})
    put(tmp_path / "cdi" / ".a.json.xyz.tmp", {"partial": True})
    put(tmp_path / "cdi" / "sub.json" / "inner.json", spec_document(devices={"gpu9": "x"}))

    result = scan_spec_dirs(spec_dirs=[tmp_path / "absent", tmp_path / "cdi"])

    assert [(s.path.name, s.priority) for s in result.specs] == [("a.json", 1)]
    assert result.errors == ()


def test_a_bad_file_is_reported_and_the_others_still_load(tmp_path: Path) -> None:
    put(tmp_path / "cdi" / "a.json", spec_document(devices={"gpu0": "a"}))
    bad = tmp_path / "cdi" / "b.json"
    bad.write_text("{not json")

    registry = load_registry(spec_dirs=[tmp_path / "cdi"])

    assert registry.device_ids() == ("fake.example.com/gpu=gpu0",)
    assert [str(e).split(": ")[0] for e in registry.errors] == [str(bad)]


def test_the_later_directory_wins_on_disk(tmp_path: Path) -> None:
    static, dynamic = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    put(static / "z.json", spec_document(devices={"gpu0": "static", "gpu1": "static"}))
    put(dynamic / "a.json", spec_document(devices={"gpu0": "dynamic"}))

    registry = load_registry(spec_dirs=[static, dynamic])

    assert registry.resolve("fake.example.com/gpu=gpu0").device.container_edits.env == ("FAKE=dynamic",)
    assert registry.resolve("fake.example.com/gpu=gpu1").device.container_edits.env == ("FAKE=static",)


def test_two_files_in_one_directory_conflict(tmp_path: Path) -> None:
    put(tmp_path / "cdi" / "a.json", spec_document(devices={"gpu0": "a"}))
    put(tmp_path / "cdi" / "b.yaml", spec_document(devices={"gpu0": "b"}))

    registry = load_registry(spec_dirs=[tmp_path / "cdi"])

    assert registry.device_ids() == ()
    assert [e.paths for e in registry.errors if isinstance(e, DeviceConflictError)] == [
        (tmp_path / "cdi" / "a.json", tmp_path / "cdi" / "b.yaml")
    ]
