"""Fuzz a plugin process on its gRPC sockets: prepare and unprepare requests with claims of any number, names of any
length and content, duplicates, for DRA v1 and v1beta1; and raw bytes as the body of every method the plugin serves
(DRA, registration, health).

Every answer is OK with one entry per claim — the held claim's devices, or an error of its own — or
INVALID_ARGUMENT with short details; never UNKNOWN, INTERNAL or a timeout. After the run the plugin still serves, its
log is well-formed records only (no traceback, no forged line), its roots hold the files they held, and its peak
memory grew by little.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import grpc
import pytest
from google.protobuf.message import DecodeError, Message
from hypothesis import example, given
from hypothesis import strategies as st

from fakedev.driver.checkpoint import ClaimRecord, render_checkpoint
from kubeletapi import (
    dra_v1_pb2,
    dra_v1beta1_pb2,
    health_v1_pb2,
    health_v1alpha1_pb2,
    pluginregistration_v1_pb2,
)
from tests.fuzz.fuzzing import MARKS, MAX_INPUT, Figures, big_text, fuzz_settings, hostile_text, mutated, repeated
from tests.fuzz.plugin_process import DRIVER, FuzzedPlugin

pytestmark = MARKS

TIMEOUT: Final = 30.0
"""Per call: a plugin that takes longer than this over one request is hanging (a batch of 1000 claims takes ~1 s)."""
MAX_CLAIMS: Final = 1000
MAX_ERROR: Final = 3000
"""The longest per-claim error: a rule and a name of at most 253 characters, each possibly written as an escape."""
MAX_DETAILS: Final = 400
HELD_UID: Final = "f0e1d2c3-0000-4000-8000-00000000cafe"
HELD_DEVICE: Final = {
    "requestNames": ["gpu"],
    "pool": "n1",
    "device": "gpu-0",
    "cdiDeviceIDs": [f"k8s.{DRIVER}/gpu={HELD_UID}-gpu-0"],
    "shareID": "share-1",
}
HELD: Final[ClaimRecord] = {
    "uid": HELD_UID,
    "namespace": "fuzz-held",
    "name": "held",
    "devices": [HELD_DEVICE],  # type: ignore[list-item]
    "cdiSpecFiles": [f"k8s.{DRIVER}-{HELD_UID}.json"],
    "metadataDir": "",
    "metadataGeneration": 1,
    "nics": [],
    "mdevs": [],
}
# The rules Kubernetes gives names, written out here (not imported) so the oracle does not share the plugin's bugs.
UID: Final = re.compile(r"[A-Za-z0-9-]{1,64}")
DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

DRA_V1: Final = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
DRA_V1BETA1: Final = "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
REGISTRATION: Final = "/pluginregistration.Registration"


@dataclass(frozen=True, kw_only=True)
class Method:
    path: str
    request: Any
    """The request message class (its ``FromString`` is the oracle for whether a body decodes)."""
    response: Any
    registration: bool = False
    stream: bool = False


PREPARE: Final = {
    "v1": Method(
        path=f"{DRA_V1}/NodePrepareResources",
        request=dra_v1_pb2.NodePrepareResourcesRequest,
        response=dra_v1_pb2.NodePrepareResourcesResponse,
    ),
    "v1beta1": Method(
        path=f"{DRA_V1BETA1}/NodePrepareResources",
        request=dra_v1beta1_pb2.NodePrepareResourcesRequest,
        response=dra_v1beta1_pb2.NodePrepareResourcesResponse,
    ),
}
UNPREPARE: Final = {
    "v1": Method(
        path=f"{DRA_V1}/NodeUnprepareResources",
        request=dra_v1_pb2.NodeUnprepareResourcesRequest,
        response=dra_v1_pb2.NodeUnprepareResourcesResponse,
    ),
    "v1beta1": Method(
        path=f"{DRA_V1BETA1}/NodeUnprepareResources",
        request=dra_v1beta1_pb2.NodeUnprepareResourcesRequest,
        response=dra_v1beta1_pb2.NodeUnprepareResourcesResponse,
    ),
}
OTHERS: Final = [
    Method(
        path=f"{REGISTRATION}/GetInfo",
        request=pluginregistration_v1_pb2.InfoRequest,
        response=pluginregistration_v1_pb2.PluginInfo,
        registration=True,
    ),
    Method(
        path=f"{REGISTRATION}/NotifyRegistrationStatus",
        request=pluginregistration_v1_pb2.RegistrationStatus,
        response=pluginregistration_v1_pb2.RegistrationStatusResponse,
        registration=True,
    ),
    Method(
        path="/v1.DRAResourceHealth/NodeWatchResources",
        request=health_v1_pb2.NodeWatchResourcesRequest,
        response=health_v1_pb2.NodeWatchResourcesResponse,
        stream=True,
    ),
    Method(
        path="/v1alpha1.DRAResourceHealth/NodeWatchResources",
        request=health_v1alpha1_pb2.NodeWatchResourcesRequest,
        response=health_v1alpha1_pb2.NodeWatchResourcesResponse,
        stream=True,
    ),
]
EVERY_METHOD: Final = [*PREPARE.values(), *UNPREPARE.values(), *OTHERS]


# -- the oracle ----------------------------------------------------------------------------------------------------


def _valid_names(uid: str, namespace: str, name: str) -> bool:
    return bool(
        UID.fullmatch(uid)
        and len(namespace) <= 63
        and DNS_LABEL.fullmatch(namespace)
        and len(name) <= 253
        and DNS_SUBDOMAIN.fullmatch(name)
    )


def _whole_call_refused(uids: Sequence[str]) -> bool:
    return len(uids) > MAX_CLAIMS or "" in uids or len(set(uids)) < len(uids)


def _check_answer(method: Method, claims: Sequence[Any], code: grpc.StatusCode, details: str, answer: bytes) -> None:
    """What the plugin must answer to a request with these claims (the request's own ``Claim`` messages)."""
    uids = [c.uid for c in claims]
    if _whole_call_refused(uids):
        assert code == grpc.StatusCode.INVALID_ARGUMENT and len(details) < MAX_DETAILS, (code, details[:500])
        return
    assert code == grpc.StatusCode.OK, (code, details[:500])
    entries = method.response.FromString(answer).claims
    assert set(entries) == set(uids)
    preparing = method in PREPARE.values()
    for claim in claims:
        entry = entries[claim.uid]
        assert len(entry.error) < MAX_ERROR
        if not _valid_names(claim.uid, claim.namespace, claim.name):
            assert entry.error.startswith("claim "), entry.error[:200]
        elif not preparing:
            assert entry.error == ""  # an unknown claim unprepares as success
        elif claim.uid == HELD_UID and (claim.namespace, claim.name) == (HELD["namespace"], HELD["name"]):
            assert entry.error == "" and [_device(d) for d in entry.devices] == [_held_device(method)]
        elif claim.uid == HELD_UID:  # the held UID under another name is not handed the held devices
            assert entry.error == (
                f"claim {HELD_UID} is prepared on this node as {HELD['namespace']}/{HELD['name']}; "
                f"refusing to prepare it as {claim.namespace}/{claim.name}"
            ), entry.error[:300]
        else:
            assert entry.error == f"no API server configured; cannot read claim {claim.namespace}/{claim.name}"


def _device(device: Any) -> dict[str, Any]:
    shown = {
        "requestNames": list(device.request_names),
        "pool": device.pool_name,
        "device": device.device_name,
        "cdiDeviceIDs": list(device.cdi_device_ids),
    }
    if "share_id" in device.DESCRIPTOR.fields_by_name:
        shown["shareID"] = device.share_id if device.HasField("share_id") else None
    return shown


def _held_device(method: Method) -> dict[str, Any]:
    # v1beta1 has no share IDs on the wire.
    return (
        HELD_DEVICE
        if method.path.startswith(DRA_V1 + "/")
        else {k: v for k, v in HELD_DEVICE.items() if k != "shareID"}
    )


# -- the plugin ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Target:
    plugin: FuzzedPlugin
    dra: grpc.Channel
    registration: grpc.Channel

    def call(self, method: Method, body: bytes) -> tuple[grpc.StatusCode, str, bytes]:
        channel = self.registration if method.registration else self.dra
        # Without serializers the body goes out as given (the stubs' types cannot say so, hence Any).
        callable_: Any = channel.unary_stream(method.path) if method.stream else channel.unary_unary(method.path)
        try:
            if method.stream:
                stream = callable_(body, timeout=TIMEOUT)
                first = next(stream)
                stream.cancel()
                return grpc.StatusCode.OK, "", first
            return grpc.StatusCode.OK, "", callable_(body, timeout=TIMEOUT)
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or "", b""


@pytest.fixture
def target() -> Iterator[Target]:
    plugin = FuzzedPlugin.create()
    plugin_dir = plugin.paths.plugin_dir
    plugin_dir.mkdir(parents=True)
    plugin.cdi_dir.mkdir()
    (plugin_dir / "checkpoint.json").write_bytes(render_checkpoint({HELD_UID: HELD}))
    (plugin.cdi_dir / HELD["cdiSpecFiles"][0]).write_text("{}")
    try:
        plugin.start()
        with (
            grpc.insecure_channel(f"unix:{plugin.paths.dra_socket}") as dra,
            grpc.insecure_channel(f"unix:{plugin.paths.registration_socket}") as registration,
        ):
            yield Target(plugin=plugin, dra=dra, registration=registration)
    finally:
        plugin.stop()


def _fuzz(target: Target, figures: Figures, run: Callable[[], None]) -> None:
    """Run the Hypothesis test ``run`` against the plugin, then check what it left behind."""
    warm_up = _request(PREPARE["v1"], [("warm-up", "ns", "c")]).SerializeToString()
    target.call(PREPARE["v1"], warm_up)  # the driver's lock file exists from here on
    files = target.plugin.tree()
    _, peak_before = target.plugin.rss_kib()
    run()
    figures.rss_growth_mb = (target.plugin.rss_kib()[1] - peak_before) / 1024
    assert target.plugin.alive()
    assert target.plugin.foreign_log_lines() == []
    assert target.plugin.tree() == files
    assert figures.rss_growth_mb < 256


# -- structured requests ---------------------------------------------------------------------------------------------

VALID_UID: Final = st.from_regex(UID, fullmatch=True)
VALID_NAMESPACE: Final = st.from_regex(DNS_LABEL, fullmatch=True).filter(lambda s: len(s) <= 63)
VALID_NAME: Final = st.from_regex(DNS_SUBDOMAIN, fullmatch=True).filter(lambda s: len(s) <= 253)


def _names(valid: st.SearchStrategy[str], *specials: str) -> st.SearchStrategy[str]:
    return st.one_of(
        valid,
        valid.map(lambda s: s + "\n"),  # `$` in a Python regex also matches before a final newline
        hostile_text(limit=10_000),
        st.sampled_from(specials) if specials else st.nothing(),
    )


CLAIM: Final = st.tuples(
    _names(VALID_UID, HELD_UID, ""), _names(VALID_NAMESPACE, "fuzz-held"), _names(VALID_NAME, "held")
)
SMALL_LISTS: Final = st.lists(CLAIM, max_size=8)
CLAIM_LISTS: Final = st.one_of(
    # one_of picks a branch evenly, so the cheap lists get most of the branches and the costly batches one.
    *[SMALL_LISTS] * 6,
    st.lists(CLAIM, min_size=1, max_size=4).flatmap(lambda claims: st.permutations([*claims, claims[0]])),
    st.lists(CLAIM, min_size=1, max_size=4).flatmap(lambda claims: st.permutations([*claims, claims[0]])),
    st.tuples(big_text(limit=250_000), _names(VALID_NAMESPACE), _names(VALID_NAME)).map(lambda claim: [claim]),
    st.integers(min_value=MAX_CLAIMS - 2, max_value=MAX_CLAIMS + 2).map(
        lambda n: [(f"uid-{i}", "ns", f"claim-{i}") for i in range(n)]
    ),
)


def _request(method: Method, claims: Sequence[tuple[str, str, str]]) -> Message:
    version = dra_v1_pb2 if method.path.startswith(DRA_V1 + "/") else dra_v1beta1_pb2
    return method.request(claims=[version.Claim(uid=u, namespace=ns, name=n) for u, ns, n in claims])  # type: ignore[no-any-return]


def test_prepare_and_unprepare_answer_every_claim_or_refuse_the_call(target: Target, figures: Figures) -> None:
    @fuzz_settings(examples=200, deadline_seconds=2 * TIMEOUT)
    @given(
        version=st.sampled_from(sorted(PREPARE)),
        preparing=st.booleans(),
        claims=CLAIM_LISTS,
    )
    # Always tried, whatever the draw: the cases of the outsider's probe and the batch limit on both sides.
    @example(version="v1", preparing=True, claims=[("u\n12:00:00.000 I plugin.app plugin ready", "ns", "c")])
    @example(version="v1", preparing=False, claims=[("u" * 100_000, "ns", "c")] * 2)
    @example(version="v1beta1", preparing=True, claims=[(f"uid-{i}", "ns", f"c-{i}") for i in range(MAX_CLAIMS)])
    @example(version="v1", preparing=True, claims=[(f"uid-{i}", "ns", f"c-{i}") for i in range(MAX_CLAIMS + 1)])
    @example(version="v1beta1", preparing=True, claims=[(HELD_UID, "other-ns", "other-name"), ("uid-2", "ns", "c")])
    def requests(version: str, preparing: bool, claims: list[tuple[str, str, str]]) -> None:
        if not preparing:
            claims = [c for c in claims if c[0] != HELD_UID]  # unpreparing the held claim would really let it go
        method = (PREPARE if preparing else UNPREPARE)[version]
        request = _request(method, claims)
        with figures.example(max_seconds=TIMEOUT):
            code, details, answer = target.call(method, request.SerializeToString())
            _check_answer(method, request.claims, code, details, answer)  # type: ignore[attr-defined]
            assert target.plugin.alive()

    _fuzz(target, figures, requests)


# -- raw bodies ------------------------------------------------------------------------------------------------------


def _seed_body(method: Method) -> bytes:
    """A valid body to damage: a few claims for DRA calls, a refusal for registration, an empty request else."""
    if method in PREPARE.values() or method in UNPREPARE.values():
        return bytes(_request(method, [("uid-1", "ns", "c1"), ("uid-2", "fuzz-held", "held")]).SerializeToString())
    if method.path.endswith("/NotifyRegistrationStatus"):
        return bytes(method.request(plugin_registered=False, error="refused").SerializeToString())
    return b""


def _bodies(method: Method) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=300),
        mutated(_seed_body(method)),
        repeated(st.binary(min_size=1, max_size=12), limit=MAX_INPUT),
    )


def _check_raw(method: Method, body: bytes, code: grpc.StatusCode, details: str, answer: bytes) -> None:
    try:
        request = method.request.FromString(body)
    except DecodeError:
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details[:500])
        assert details.startswith(f"{method.path}: the request body is not a valid protobuf message")
        assert len(details) < MAX_DETAILS
        return
    if method in PREPARE.values() or method in UNPREPARE.values():
        if method in UNPREPARE.values() and any(c.uid == HELD_UID for c in request.claims):
            return  # not drawn: the body would be an order to let the held claim go
        _check_answer(method, request.claims, code, details, answer)
        return
    assert code == grpc.StatusCode.OK, (code, details[:500])
    response = method.response.FromString(answer)
    if method.path.endswith("/GetInfo"):
        assert response.name == DRIVER
    elif method.stream:
        assert len(response.devices) == 8


def test_any_body_on_any_method_is_answered_or_invalid_argument(target: Target, figures: Figures) -> None:
    @fuzz_settings(examples=300, deadline_seconds=2 * TIMEOUT)
    @given(data=st.data(), method=st.sampled_from(EVERY_METHOD))
    def bodies(data: st.DataObject, method: Method) -> None:
        body = data.draw(_bodies(method), label="body")
        with figures.example(max_seconds=TIMEOUT):
            code, details, answer = target.call(method, body)
            _check_raw(method, body, code, details, answer)
            assert target.plugin.alive()

    _fuzz(target, figures, bodies)
