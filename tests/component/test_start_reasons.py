"""Why a container could not be created, from real CDI spec files: the device ID and the spec file at fault."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cdi
from harness.node.startreasons import explain_cdi_failure, find_cdi_culprits, read_runc_message, render_runc_failure

MISSING = "/dev/fakedev-missing0"


def _registry(cdi_dir: Path) -> tuple[cdi.Registry, Path]:
    good = cdi.Device(name="a", container_edits=cdi.ContainerEdits(env=("A=1",)))
    bad = cdi.Device(name="b", container_edits=cdi.ContainerEdits(device_nodes=(cdi.DeviceNode(path=MISSING),)))
    path = cdi.write_spec(
        spec=cdi.Spec(version="0.6.0", kind="k8s.gpu.example.com/gpu", devices=(good, bad)),
        cdi_dir=cdi_dir,
        file_name="k8s.gpu.example.com-gpu_claim.json",
    )
    return cdi.load_registry(spec_dirs=[cdi_dir]), path


def _failure(registry: cdi.Registry, ids: list[str]) -> str:
    oci = {"process": {"args": ["sh"]}, "linux": {}}
    with pytest.raises(cdi.CdiError) as caught:
        cdi.inject_devices(oci_spec=oci, registry=registry, device_ids=ids)
    return explain_cdi_failure(oci=oci, registry=registry, device_ids=ids, error=caught.value)


def test_a_missing_host_device_node_names_the_device_and_its_spec(tmp_path: Path) -> None:
    registry, path = _registry(tmp_path)
    said = _failure(registry, ["k8s.gpu.example.com/gpu=a", "k8s.gpu.example.com/gpu=b"])
    assert said.startswith(f"CDI injection failed for device k8s.gpu.example.com/gpu=b (CDI spec {path}): ")
    assert MISSING in said


def test_an_unknown_device_id_is_a_resolution_failure_naming_it(tmp_path: Path) -> None:
    registry, _ = _registry(tmp_path)
    said = _failure(registry, ["k8s.gpu.example.com/gpu=zz"])
    assert said.startswith("CDI device resolution failed for k8s.gpu.example.com/gpu=zz: ")


def test_runc_failures_carry_the_containers_cdi_devices() -> None:
    said = render_runc_failure(
        message="mount /nonexistent: no such file or directory", device_ids=["v/c=a"], specs=[Path("/cdi/v.json")]
    )
    assert said == (
        "runc create failed: mount /nonexistent: no such file or directory "
        "(container given CDI devices v/c=a from CDI spec /cdi/v.json)"
    )


def test_runcs_logfmt_frame_is_dropped_and_its_quotes_unescaped() -> None:
    line = (
        'time="2026-12-05T00:04:39Z" level=error msg="runc run failed: unable to start container process: '
        'exec: \\"/no/such\\": stat /no/such: no such file or directory"'
    )
    assert read_runc_message(line) == (
        'runc run failed: unable to start container process: exec: "/no/such": stat /no/such: no such file or directory'
    )
    assert read_runc_message("  plain words\n") == "plain words"


def test_a_path_a_runtime_quotes_is_traced_to_the_device_and_spec_that_named_it(tmp_path: Path) -> None:
    """containerd says only ``failed to stat CDI host device "/dev/x"``; the node's specs say whose path that is."""
    spec = {
        "cdiVersion": "0.6.0",
        "kind": "vendor.example/gpu",
        "devices": [
            {"name": "a", "containerEdits": {"deviceNodes": [{"path": "/dev/gone-a"}]}},
            {"name": "b", "containerEdits": {"env": ["B=1"]}},
        ],
    }
    (tmp_path / "vendor.json").write_text(json.dumps(spec))
    registry = cdi.load_registry(spec_dirs=[tmp_path])
    message = 'CDI device injection failed: failed to stat CDI host device "/dev/gone-a": no such file or directory'
    assert find_cdi_culprits(message=message, registry=registry) == (
        f"vendor.example/gpu=a (CDI spec {tmp_path / 'vendor.json'})",
    )
    assert find_cdi_culprits(message="no path here", registry=registry) == ()
    assert find_cdi_culprits(message='stat "/dev/other": missing', registry=registry) == ()
