"""Pure logic of the fake driver: claim plans, opaque config, metadata paths and stream, checkpoint, control."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fakedev.driver import metadata
from fakedev.driver.checkpoint import compute_checksum, parse_checkpoint, render_checkpoint
from fakedev.driver.claims import check_claim_ref, compute_claim_plan
from fakedev.driver.config import GPU_KINDS, NIC_KINDS, merge_configs, parse_config
from fakedev.errors import CheckpointError, ClaimError
from fakedev.faults import CallFault, Faults
from fakedev.model.inventory import resolve_inventory
from fakedev.plugin.control import ControlTarget, answer
from fakedev.plugin.devices import DeviceBoard
from fakedev.plugin.protocol import Call, SetFaultRequest, StatusBody, render_call_fault, render_request_line
from fakedev.profiles import load_profile
from fakedev.render import Schema
from tests.helpers import empty_record


def _claim(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "c", "namespace": "ns", "uid": "u-1", "annotations": {}},
        "status": status,
    }


def _allocation(*, node: str = "n1", driver: str = "gpu.example.com", config: list[Any] | None = None) -> Any:
    return {
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        },
        "devices": {
            "results": [{"request": "gpu", "driver": driver, "pool": node, "device": "gpu-0"}],
            "config": config or [],
        },
    }


@pytest.mark.parametrize(
    ("claim", "uid", "message"),
    [
        (_claim(), "u-1", "is not allocated"),
        (_claim(allocation=_allocation()), "u-2", "was deleted and re-created"),
        (_claim(allocation=_allocation(node="other")), "u-1", "allocated for another node"),
        (_claim(allocation=_allocation(driver="other.example.com")), "u-1", "has no device of driver"),
    ],
    ids=["unallocated", "replaced", "other-node", "other-driver"],
)
def test_claims_this_node_cannot_prepare_are_refused(claim: Any, uid: str, message: str) -> None:
    with pytest.raises(ClaimError, match=message):
        compute_claim_plan(claim, uid=uid, driver="gpu.example.com", node_name="n1")


def test_claim_plan_lists_our_devices_and_orders_class_config_first() -> None:
    config = [
        {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": "gpu.example.com", "parameters": {"a": 2}}},
        {"source": "FromClass", "opaque": {"driver": "gpu.example.com", "parameters": {"a": 1}}},
        {"source": "FromClass", "opaque": {"driver": "someone.else", "parameters": {"a": 0}}},
    ]
    plan = compute_claim_plan(
        _claim(allocation=_allocation(config=config)), uid="u-1", driver="gpu.example.com", node_name="n1"
    )
    assert [(d.request, d.pool, d.device) for d in plan.devices] == [("gpu", "n1", "gpu-0")]
    assert [c.parameters["a"] for c in plan.configs] == [1, 2]


@pytest.mark.parametrize(
    ("uid", "namespace", "name", "message"),
    [
        ("", "ns", "c", "uid"),
        ("u", "../etc", "c", "namespace"),
        ("u", "ns", "a/../b", "claim name"),
        ("u", "ns", "x" * 300, "claim name"),
    ],
    ids=["empty-uid", "dotdot-namespace", "slash-name", "long-name"],
)
def test_names_that_could_escape_a_path_or_url_are_refused(uid: str, namespace: str, name: str, message: str) -> None:
    with pytest.raises(ClaimError, match=message):
        check_claim_ref(uid=uid, namespace=namespace, name=name)


@pytest.mark.parametrize(
    ("params", "path"),
    [
        ({"apiVersion": "nope/v1", "kind": "GpuConfig"}, "parameters.apiVersion"),
        ({"apiVersion": "resource.fakedev.io/v1alpha1", "kind": "NicConfig"}, "parameters.kind"),
        ({"apiVersion": "resource.fakedev.io/v1alpha1", "kind": "GpuConfig", "extra": 1}, "parameters.extra"),
        (
            {"apiVersion": "resource.fakedev.io/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "Magic"}},
            "parameters.sharing.strategy",
        ),
        (
            {"apiVersion": "resource.fakedev.io/v1alpha1", "kind": "GpuConfig", "env": {"1BAD": "x"}},
            "parameters.env.1BAD",
        ),
    ],
    ids=["api-version", "wrong-kind", "unknown-field", "strategy", "env-name"],
)
def test_bad_opaque_config_names_the_field(params: dict[str, Any], path: str) -> None:
    with pytest.raises(ClaimError, match=f"invalid opaque config: {path}"):
        parse_config(params, kinds=GPU_KINDS)


def test_later_configs_win_and_env_maps_merge() -> None:
    first = parse_config(
        {
            "apiVersion": "resource.fakedev.io/v1alpha1",
            "kind": "GpuConfig",
            "env": {"A": "1", "B": "1"},
            "sharing": {"strategy": "TimeSlicing"},
        },
        kinds=GPU_KINDS,
    )
    second = parse_config(
        {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "env": {"B": "2"}}, kinds=GPU_KINDS
    )
    merged = merge_configs([first, second])
    assert dict(merged.env) == {"A": "1", "B": "2"}
    assert merged.sharing is not None and merged.sharing.strategy == "TimeSlicing"


def test_nic_config_validates_interface_name_and_mtu() -> None:
    with pytest.raises(ClaimError, match="interfaceName"):
        parse_config(
            {"apiVersion": "resource.fakedev.io/v1alpha1", "kind": "NicConfig", "interfaceName": "a/b"}, kinds=NIC_KINDS
        )
    ok = parse_config(
        {
            "apiVersion": "resource.fakedev.io/v1alpha1",
            "kind": "NicConfig",
            "interfaceName": "net7",
            "mtu": 1500,
            "addresses": ["10.1.0.5/24"],
        },
        kinds=NIC_KINDS,
    )
    assert (ok.interface_name, ok.mtu, ok.addresses) == ("net7", 1500, ("10.1.0.5/24",))


@pytest.mark.parametrize(
    ("pod_claim_name", "request_name", "expected"),
    [
        (None, "gpu", "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/c/gpu/d.example.com-metadata.json"),
        (
            "accel",
            "gpu/large",
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/accel/gpu/d.example.com-metadata.json",
        ),
    ],
    ids=["direct", "template-subrequest"],
)
def test_metadata_container_path(pod_claim_name: str | None, request_name: str, expected: str) -> None:
    claim = metadata.ClaimIdentity(namespace="ns", name="c", uid="u", pod_claim_name=pod_claim_name)
    assert str(metadata.container_path(claim=claim, request=request_name, driver="d.example.com")) == expected


def test_metadata_stream_has_both_versions_newest_first() -> None:
    claim = metadata.ClaimIdentity(namespace="ns", name="c", uid="u", pod_claim_name="p")
    requests: list[metadata.MetadataRequest] = [
        {"name": "gpu", "devices": [{"driver": "d", "pool": "n", "name": "gpu-0", "attributes": {"index": {"int": 0}}}]}
    ]
    docs = [
        json.loads(line)
        for line in metadata.render_metadata_stream(claim=claim, generation=3, requests=requests).splitlines()
    ]
    assert [d["apiVersion"] for d in docs] == list(metadata.METADATA_API_VERSIONS)
    assert docs[0]["metadata"]["generation"] == 3 and docs[0]["podClaimName"] == "p"
    assert docs[0]["requests"] == docs[1]["requests"] == requests


def _record(uid: str = "u") -> Any:
    return empty_record(uid)


def test_checkpoint_round_trips_and_detects_corruption() -> None:
    claims: Any = {"u": _record()}
    data = render_checkpoint(claims)
    assert json.loads(data)["version"] == "fakedev.dra/checkpoint-v2"
    assert parse_checkpoint(data, source="cp") == claims
    tampered = json.loads(data)
    tampered["claims"]["u"]["name"] = "other"
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        parse_checkpoint(json.dumps(tampered).encode(), source="cp")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        parse_checkpoint(data[:20], source="cp")
    with pytest.raises(CheckpointError, match="unknown checkpoint version 'v0'"):
        parse_checkpoint(
            json.dumps({"version": "v0", "checksum": compute_checksum({}), "claims": {}}).encode(), source="cp"
        )


def _v1(claims: Any, *, checksum: str | None = None) -> bytes:
    doc = {"version": "fakedev.dra/checkpoint-v1", "checksum": checksum or compute_checksum(claims), "claims": claims}
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    "extra",
    [
        {"state": "PrepareCompleted", "statusApplied": True, "nics": [], "mdevs": []},
        {"state": "PrepareCompleted", "statusApplied": False},
    ],
    ids=["with-nics-and-mdevs", "before-nics-and-mdevs"],
)
def test_v1_checkpoint_loads_without_its_dead_fields(extra: dict[str, Any]) -> None:
    v2 = _record()
    v1 = {k: v for k, v in v2.items() if k not in ("nics", "mdevs")} | extra
    assert parse_checkpoint(_v1({"u": v1}), source="cp") == {"u": v2}


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (_v1({"u": {"uid": "u"}}, checksum="0"), "cp: checksum mismatch"),
        (_v1({"u": "junk"}), "cp: claims.u: not an object"),
    ],
    ids=["checksum", "record-not-object"],
)
def test_corrupt_v1_checkpoint_is_refused(data: bytes, error: str) -> None:
    with pytest.raises(CheckpointError, match=error):
        parse_checkpoint(data, source="cp")


def test_call_fault_fails_n_times() -> None:
    fault = CallFault(fail_times=2, error="boom")
    assert [fault.apply(), fault.apply(), fault.apply()] == ["boom", "boom", None]


def _target(faults: Faults) -> ControlTarget:
    """A control target over the seed-example node's real device board; status is a fixed answer."""
    inventory = resolve_inventory(load_profile("seed-example"), node_name="n1")
    board = DeviceBoard.build(
        inventory=inventory, schema=Schema.EXAMPLE, driver="gpu.example.com", node_name="n1", health_timeout_seconds=30
    )

    def status() -> StatusBody:
        return {
            "driver": "gpu.example.com",
            "node": "n1",
            "devices": board.status(),
            "registration": {"registered": True, "error": "", "notifications": 1},
            "claims": [],
            "faults": {"prepare": render_call_fault(faults.prepare), "unprepare": render_call_fault(faults.unprepare)},
            "sliceGeneration": 1,
            "healthSubscribers": 0,
            "udevEvents": 0,
            "statusOwed": 0,
        }

    return ControlTarget(status=status, set_health=board.set_health, faults=faults)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (b'"nope"\n', "a request is a JSON object"),
        (b'{"op": "dance"}\n', "unknown op"),
        (b'{"op": "set-health", "device": "gpu-0", "health": "Sick"}\n', "health must be one of"),
        (b'{"op": "set-health", "device": "gpu-99", "health": "Unhealthy"}\n', "'gpu-99' is not published"),
        (b'{"op": "set-fault", "call": "prepare", "fault": {"delaySeconds": -1}}\n', "must be a finite number >= 0"),
        (b'{"op": "set-fault", "call": "prepare", "fault": {"bogus": 1}}\n', "unknown field(s) 'bogus'"),
    ],
    ids=["not-object", "unknown-op", "bad-health", "refused-by-target", "negative-delay", "unknown-field"],
)
def test_control_requests_are_validated(line: bytes, error: str) -> None:
    reply = answer(line, _target(Faults()))
    assert reply["ok"] is False and error in reply["error"]


def test_an_installed_call_fault_counts_down_and_the_request_stays_as_asked() -> None:
    faults = Faults()
    request = SetFaultRequest(call=Call.UNPREPARE, fault=CallFault(fail_times=1, error="boom"))
    reply = answer(render_request_line(request), _target(faults))
    assert reply == {"ok": True, "fault": {"delaySeconds": 0.0, "failTimes": 1, "error": "boom"}}
    assert [faults.unprepare.apply(), faults.unprepare.apply(), faults.prepare.apply()] == ["boom", None, None]
    assert request.fault.fail_times == 1
    assert answer(b'{"op": "clear-faults"}\n', _target(faults)) == {"ok": True}
    assert faults == Faults()


def test_address_changes_republish_the_dranet_slices() -> None:
    inventory = resolve_inventory(load_profile("nic-only"), node_name="n1")
    board = DeviceBoard.build(
        inventory=inventory, schema=Schema.DRANET, driver="dra.net", node_name="n1", health_timeout_seconds=30
    )

    def ipv4() -> dict[str, str]:
        (slice_,) = board.render_slices(1, None)
        return {
            d["name"]: d["attributes"]["dra.net/ipv4"]["string"]
            for d in slice_["spec"]["devices"]
            if "dra.net/ipv4" in d["attributes"]
        }

    board.set_addresses({"enp8s0f0np0": (), "veth-fast0": ()})
    assert (board.changes, board.republish.is_set(), ipv4()) == (0, False, {})  # nothing new: no republish
    board.set_addresses({"enp8s0f0np0": ("10.1.0.2/24",), "veth-fast0": ()})
    assert (board.changes, board.republish.is_set(), ipv4()) == (1, True, {"pci-0000-08-00-0": "10.1.0.2/24"})
    board.set_addresses({"enp8s0f0np0": ()})
    assert (board.changes, ipv4()) == (2, {})
