"""``fakedev profile list|show|render``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fakedev.cli import main


def test_list_names_every_builtin_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names == ["a100-mixed", "dgx-h100", "hgx-h200", "kubevirt-host", "nic-only", "seed-example", "vgpu-host"]


def test_show_prints_a_device_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "show", "dgx-h100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "# releases: nvidia@v0.4.1, dranet@v1.4.0"  # the newest releases, not main
    assert lines[2].split() == ["NAME", "DRIVER", "TYPE", "PRODUCT/PROFILE", "BDF", "NUMA", "PCIEROOT", "MEMORY"]
    rows = {line.split()[0]: line.split() for line in lines[3:]}
    assert rows["gpu-0-mig-3g40gb-9-4"] == [
        "gpu-0-mig-3g40gb-9-4",
        "gpu.nvidia.com",
        "mig",
        "3g.40gb",
        "@4",
        "0000:53:00.0",
        "0",
        "pci0000:50",
        "40448Mi",
    ]
    assert rows["pci-0000-54-00-0"][:3] == ["pci-0000-54-00-0", "dra.net", "nic"]


def test_render_json_is_a_list_of_slices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "render", "dgx-h100", "--node-name", "n1", "--schema", "nvidia", "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["kind"] == "List"
    assert {i["spec"]["nodeName"] for i in document["items"]} == {"n1"}
    assert {i["spec"]["driver"] for i in document["items"]} == {"gpu.nvidia.com"}
    assert len(document["items"]) == 9


def test_render_schema_pins_a_release(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "plain.yaml"
    path.write_text(
        'name: plain\npcieRoots: [{name: "pci0000:00"}]\n'
        'gpus: [{product: h100-sxm5-80gb, root: "pci0000:00", mig: {mode: disabled}}]\n'
    )

    def gpu_attributes(schema: str) -> dict[str, object]:
        args = ["profile", "render", str(path), "--node-name", "n1", "--schema", schema, "-o", "json"]
        assert main(args) == 0
        items = json.loads(capsys.readouterr().out)["items"]
        device = next(d for i in items for d in i["spec"].get("devices", []) if d["name"] == "gpu-0")
        return dict(device["attributes"])

    assert "pcieBusID" in gpu_attributes("nvidia@v25.8.1")
    assert "pcieBusID" not in gpu_attributes("nvidia@v0.4.1")


def test_render_refuses_an_unknown_release(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["profile", "render", "dgx-h100", "--node-name", "n1", "--schema", "nvidia@v26.1.0"])
    err = capsys.readouterr().err
    assert "unknown nvidia release 'v26.1.0' in 'nvidia@v26.1.0' (known: v25.8.1, v25.12.0, v0.4.1, main)" in err


def test_render_yaml_is_one_document_per_slice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "render", "seed-example", "--node-name", "n1", "--generation", "3"]) == 0
    [document] = list(yaml.safe_load_all(capsys.readouterr().out))
    assert document["kind"] == "ResourceSlice" and document["spec"]["pool"]["generation"] == 3


def test_bad_profile_is_a_one_line_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text('name: bad\npcieRoots: [{name: "pci0000:00"}]\ngpus: [{product: h300, root: "pci0000:00"}]\n')
    assert main(["profile", "show", str(path)]) == 1
    assert capsys.readouterr().err == (
        f"fakedev: error: {path}:3: gpus[0].product: unknown product 'h300' (known: a100-sxm4-40gb, a100-sxm4-80gb, "
        "h100-sxm5-80gb, h200-sxm-141gb, h200-nvl-141gb, b200-180gb)\n"
    )
