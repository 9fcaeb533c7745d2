"""The prepare plan of every device kind, computed from real inventories of the shipped profiles (pure, no files)."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

import cdi
from fakedev.driver import metadata
from fakedev.driver.cdi_layout import CdiLayout, cdi_layout_for
from fakedev.driver.checkpoint import ClaimRecord
from fakedev.driver.claims import compute_claim_plan
from fakedev.driver.plan import (
    PrepareDirs,
    PreparePlan,
    compute_base_spec,
    compute_device_configs,
    compute_nic_assignments,
    compute_prepare_plan,
    compute_recorded_files,
    compute_unprepare_plan,
)
from fakedev.driver.preparers import PREPARERS, MdevRequest
from fakedev.errors import ClaimError
from fakedev.model.inventory import (
    DeviceKind,
    ExampleGpu,
    GpuDevice,
    MigDevice,
    NicPf,
    NicVf,
    PassthroughGpu,
    VgpuDevice,
    VirtualNic,
    resolve_inventory,
)
from fakedev.model.releases import NVIDIA_DEFAULT, NvidiaRelease
from fakedev.nics.plan import HostNic, NicAssignment, PreparedNic
from fakedev.profiles import load_profile
from fakedev.render import PublishedDevice, RenderedNode, Schema, render_node

NODE = "node-p"
UID = "0f1e2d3c-aaaa-bbbb-cccc-000000000001"
NOW = "2026-01-02T03:04:05Z"
DIRS = PrepareDirs(
    cdi_dir=Path("/var/run/cdi"), dev_root=Path("/plugin/dev"), metadata_root=Path("/plugin/dra-device-metadata")
)
NVIDIA, DRANET, EXAMPLE = "gpu.nvidia.com", "dra.net", "gpu.example.com"
Result = tuple[str, str, str | None]
"""(request, device, shareID) of one allocation result."""


@functools.cache
def _rendered(profile: str, *, fabric: bool = False) -> RenderedNode:
    p = load_profile(profile)
    if fabric:
        assert p.example is not None
        p = dataclasses.replace(p, example=dataclasses.replace(p.example, fabric_attach=("ready", "fails")))
    return render_node(resolve_inventory(p, node_name=NODE))


def _claim(driver: str, results: Sequence[Result], *, uid: str, config: Sequence[Any], pod_claim: str | None) -> Any:
    return {
        "metadata": {
            "uid": uid,
            "name": "c",
            "namespace": "ns",
            "annotations": {"resource.kubernetes.io/pod-claim-name": pod_claim} if pod_claim else {},
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": r, "driver": driver, "pool": NODE, "device": d, **({"shareID": s} if s else {})}
                        for r, d, s in results
                    ],
                    "config": list(config),
                }
            }
        },
    }


def _config(driver: str, api_version: str, *, requests: Sequence[str] = (), source: str = "FromClaim", **p: Any) -> Any:
    return {
        "source": source,
        "requests": list(requests),
        "opaque": {"driver": driver, "parameters": {"apiVersion": api_version, **p}},
    }


def _published(profile: str, driver: str, device: str, *, fabric: bool = False) -> PublishedDevice:
    return _rendered(profile, fabric=fabric).device(driver=driver, pool=NODE, name=device)


def _plan(
    profile: str,
    driver: str,
    results: Sequence[Result],
    *,
    uid: str = UID,
    config: Sequence[Any] = (),
    pod_claim: str | None = None,
    fabric: bool = False,
    others: Sequence[PreparedNic] = (),
    generation: int = 1,
    release: NvidiaRelease = NVIDIA_DEFAULT,
) -> PreparePlan:
    claim = compute_claim_plan(
        _claim(driver, results, uid=uid, config=config, pod_claim=pod_claim), uid=uid, driver=driver, node_name=NODE
    )
    published = [_published(profile, driver, d.device, fabric=fabric) for d in claim.devices]
    configs = compute_device_configs(claim, published)
    nics = compute_nic_assignments(
        claim=claim, published=published, configs=configs, node_name=NODE, kept={}, others=others
    )
    layout = _layout(driver, release=release)
    return compute_prepare_plan(
        claim=claim,
        published=published,
        configs=configs,
        nics=nics,
        driver=driver,
        layout=layout,
        base_spec=compute_base_spec(
            layout=layout,
            devices=[
                (r.device, p)
                for r, p in sorted(_rendered(profile, fabric=fabric).devices.items())
                if r.driver == driver
            ],
            dev_root=DIRS.dev_root,
        ),
        node_name=NODE,
        dirs=DIRS,
        generation=generation,
        now=NOW,
    )


def _layout(driver: str, *, release: NvidiaRelease = NVIDIA_DEFAULT) -> CdiLayout:
    schema = next(s for s in Schema if s.driver == driver)
    return cdi_layout_for(schema=schema, nvidia=release, driver=driver)


def _spec(plan: PreparePlan) -> Any:
    assert plan.claim_spec is not None
    return plan.claim_spec.spec.to_json()


def _edits(plan: PreparePlan, device: str) -> Any:
    (found,) = [d for d in _spec(plan)["devices"] if d["name"] == f"{plan.uid}-{device}"]
    return found["containerEdits"]


def _node_paths(edits: Any) -> list[str]:
    return [n["path"] for n in edits.get("deviceNodes", [])]


def _metadata(plan: PreparePlan, request: str) -> list[Any]:
    (found,) = [f for f in plan.metadata_files if f.path.parent.name == request]
    return [json.loads(line) for line in found.data.splitlines()]


def _conditions(plan: PreparePlan, device: str) -> list[str]:
    (entry,) = [e for e in plan.status_devices if e["device"] == device]
    return [c["type"] for c in entry["conditions"]]


# -- every kind has its preparer ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model_class",
    [GpuDevice, MigDevice, VgpuDevice, PassthroughGpu, NicPf, NicVf, VirtualNic, ExampleGpu],
    ids=lambda c: c.__name__,
)
def test_every_model_class_has_a_kind_with_a_preparer(model_class: type[Any]) -> None:
    assert model_class.kind in PREPARERS


def test_every_kind_belongs_to_one_model_class() -> None:
    classes = (GpuDevice, MigDevice, VgpuDevice, PassthroughGpu, NicPf, NicVf, VirtualNic, ExampleGpu)
    assert sorted(c.kind for c in classes) == sorted(DeviceKind) == sorted(PREPARERS)


# -- full GPU ----------------------------------------------------------------------------------------------------


def test_full_gpu_plan() -> None:
    gpu = _published("dgx-h100", NVIDIA, "gpu-0")
    assert isinstance(gpu.model, GpuDevice)
    plan = _plan("dgx-h100", NVIDIA, [("gpu", "gpu-0", None)])
    uuid = gpu.model.uuid
    assert plan.fake_nodes == tuple(
        DIRS.dev_root / n for n in ("nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
    )
    assert plan.claim_spec is not None
    assert plan.claim_spec.file_name == f"k8s.gpu.nvidia.com-claim_{UID}.yaml"
    assert _spec(plan)["kind"] == "k8s.gpu.nvidia.com/claim"
    edits = _edits(plan, "gpu-0")
    assert edits["env"] == [f"NVIDIA_VISIBLE_DEVICES={uuid}", f"FAKEDEV_GPU_0_UUID={uuid}"]
    assert edits["deviceNodes"][0] == {
        "path": "/dev/nvidia0",
        "hostPath": "/plugin/dev/nvidia0",
        "type": "c",
        "major": 1,
        "minor": 3,
        "permissions": "rw",
    }
    assert _node_paths(edits) == ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert plan.mdevs == () and plan.nics == ()


def test_full_gpu_metadata_files_and_their_spec() -> None:
    gpu = _published("dgx-h100", NVIDIA, "gpu-0")
    plan = _plan("dgx-h100", NVIDIA, [("gpu", "gpu-0", None)], generation=3)
    (meta,) = plan.metadata_files
    assert meta.path == DIRS.metadata_root / f"ns_c_{UID}" / "gpu" / "metadata.json"
    docs = _metadata(plan, "gpu")
    assert [d["apiVersion"] for d in docs] == ["metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1"]
    assert docs[0]["metadata"] == {"name": "c", "namespace": "ns", "uid": UID, "generation": 3}
    assert docs[0]["requests"] == [
        {
            "name": "gpu",
            "devices": [{"driver": NVIDIA, "pool": NODE, "name": "gpu-0", "attributes": dict(gpu.attributes)}],
        }
    ]
    assert meta.spec.file_name == f"gpu.nvidia.com_metadata_{UID}_gpu.json"
    (device,) = meta.spec.spec.to_json()["devices"]
    assert device["name"] == f"{UID}_gpu"
    assert device["containerEdits"]["mounts"] == [
        {
            "hostPath": str(meta.path),
            "containerPath": (
                "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/c/gpu/gpu.nvidia.com-metadata.json"
            ),
            "options": ["ro", "bind"],
        }
    ]
    assert plan.sync_dirs == (DIRS.cdi_dir, meta.path.parent, meta.path.parent.parent, DIRS.metadata_root)


def test_full_gpu_status_answer_and_record() -> None:
    plan = _plan("dgx-h100", NVIDIA, [("gpu", "gpu-0", None), ("gpu", "gpu-1", "share-1")], generation=2)
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "DevicePrepared",
        "lastTransitionTime": NOW,
        "message": "prepared by fakedev",
    }
    assert plan.status_devices == (
        {"driver": NVIDIA, "pool": NODE, "device": "gpu-0", "conditions": [ready]},
        {"driver": NVIDIA, "pool": NODE, "device": "gpu-1", "conditions": [ready], "shareID": "share-1"},
    )
    # The metadata device rides on the first device of its request only.
    assert [d.cdi_device_ids for d in plan.prepared] == [
        (f"k8s.gpu.nvidia.com/claim={UID}-gpu-0", f"gpu.nvidia.com/metadata={UID}_gpu"),
        (f"k8s.gpu.nvidia.com/claim={UID}-gpu-1",),
    ]
    assert plan.prepared[1].share_id == "share-1"
    assert plan.record == {
        "uid": UID,
        "namespace": "ns",
        "name": "c",
        "devices": [
            {
                "requestNames": ["gpu"],
                "pool": NODE,
                "device": "gpu-0",
                "cdiDeviceIDs": [f"k8s.gpu.nvidia.com/claim={UID}-gpu-0", f"gpu.nvidia.com/metadata={UID}_gpu"],
                "shareID": None,
            },
            {
                "requestNames": ["gpu"],
                "pool": NODE,
                "device": "gpu-1",
                "cdiDeviceIDs": [f"k8s.gpu.nvidia.com/claim={UID}-gpu-1"],
                "shareID": "share-1",
            },
        ],
        "cdiSpecFiles": [f"k8s.gpu.nvidia.com-claim_{UID}.yaml", f"gpu.nvidia.com_metadata_{UID}_gpu.json"],
        "metadataDir": f"ns_c_{UID}",
        "metadataGeneration": 2,
        "nics": [],
        "mdevs": [],
    }


def test_control_nodes_are_created_once_for_many_gpus() -> None:
    plan = _plan("dgx-h100", NVIDIA, [("gpu", "gpu-0", None), ("gpu", "gpu-1", None)])
    names = [p.name for p in plan.fake_nodes]
    assert names == ["nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia1"]


def test_subrequests_share_their_request_metadata_file_and_template_path() -> None:
    plan = _plan("dgx-h100", NVIDIA, [("gpu/big", "gpu-0", None), ("gpu/small", "gpu-1", None)], pod_claim="my-gpu")
    (meta,) = plan.metadata_files
    assert [r["name"] for r in _metadata(plan, "gpu")[0]["requests"]] == ["gpu/big", "gpu/small"]
    assert _metadata(plan, "gpu")[0]["podClaimName"] == "my-gpu"
    mount = meta.spec.spec.to_json()["devices"][0]["containerEdits"]["mounts"][0]
    assert mount["containerPath"].endswith("/resourceclaimtemplates/my-gpu/gpu/gpu.nvidia.com-metadata.json")
    assert [d.request_names for d in plan.prepared] == [("gpu",), ("gpu",)]


@pytest.mark.parametrize(
    ("config", "env"),
    [
        (
            [
                _config(NVIDIA, "resource.nvidia.com/v1beta1", source="FromClass", kind="GpuConfig", env={"A": "1"}),
                _config(
                    NVIDIA,
                    "resource.nvidia.com/v1beta1",
                    kind="GpuConfig",
                    sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
                    env={"B": "2", "A": "3"},
                ),
            ],
            ["FAKEDEV_SHARING_STRATEGY=TimeSlicing", "FAKEDEV_TIMESLICE_INTERVAL=Long", "A=3", "B=2"],
        ),
        (
            [
                _config(
                    NVIDIA,
                    "resource.fakedev.io/v1alpha1",
                    kind="GpuConfig",
                    sharing={"strategy": "MPS", "mpsConfig": {"partitionCount": 4}},
                )
            ],
            ["FAKEDEV_SHARING_STRATEGY=MPS", "FAKEDEV_PARTITION_COUNT=4"],
        ),
    ],
    ids=["class-then-claim", "mps"],
)
def test_opaque_config_reaches_the_gpu_env(config: list[Any], env: list[str]) -> None:
    plan = _plan("dgx-h100", NVIDIA, [("gpu", "gpu-0", None)], config=config)
    assert _edits(plan, "gpu-0")["env"][2:] == env


def test_nic_config_is_refused_for_a_gpu() -> None:
    config = [_config(NVIDIA, "resource.fakedev.io/v1alpha1", kind="NicConfig")]
    with pytest.raises(ClaimError, match=r"config\[0\]\.opaque\.parameters\.kind: must be one of GpuConfig"):
        _plan("dgx-h100", NVIDIA, [("gpu", "gpu-0", None)], config=config)


# -- MIG ---------------------------------------------------------------------------------------------------------


def _mig(profile: str, *, precreated: bool) -> str:
    rendered = _rendered(profile)
    return next(
        r.device
        for r, p in rendered.devices.items()
        if isinstance(p.model, MigDevice) and p.model.precreated == precreated
    )


def _uuid_env(plan: PreparePlan, device: str) -> str:
    key = device.upper().replace("-", "_")
    env: list[str] = _edits(plan, device)["env"]
    (value,) = [e.split("=", 1)[1] for e in env if e.startswith(f"FAKEDEV_{key}_UUID=")]
    return value


def test_dynamic_mig_gets_a_uuid_minted_for_the_claim() -> None:
    device = _mig("dgx-h100", precreated=False)
    plan = _plan("dgx-h100", NVIDIA, [("mig", device, None)])
    minted = _uuid_env(plan, device)
    assert minted.startswith("MIG-")
    assert _edits(plan, device)["env"][0] == f"NVIDIA_VISIBLE_DEVICES={minted}"
    assert _uuid_env(_plan("dgx-h100", NVIDIA, [("mig", device, None)]), device) == minted  # stable per claim
    other = _plan("dgx-h100", NVIDIA, [("mig", device, None)], uid="another-claim")
    assert _uuid_env(other, device) != minted  # a new instance for every claim


def test_dynamic_mig_gets_its_parent_node_and_two_capability_nodes() -> None:
    device = _mig("dgx-h100", precreated=False)
    model = _published("dgx-h100", NVIDIA, device).model
    assert isinstance(model, MigDevice)
    plan = _plan("dgx-h100", NVIDIA, [("mig", device, None)])
    paths = _node_paths(_edits(plan, device))
    assert paths[:4] == [
        f"/dev/nvidia{model.parent.minor}",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    caps = paths[4:]
    assert len(caps) == 2 and len(set(caps)) == 2
    assert all(c.startswith("/dev/nvidia-caps/nvidia-cap") for c in caps)
    env = _edits(plan, device)["env"]
    key = device.upper().replace("-", "_")
    assert f"FAKEDEV_{key}_PARENT_UUID={model.parent.uuid}" in env
    assert f"FAKEDEV_{key}_PROFILE={model.profile.name}" in env


def test_static_mig_keeps_its_precreated_uuid() -> None:
    device = _mig("a100-mixed", precreated=True)
    published = _published("a100-mixed", NVIDIA, device)
    plan = _plan("a100-mixed", NVIDIA, [("mig", device, None)])
    assert published.attributes["uuid"] == {"string": _uuid_env(plan, device)}


def test_visible_devices_list_every_gpu_and_mig_of_the_claim() -> None:
    mig = _mig("a100-mixed", precreated=True)
    plan = _plan("a100-mixed", NVIDIA, [("a", "gpu-0", None), ("b", mig, None)])
    gpu = _published("a100-mixed", NVIDIA, "gpu-0").model
    assert isinstance(gpu, GpuDevice)
    visible = f"NVIDIA_VISIBLE_DEVICES={gpu.uuid},{_uuid_env(plan, mig)}"
    assert _edits(plan, "gpu-0")["env"][0] == _edits(plan, mig)["env"][0] == visible


# -- vGPU and vfio passthrough -------------------------------------------------------------------------------------


def test_vgpu_creates_its_mdev_and_reports_its_uuid_in_metadata() -> None:
    rendered = _rendered("kubevirt-host")
    device = next(r.device for r, p in rendered.devices.items() if isinstance(p.model, VgpuDevice))
    published = _published("kubevirt-host", NVIDIA, device)
    vgpu = published.model
    assert isinstance(vgpu, VgpuDevice)
    plan = _plan("kubevirt-host", NVIDIA, [("vgpu", device, None)])
    assert plan.mdevs == (
        MdevRequest(
            uuid=vgpu.mdev_uuid,
            parents=vgpu.parent.vfs,
            mdev_type=vgpu.vgpu_type.mdev_type,
            iommu_group=vgpu.iommu_group,
        ),
    )
    assert plan.record["mdevs"] == [vgpu.mdev_uuid]
    (entry,) = _metadata(plan, "vgpu")[0]["requests"][0]["devices"]
    assert entry["attributes"] == {**dict(published.attributes), "mdevUUID": {"string": vgpu.mdev_uuid}}
    edits = _edits(plan, device)
    key = device.upper().replace("-", "_")
    assert edits["env"] == [
        f"FAKEDEV_{key}_MDEV_UUID={vgpu.mdev_uuid}",
        f"FAKEDEV_{key}_VGPU_TYPE={vgpu.vgpu_type.name}",
    ]
    assert _node_paths(edits) == ["/dev/vfio/vfio", f"/dev/vfio/{vgpu.iommu_group}"]


def test_vfio_passthrough_gets_its_iommu_group_node_only() -> None:
    gpu = _published("kubevirt-host", NVIDIA, "gpu-vfio-1").model
    assert isinstance(gpu, PassthroughGpu)
    config = [_config(NVIDIA, "resource.nvidia.com/v1beta1", kind="VfioDeviceConfig", env={"X": "y"})]
    plan = _plan("kubevirt-host", NVIDIA, [("vm", "gpu-vfio-1", None)], config=config)
    group = gpu.pci.iommu_group
    edits = _edits(plan, "gpu-vfio-1")
    assert edits["env"] == [
        f"FAKEDEV_GPU_VFIO_1_PCI_BUS_ID={gpu.bdf.render()}",
        f"FAKEDEV_GPU_VFIO_1_IOMMU_GROUP={group}",
        "X=y",
    ]
    # v0.4.1 adds the API node only when the request's VfioDeviceConfig sets iommu.enableAPIDevice.
    assert [(n["path"], n["hostPath"]) for n in edits["deviceNodes"]] == [
        (f"/dev/vfio/{group}", f"/plugin/dev/vfio/{group}"),
    ]
    assert _spec(plan)["containerEdits"] == {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}
    assert plan.fake_nodes == (DIRS.dev_root / "vfio" / str(group),)
    assert plan.mdevs == ()


# -- CDI per driver release ----------------------------------------------------------------------------------------


def _base_edits(plan: PreparePlan, device: str) -> Any:
    assert plan.base_spec is not None
    (found,) = [d for d in plan.base_spec.spec.to_json()["devices"] if d["name"] == device]
    return found["containerEdits"]


def test_claim_specs_are_yaml_documents_of_the_claim_kind() -> None:
    plan = _plan("dgx-h100", NVIDIA, [("gpu", "gpu-0", None)], release=NvidiaRelease.V25_12_0)
    assert plan.claim_spec is not None and plan.base_spec is None
    text = cdi.render_spec_text(plan.claim_spec.spec, path=Path(plan.claim_spec.file_name))
    assert text.startswith("---\ncdiVersion: ")
    doc = yaml.safe_load(text)
    assert (doc["kind"], [d["name"] for d in doc["devices"]]) == ("k8s.gpu.nvidia.com/claim", [f"{UID}-gpu-0"])
    # The release's spec-level void; the device's own list is applied after it, so the container sees the list.
    assert doc["containerEdits"] == {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}
    assert doc["devices"][0]["containerEdits"]["env"][0].startswith("NVIDIA_VISIBLE_DEVICES=GPU-")


def test_v25_12_0_puts_the_vfio_api_node_in_the_claim_specs_own_edits() -> None:
    gpu = _published("kubevirt-host", NVIDIA, "gpu-vfio-1").model
    assert isinstance(gpu, PassthroughGpu)
    group = gpu.pci.iommu_group
    plan = _plan("kubevirt-host", NVIDIA, [("vm", "gpu-vfio-1", None)], release=NvidiaRelease.V25_12_0)
    assert _node_paths(_edits(plan, "gpu-vfio-1")) == [f"/dev/vfio/{group}"]
    spec_edits = _spec(plan)["containerEdits"]
    assert spec_edits["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert [(n["path"], n["hostPath"]) for n in spec_edits["deviceNodes"]] == [
        ("/dev/vfio/vfio", "/plugin/dev/vfio/vfio")
    ]
    assert set(plan.fake_nodes) == {DIRS.dev_root / "vfio" / str(group), DIRS.dev_root / "vfio" / "vfio"}


@pytest.mark.parametrize(
    ("iommu", "api_node"),
    [({"enableAPIDevice": True}, True), ({"enableAPIDevice": False, "backendPolicy": "PreferIommuFD"}, False)],
    ids=["enabled", "disabled"],
)
def test_v0_4_1_gives_the_vfio_api_node_when_the_config_asks(iommu: dict[str, Any], *, api_node: bool) -> None:
    config = [_config(NVIDIA, "resource.nvidia.com/v1beta1", kind="VfioDeviceConfig", iommu=iommu)]
    plan = _plan("kubevirt-host", NVIDIA, [("vm", "gpu-vfio-1", None)], config=config, release=NvidiaRelease.V0_4_1)
    node = {"path": "/dev/vfio/vfio", "hostPath": "/plugin/dev/vfio/vfio", "type": "c", "major": 1, "minor": 3}
    assert _spec(plan)["containerEdits"].get("deviceNodes", []) == ([{**node, "permissions": "rw"}] if api_node else [])
    assert (DIRS.dev_root / "vfio" / "vfio" in plan.fake_nodes) is api_node


def test_v25_8_1_answers_base_spec_ids_and_writes_no_claim_spec_without_claim_edits() -> None:
    plan = _plan("dgx-h100", NVIDIA, [("gpu", "gpu-0", None), ("gpu", "gpu-1", None)], release=NvidiaRelease.V25_8_1)
    assert [d.cdi_device_ids for d in plan.prepared] == [
        ("k8s.gpu.nvidia.com/device=gpu-0", f"gpu.nvidia.com/metadata={UID}_gpu"),
        ("k8s.gpu.nvidia.com/device=gpu-1",),
    ]
    assert plan.claim_spec is None
    assert plan.record["cdiSpecFiles"] == [f"gpu.nvidia.com_metadata_{UID}_gpu.json"]
    assert plan.fake_nodes[0] == DIRS.dev_root / "nvidia0"  # prepare still makes the device's nodes


def test_v25_8_1_base_spec_holds_every_published_device_with_what_no_claim_changes() -> None:
    plan = _plan("dgx-h100", NVIDIA, [("gpu", "gpu-0", None)], release=NvidiaRelease.V25_8_1)
    assert plan.base_spec is not None
    doc = plan.base_spec.spec.to_json()
    assert plan.base_spec.file_name == "k8s.gpu.nvidia.com-device_base.yaml"
    assert doc["kind"] == "k8s.gpu.nvidia.com/device"
    assert [d["name"] for d in doc["devices"]] == sorted(
        r.device for r in _rendered("dgx-h100").devices if r.driver == NVIDIA
    )
    assert doc["containerEdits"] == {"env": ["NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=void"]}
    gpu = _published("dgx-h100", NVIDIA, "gpu-0").model
    assert isinstance(gpu, GpuDevice)
    edits = _base_edits(plan, "gpu-0")
    assert edits["env"] == [f"FAKEDEV_GPU_0_UUID={gpu.uuid}"]
    assert _node_paths(edits) == ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]


def test_v25_8_1_puts_what_a_claims_config_adds_in_a_claim_spec() -> None:
    config = [_config(NVIDIA, "resource.nvidia.com/v1beta1", kind="GpuConfig", env={"X": "y"})]
    plan = _plan("dgx-h100", NVIDIA, [("gpu", "gpu-0", None)], config=config, release=NvidiaRelease.V25_8_1)
    assert plan.prepared[0].cdi_device_ids[:2] == (
        "k8s.gpu.nvidia.com/device=gpu-0",
        f"k8s.gpu.nvidia.com/claim={UID}-gpu-0",
    )
    assert plan.claim_spec is not None
    assert plan.claim_spec.file_name == f"k8s.gpu.nvidia.com-claim_{UID}.yaml"
    assert _spec(plan)["kind"] == "k8s.gpu.nvidia.com/claim"
    assert _edits(plan, "gpu-0") == {"env": ["X=y"]}


def test_v25_8_1_names_a_dynamic_mig_instance_in_the_claim_spec_only() -> None:
    device = _mig("dgx-h100", precreated=False)
    plan = _plan("dgx-h100", NVIDIA, [("mig", device, None)], release=NvidiaRelease.V25_8_1)
    key = device.upper().replace("-", "_")
    assert not any(e.startswith(f"FAKEDEV_{key}_UUID=") for e in _base_edits(plan, device)["env"])
    assert _uuid_env(plan, device).startswith("MIG-")


def test_v25_8_1_keeps_fakedevs_vfio_nodes_on_the_base_spec_device() -> None:
    gpu = _published("kubevirt-host", NVIDIA, "gpu-vfio-1").model
    assert isinstance(gpu, PassthroughGpu)
    plan = _plan("kubevirt-host", NVIDIA, [("vm", "gpu-vfio-1", None)], release=NvidiaRelease.V25_8_1)
    assert _node_paths(_base_edits(plan, "gpu-vfio-1")) == ["/dev/vfio/vfio", f"/dev/vfio/{gpu.pci.iommu_group}"]
    assert DIRS.dev_root / "vfio" / "vfio" in plan.fake_nodes


def test_a_claim_answered_with_base_spec_ids_depends_on_the_base_spec() -> None:
    plan = _plan("dgx-h100", NVIDIA, [("gpu", "gpu-0", None)], release=NvidiaRelease.V25_8_1)
    assert plan.base_spec is not None
    files = compute_recorded_files(plan.record, dirs=DIRS, base_spec=plan.base_spec)
    assert files[0] == DIRS.cdi_dir / "k8s.gpu.nvidia.com-device_base.yaml"


# -- NICs --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "mtu"),
    [
        ("pci-0000-08-00-0", 9000),
        ("pci-0000-08-00-2", 9000),
        ("pci-0000-09-00-2", 1500),
        ("veth-fast0", 9000),
        ("veth-fast1", 1500),
    ],
    ids=["pf", "vf-of-a-jumbo-pf", "vf-default-mtu", "virtual", "virtual-default-mtu"],
)
def test_nic_is_handed_over_with_net_devices_and_reported(device: str, mtu: int) -> None:
    model = _published("nic-only", DRANET, device).model
    assert isinstance(model, NicPf | NicVf | VirtualNic)
    plan = _plan("nic-only", DRANET, [("nic", device, None)])
    (nic,) = plan.nics
    assert (nic.assignment.host_ifname, nic.assignment.pod_ifname, nic.assignment.mtu) == (model.ifname, "net1", mtu)
    assert (nic.hardware_mac, nic.hardware_mtu) == (model.mac, mtu)
    assert _edits(plan, device) == {"netDevices": [{"hostInterfaceName": model.ifname, "name": "net1"}]}
    assert _spec(plan)["cdiVersion"] == "1.1.0"
    network = {"interfaceName": "net1", "ips": list(nic.assignment.addresses), "hardwareAddress": nic.assignment.mac}
    (entry,) = plan.status_devices
    assert entry["networkData"] == network
    assert entry["conditions"][:2] == [
        {"type": "Ready", "status": "True", "reason": "NetworkDeviceReady", "lastTransitionTime": NOW},
        {"type": "NetworkReady", "status": "True", "reason": "NetworkReady", "lastTransitionTime": NOW},
    ]
    assert _metadata(plan, "nic")[0]["requests"][0]["devices"][0]["networkData"] == network
    assert plan.record["nics"] == [
        {
            "device": device,
            "hostIfname": model.ifname,
            "podIfname": "net1",
            "mac": nic.assignment.mac,
            "mtu": mtu,
            "addresses": list(nic.assignment.addresses),
            "hardwareMac": model.mac,
            "hardwareMtu": mtu,
        }
    ]
    assert plan.fake_nodes == () and plan.mdevs == ()


@pytest.mark.parametrize(
    ("device", "conditions"),
    [
        (
            "pci-0000-08-00-0",
            [("Ready", "NetworkDeviceReady"), ("NetworkReady", "NetworkReady"), ("RDMALinkReady",) * 2],
        ),
        (
            "pci-0000-08-00-2",
            [("Ready", "NetworkDeviceReady"), ("NetworkReady", "NetworkReady"), ("RDMALinkReady",) * 2],
        ),
        ("veth-fast0", [("Ready", "NetworkDeviceReady"), ("NetworkReady", "NetworkReady")]),
    ],
    ids=["roce-pf", "roce-vf", "virtual-without-rdma"],
)
def test_nic_status_has_dranets_condition_types_and_reasons(device: str, conditions: list[tuple[str, str]]) -> None:
    (entry,) = _plan("nic-only", DRANET, [("nic", device, None)]).status_devices
    assert [(c["type"], c["reason"]) for c in entry["conditions"]] == conditions
    # DraNet writes every condition True, without a message.
    assert all(c["status"] == "True" and "message" not in c for c in entry["conditions"])


def test_nic_config_names_the_interface_and_sets_env() -> None:
    config = [
        _config(
            DRANET,
            "resource.fakedev.io/v1alpha1",
            kind="NicConfig",
            interfaceName="data0",
            mtu=4000,
            addresses=["192.168.7.5/24"],
            env={"E": "v"},
        )
    ]
    plan = _plan("nic-only", DRANET, [("nic", "pci-0000-08-00-0", None)], config=config)
    (nic,) = plan.nics
    assert (nic.assignment.pod_ifname, nic.assignment.mtu, nic.assignment.addresses) == (
        "data0",
        4000,
        ("192.168.7.5/24",),
    )
    assert nic.hardware_mtu == 9000
    assert _edits(plan, "pci-0000-08-00-0") == {
        "env": ["E=v"],
        "netDevices": [{"hostInterfaceName": "enp8s0f0np0", "name": "data0"}],
    }


def test_nics_avoid_names_and_addresses_other_claims_hold() -> None:
    first = _plan("nic-only", DRANET, [("nic", "pci-0000-08-00-0", None)])
    second = _plan("nic-only", DRANET, [("nic", "veth-fast0", None)], uid="claim-2", others=first.nics)
    (a,), (b,) = first.nics, second.nics
    assert (a.assignment.pod_ifname, b.assignment.pod_ifname) == ("net1", "net2")
    assert not set(a.assignment.addresses) & set(b.assignment.addresses)


def test_a_kept_nic_is_reused_as_recorded() -> None:
    kept = PreparedNic(
        assignment=NicAssignment(
            device="veth-fast0",
            host_ifname="veth-fast0",
            pod_ifname="net7",
            mac="02:00:00:00:00:07",
            mtu=1400,
            addresses=("10.9.9.9/24",),
        ),
        hardware_mac="02:00:00:00:00:99",
        hardware_mtu=9000,
    )
    claim = compute_claim_plan(
        _claim(DRANET, [("nic", "veth-fast0", None)], uid=UID, config=(), pod_claim=None),
        uid=UID,
        driver=DRANET,
        node_name=NODE,
    )
    published = [_published("nic-only", DRANET, "veth-fast0")]
    configs = compute_device_configs(claim, published)
    nics = compute_nic_assignments(
        claim=claim, published=published, configs=configs, node_name=NODE, kept={"veth-fast0": kept}, others=()
    )
    assert nics == {"veth-fast0": kept}


def test_an_infiniband_port_is_refused() -> None:
    with pytest.raises(ClaimError, match="pci-0000-b7-00-0 is an InfiniBand port; fakedev emulates only Ethernet"):
        _plan("nic-only", DRANET, [("nic", "pci-0000-b7-00-0", None)])


def test_gpu_config_is_refused_for_a_nic() -> None:
    config = [_config(DRANET, "resource.nvidia.com/v1beta1", kind="GpuConfig")]
    with pytest.raises(ClaimError, match=r"kind: must be one of NicConfig for this device, not 'GpuConfig'"):
        _plan("nic-only", DRANET, [("nic", "veth-fast0", None)], config=config)


# -- example GPUs ------------------------------------------------------------------------------------------------


def test_example_gpu_env_follows_the_example_driver() -> None:
    gpu = _published("seed-example", EXAMPLE, "gpu-3").model
    assert isinstance(gpu, ExampleGpu)
    config = [
        _config(
            EXAMPLE,
            "gpu.resource.example.com/v1alpha1",
            kind="GpuConfig",
            sharing={"strategy": "SpaceSharing", "spaceSharingConfig": {"partitionCount": 2}},
            env={"Z": "1"},
        )
    ]
    plan = _plan("seed-example", EXAMPLE, [("gpu", "gpu-3", "share-a")], config=config)
    assert _edits(plan, "gpu-3") == {
        "env": [
            "GPU_DEVICE_3=gpu-3",
            f"GPU_DEVICE_3_UUID={gpu.uuid}",
            "GPU_DEVICE_3_SHARING_STRATEGY=SpaceSharing",
            "GPU_DEVICE_3_PARTITION_COUNT=2",
            "Z=1",
        ]
    }
    assert plan.fake_nodes == ()
    assert plan.status_devices[0]["shareID"] == "share-a"
    assert _conditions(plan, "gpu-3") == ["Ready"]


@pytest.mark.parametrize(
    ("device", "conditions"),
    [("gpu-0", ["FabricAttached", "Ready"]), ("gpu-1", ["Ready"]), ("gpu-2", ["Ready"])],
    ids=["ready", "fails", "local"],
)
def test_fabric_attached_example_gpu_reports_the_binding_condition(device: str, conditions: list[str]) -> None:
    plan = _plan("seed-example", EXAMPLE, [("gpu", device, None)], fabric=True)
    assert _conditions(plan, device) == conditions
    if conditions[0] == "FabricAttached":
        assert plan.status_devices[0]["conditions"][0] == {
            "type": "FabricAttached",
            "status": "True",
            "reason": "Attached",
            "lastTransitionTime": NOW,
            "message": "gpu-0 attached to the node through the fabric",
        }


# -- what a claim's files are, for unprepare and for the checkpoint shortcut ----------------------------------------


def test_a_claims_metadata_directory_is_unique_per_uid_and_fits_a_file_name() -> None:
    long_name = "n" * 253
    name = metadata.host_claim_dir_name(namespace="x" * 63, name=long_name, uid=UID)
    assert len(name) == 255 and name.endswith(f"_{UID}") and name.startswith("x" * 63 + "_nnn")
    assert metadata.host_claim_dir_name(namespace="ns", name="c", uid=UID) == f"ns_c_{UID}"


def test_unprepare_without_a_record_looks_only_at_the_uids_own_directory_and_the_old_naming() -> None:
    plan = compute_unprepare_plan(
        driver=NVIDIA, node_name=NODE, uid=UID, namespace="ns", name="c", record=None, dirs=DIRS, node_nics={}
    )
    assert plan.metadata_dir == DIRS.metadata_root / f"ns_c_{UID}"
    assert plan.legacy_metadata_dir == DIRS.metadata_root / "ns_c"  # removed only if its files name this UID
    # Every name a claim spec has had, so one prepared under another release (or an older fakedev) goes too.
    assert (plan.claim_spec_files, plan.metadata_spec_prefix) == (
        (f"k8s.gpu.nvidia.com-device_{UID}.json", f"k8s.gpu.nvidia.com-claim_{UID}.yaml"),
        f"gpu.nvidia.com_metadata_{UID}_",
    )


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [("ns_c", "ns_c"), ("", None), ("../../etc", None), ("..", None)],
    ids=["older-plugin", "none", "escaping", "parent"],
)
def test_unprepare_with_a_record_removes_the_directory_it_names_if_that_is_a_plain_name(
    recorded: str, expected: str | None
) -> None:
    record: ClaimRecord = {**_plan("dgx-h100", NVIDIA, [("gpu", "gpu-0", None)]).record, "metadataDir": recorded}
    plan = compute_unprepare_plan(
        driver=NVIDIA, node_name=NODE, uid=UID, namespace="ns", name="c", record=record, dirs=DIRS, node_nics={}
    )
    assert plan.metadata_dir == (DIRS.metadata_root / expected if expected else None)
    assert plan.legacy_metadata_dir is None


def test_a_recorded_claim_depends_on_its_specs_and_each_requests_metadata_file() -> None:
    plan = _plan("dgx-h100", NVIDIA, [("a", "gpu-0", None), ("a", "gpu-1", None), ("b/x", "gpu-2", None)])
    claim_dir = DIRS.metadata_root / f"ns_c_{UID}"
    assert compute_recorded_files(plan.record, dirs=DIRS, base_spec=None) == (
        DIRS.cdi_dir / f"k8s.gpu.nvidia.com-claim_{UID}.yaml",
        DIRS.cdi_dir / f"gpu.nvidia.com_metadata_{UID}_a.json",
        DIRS.cdi_dir / f"gpu.nvidia.com_metadata_{UID}_b.json",
        claim_dir / "a" / "metadata.json",
        claim_dir / "b" / "metadata.json",
    )
    assert {f.path for f in plan.metadata_files} == set(
        compute_recorded_files(plan.record, dirs=DIRS, base_spec=None)[3:]
    )


def test_unprepare_without_a_record_resets_only_nics_carrying_the_claims_mac() -> None:
    prepared = _plan("nic-only", DRANET, [("nic", "pci-0000-08-00-2", None)])
    (nic,) = prepared.nics
    node_nics = {
        "pci-0000-08-00-2": HostNic(ifname="enp8s0f0v0", mac=nic.hardware_mac, mtu=9000),
        "veth-fast1": HostNic(ifname="veth-fast1", mac="02:00:00:00:00:01", mtu=1500),
    }
    plan = compute_unprepare_plan(
        driver=DRANET, node_name=NODE, uid=UID, namespace="ns", name="c", record=None, dirs=DIRS, node_nics=node_nics
    )
    stray = {s.host_ifname: s for s in plan.stray_nics}
    assert stray["enp8s0f0v0"].claim_mac == nic.assignment.mac  # what prepare gave it, so it is recognised
    assert (stray["enp8s0f0v0"].hardware_mac, stray["enp8s0f0v0"].hardware_mtu) == (nic.hardware_mac, 9000)
    assert stray["veth-fast1"].claim_mac != nic.assignment.mac
    recorded = compute_unprepare_plan(
        driver=DRANET,
        node_name=NODE,
        uid=UID,
        namespace="ns",
        name="c",
        record=prepared.record,
        dirs=DIRS,
        node_nics=node_nics,
    )
    assert (recorded.nics, recorded.stray_nics) == (prepared.nics, ())
