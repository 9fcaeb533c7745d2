"""The claim cache against the worker's real API server: what the watch keeps, and prepares that start from a copy
the API no longer has (a reallocated claim, a replaced one) — they must answer what the API says and leave no file
of the stale copy behind. These states write no claim status (as no NVIDIA release does), so a prepare records the
cached plan, unconfirmed, while its GET is answered: a crash in between must leave a record nothing answers from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakedev.driver.cdi_layout import cdi_layout_for
from fakedev.driver.checkpoint import Checkpoint
from fakedev.driver.claim_cache import ClaimCache, ClaimWatch
from fakedev.driver.crash import CrashPoint, CrashSwitch, parse_crash_at
from fakedev.driver.state import ClaimState, StatePaths
from fakedev.kube import DriverApi
from fakedev.model.inventory import resolve_inventory
from fakedev.model.releases import NVIDIA_DEFAULT
from fakedev.profiles import load_profile
from fakedev.render import RenderedNode, Schema, render_node
from fakedev.render.published import DeviceRef
from harness.procs import wait_for
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import RESOURCE_CLAIMS
from kubeletapi.types import ClaimRef
from tests.helpers import claim_body, count_fdatasyncs

DRIVER = "gpu.example.com"
NODE = "cache-node"
LAYOUT = cdi_layout_for(schema=Schema.EXAMPLE, nvidia=NVIDIA_DEFAULT, driver=DRIVER)


@pytest.fixture(scope="module")
def rendered() -> RenderedNode:
    return render_node(resolve_inventory(load_profile("seed-example"), node_name=NODE))


def _allocate(kube: KubeClient, *, namespace: str, name: str, device: str, node: str = NODE) -> JsonObj:
    """Write the allocation the scheduler would (``device`` of this node's pool), reserved for a pod."""
    result = {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device}
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    status = {
        "status": {
            "allocation": {"devices": {"results": [result]}, "nodeSelector": selector},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "00000000-0000-4000-8000-000000000001"}],
        }
    }
    return kube.patch(RESOURCE_CLAIMS, name, status, namespace=namespace, subresource="status", patch_type="merge")


def _deallocate(kube: KubeClient, *, namespace: str, name: str) -> None:
    body = {"status": {"reservedFor": None, "allocation": None}}
    kube.patch(RESOURCE_CLAIMS, name, body, namespace=namespace, subresource="status", patch_type="merge")


def _claim(kube: KubeClient, *, namespace: str, name: str, device: str) -> JsonObj:
    kube.create(RESOURCE_CLAIMS, claim_body(name=name, device_class="any"), namespace=namespace)
    return _allocate(kube, namespace=namespace, name=name, device=device)


def _ref(claim: JsonObj) -> ClaimRef:
    meta = claim["metadata"]
    return ClaimRef(uid=meta["uid"], namespace=meta["namespace"], name=meta["name"])


class _Reads:
    """The real API, counting the claim GETs a prepare makes."""

    def __init__(self, api: DriverApi) -> None:
        self.api = api
        self.gets = 0

    def get_claim_later(self, **kwargs: str) -> Any:
        self.gets += 1
        return self.api.get_claim_later(**kwargs)

    def read_ahead_claim(self, **kwargs: str) -> Any:
        self.gets += 1
        return self.api.read_ahead_claim(**kwargs)


class _Killed(BaseException):
    """Stands in for the SIGKILL of an armed crash point: nothing after it runs, no handler undoes anything."""


class _RaisingSwitch(CrashSwitch):
    def reached(self, point: CrashPoint) -> None:
        if self.armed is not None and point is self.armed.point:
            raise _Killed(point)


def _claim_state(
    tmp_path: Path,
    kube: KubeClient,
    rendered: RenderedNode,
    *,
    crash: CrashSwitch | None = None,
    boot_id: str = "",
) -> tuple[ClaimState, ClaimCache, _Reads]:
    cache = ClaimCache(driver=DRIVER, node_name=NODE)
    reads = _Reads(DriverApi(client=kube, driver=DRIVER, node_name=NODE))
    claim_state = ClaimState(
        driver=DRIVER,
        node_name=NODE,
        paths=StatePaths(
            cdi_dir=tmp_path / "cdi",
            plugin_data_dir=tmp_path / "plugin",
            dev_root=tmp_path / "plugin" / "dev",
            checkpoint=tmp_path / "plugin" / "checkpoint.json",
            boot_id=boot_id,
        ),
        layout=LAYOUT,
        base_spec=None,
        api=reads,  # type: ignore[arg-type]  # the real DriverApi behind a counter
        # As the plugin's device model answers: None for a device this node does not publish.
        lookup=lambda pool, name: rendered.devices.get(DeviceRef(driver=DRIVER, pool=pool, device=name)),
        writes_device_status=False,
        cache=cache,
        crash=crash or CrashSwitch(),
    )
    claim_state.load()
    return claim_state, cache, reads


@pytest.fixture
def state(tmp_path: Path, kube: KubeClient, rendered: RenderedNode) -> Iterator[tuple[ClaimState, ClaimCache, _Reads]]:
    claim_state, cache, reads = _claim_state(tmp_path, kube, rendered)
    yield claim_state, cache, reads
    claim_state.close()


def _files(paths: StatePaths) -> list[Path]:
    return sorted(p for root in (paths.cdi_dir, paths.metadata_root) for p in root.rglob("*") if p.is_file())


def _spec_text(paths: StatePaths) -> str:
    return "".join(p.read_text() for p in sorted(paths.cdi_dir.iterdir()))


def test_the_watch_keeps_the_claims_allocated_here_and_drops_them_when_they_go(
    kube: KubeClient, test_namespace: str
) -> None:
    cache = ClaimCache(driver=DRIVER, node_name=NODE)
    watch = ClaimWatch(api=DriverApi(client=kube, driver=DRIVER, node_name=NODE), cache=cache)
    before = _claim(kube, namespace=test_namespace, name="listed", device="gpu-0")
    watch.start()
    try:
        assert watch.listed.wait(30), "the first list never arrived"
        uid = before["metadata"]["uid"]
        wait_for(lambda: cache.get(uid) is not None, timeout=30, what="the listed claim in the cache")
        plan = cache.get(uid)
        assert plan is not None and [d.device for d in plan.devices] == ["gpu-0"]

        elsewhere = kube.create(
            RESOURCE_CLAIMS, claim_body(name="elsewhere", device_class="any"), namespace=test_namespace
        )
        _allocate(kube, namespace=test_namespace, name="elsewhere", device="gpu-1", node="another-node")
        watched = _claim(kube, namespace=test_namespace, name="watched", device="gpu-1")
        wait_for(lambda: cache.get(watched["metadata"]["uid"]) is not None, timeout=30, what="the watched claim")
        assert cache.get(elsewhere["metadata"]["uid"]) is None  # allocated on another node: nothing to prepare here

        _deallocate(kube, namespace=test_namespace, name="listed")
        wait_for(lambda: cache.get(uid) is None, timeout=30, what="the deallocated claim dropped")
        kube.delete(RESOURCE_CLAIMS, "watched", namespace=test_namespace)
        wait_for(lambda: cache.get(watched["metadata"]["uid"]) is None, timeout=30, what="the deleted claim dropped")
    finally:
        watch.stop()


def test_a_cached_copy_the_api_confirms_is_prepared_with_one_get(
    kube: KubeClient, test_namespace: str, state: tuple[ClaimState, ClaimCache, _Reads]
) -> None:
    claim_state, cache, reads = state
    claim = _claim(kube, namespace=test_namespace, name="fresh", device="gpu-0")
    cache.replace([claim])
    result = claim_state.prepare(_ref(claim))
    assert not result.error and [d.device for d in result.devices] == ["gpu-0"]
    assert reads.gets == 1  # the cache never replaces the GET
    assert '=gpu-0"' in _spec_text(claim_state.paths) and claim["metadata"]["uid"] in claim_state.claims
    # On disk the record went in before the GET's answer, marked unconfirmed; the confirmation waits for the next
    # journal batch. This process saw the answer: a repeated prepare is answered from the record, no GET.
    journal = Checkpoint(path=claim_state.paths.checkpoint)
    assert journal.read().claims[claim["metadata"]["uid"]].get("unconfirmed") is True
    assert claim_state.prepare(_ref(claim)) == result and reads.gets == 1
    claim_state.close()  # writes the queued confirmation
    assert "unconfirmed" not in journal.read().claims[claim["metadata"]["uid"]]


def test_a_claim_whose_files_are_written_unsynced_gets_its_record_written_before_the_answer_and_synced_after(
    tmp_path: Path, kube: KubeClient, test_namespace: str, rendered: RenderedNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the node's boot ID known, a prepare writes the claim's files unsynced (a power cut makes them untrusted),
    and its unconfirmed record too: in the journal file once the answer is given — which a kill leaves behind — with
    no sync of its own."""
    claim_state, cache, _reads = _claim_state(tmp_path, kube, rendered, boot_id="0b1d2f3e-boot")
    synced = count_fdatasyncs(monkeypatch)
    try:
        claim = _claim(kube, namespace=test_namespace, name="unsynced", device="gpu-0")
        cache.replace([claim])
        claim_state.journal.flush_after = 3600  # nothing but the test's own call syncs now
        result = claim_state.prepare(_ref(claim))
        assert not result.error and [d.device for d in result.devices] == ["gpu-0"]
        record = Checkpoint(path=claim_state.paths.checkpoint).read().claims[claim["metadata"]["uid"]]
        assert record.get("unconfirmed") is True and record.get("bootId") == "0b1d2f3e-boot"
        assert synced == []
    finally:
        claim_state.close()
    assert len(synced) == 1  # a stop syncs what no batch did (the flusher would have, after flush_after)
    assert "unconfirmed" not in Checkpoint(path=claim_state.paths.checkpoint).read().claims[claim["metadata"]["uid"]]


def test_a_crash_before_the_answer_leaves_a_record_no_prepare_answers_from_unread(
    tmp_path: Path, kube: KubeClient, test_namespace: str, rendered: RenderedNode
) -> None:
    """Killed between recording the cached plan and reading the GET's answer: the next process holds an
    unconfirmed record. The kubelet, never answered, asks again — by then the claim was reallocated (the cached
    copy was stale): the answer is the API's device, read again, and nothing of the stale plan stays."""
    switch = _RaisingSwitch()
    switch.armed = parse_crash_at(CrashPoint.PREPARE_BEFORE_CONFIRM.value)
    claim_state, cache, _reads = _claim_state(tmp_path, kube, rendered, crash=switch)
    stale = _claim(kube, namespace=test_namespace, name="crashed", device="gpu-0")
    cache.replace([stale])
    ref = _ref(stale)
    ahead = _reads.get_claim_later(namespace=ref.namespace, name=ref.name)
    with pytest.raises(_Killed):
        claim_state.prepare(ref, ahead=ahead)
    ahead.drain()  # what the driver's core does after every prepare (a killed process would just drop it)
    assert claim_state.claims[ref.uid].get("unconfirmed") is True and '=gpu-0"' in _spec_text(claim_state.paths)
    claim_state.close()
    _deallocate(kube, namespace=test_namespace, name="crashed")
    _allocate(kube, namespace=test_namespace, name="crashed", device="gpu-1")

    restarted, _cache, reads = _claim_state(tmp_path, kube, rendered)
    try:
        assert restarted.claims[ref.uid].get("unconfirmed") is True
        assert restarted.held(ref) is None  # never answered from the record alone
        result = restarted.prepare(ref)
        assert not result.error and [d.device for d in result.devices] == ["gpu-1"] and reads.gets == 1
        record = Checkpoint(path=restarted.paths.checkpoint).read().claims[ref.uid]
        assert [d["device"] for d in record["devices"]] == ["gpu-1"] and "unconfirmed" not in record
        text = _spec_text(restarted.paths)
        assert '=gpu-1"' in text and '=gpu-0"' not in text
        assert restarted.unprepare(ref) == ""
        assert _files(restarted.paths) == [] and ref.uid not in restarted.claims  # its del queued
    finally:
        restarted.close()
    assert ref.uid not in Checkpoint(path=restarted.paths.checkpoint).read().claims  # written on close


def test_a_claim_reallocated_since_the_watch_saw_it_gets_its_new_device_and_nothing_of_the_old(
    kube: KubeClient, test_namespace: str, state: tuple[ClaimState, ClaimCache, _Reads]
) -> None:
    claim_state, cache, _reads = state
    stale = _claim(kube, namespace=test_namespace, name="moved", device="gpu-0")
    cache.replace([stale])  # the cache saw gpu-0 and nothing after it
    _deallocate(kube, namespace=test_namespace, name="moved")
    _allocate(kube, namespace=test_namespace, name="moved", device="gpu-1")
    cached = cache.get(stale["metadata"]["uid"])
    assert cached is not None and cached.devices[0].device == "gpu-0"

    result = claim_state.prepare(_ref(stale))
    assert not result.error and [d.device for d in result.devices] == ["gpu-1"]
    record = claim_state.claims[stale["metadata"]["uid"]]
    assert [d["device"] for d in record["devices"]] == ["gpu-1"]
    text = _spec_text(claim_state.paths)
    # The early files of gpu-0 were replaced, not left beside (the example driver's env names each device).
    assert '=gpu-1"' in text and '=gpu-0"' not in text

    # What an unprepare removes is exactly what the prepare left: nothing of the stale copy survives it.
    assert claim_state.unprepare(_ref(stale)) == ""
    assert _files(claim_state.paths) == []


def test_a_claim_reallocated_to_a_device_not_published_here_fails_and_leaves_no_record_or_file(
    kube: KubeClient, test_namespace: str, state: tuple[ClaimState, ClaimCache, _Reads]
) -> None:
    """The cached plan was recorded before the answer; the answer's allocation cannot be prepared here: the error is
    the answer, and the early record goes with the early files (a kubelet told "failed" believes nothing held)."""
    claim_state, cache, _reads = state
    stale = _claim(kube, namespace=test_namespace, name="unpublished", device="gpu-0")
    cache.replace([stale])
    _deallocate(kube, namespace=test_namespace, name="unpublished")
    _allocate(kube, namespace=test_namespace, name="unpublished", device="gpu-99")

    result = claim_state.prepare(_ref(stale))
    assert "gpu-99" in result.error and "not published" in result.error
    assert _files(claim_state.paths) == []
    assert stale["metadata"]["uid"] not in claim_state.claims
    assert stale["metadata"]["uid"] not in Checkpoint(path=claim_state.paths.checkpoint).read().claims


def test_a_replaced_claim_fails_and_leaves_no_file_of_the_copy_the_cache_had(
    kube: KubeClient, test_namespace: str, state: tuple[ClaimState, ClaimCache, _Reads]
) -> None:
    claim_state, cache, _reads = state
    old = _claim(kube, namespace=test_namespace, name="replaced", device="gpu-0")
    cache.replace([old])
    kube.delete(RESOURCE_CLAIMS, "replaced", namespace=test_namespace)
    new = _claim(kube, namespace=test_namespace, name="replaced", device="gpu-1")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]

    result = claim_state.prepare(_ref(old))
    assert "deleted and re-created" in result.error
    assert _files(claim_state.paths) == []
    assert old["metadata"]["uid"] not in claim_state.claims
    assert old["metadata"]["uid"] not in Checkpoint(path=claim_state.paths.checkpoint).read().claims  # withdrawn

    # The claim under its new UID is not in the cache: a plain GET prepares it.
    assert cache.get(new["metadata"]["uid"]) is None
    result = claim_state.prepare(_ref(new))
    assert not result.error and [d.device for d in result.devices] == ["gpu-1"]


def test_a_deleted_claim_fails_and_leaves_no_file(
    kube: KubeClient, test_namespace: str, state: tuple[ClaimState, ClaimCache, _Reads]
) -> None:
    claim_state, cache, _reads = state
    gone = _claim(kube, namespace=test_namespace, name="gone", device="gpu-0")
    cache.replace([gone])
    kube.delete(RESOURCE_CLAIMS, "gone", namespace=test_namespace)
    result = claim_state.prepare(_ref(gone))
    assert "404" in result.error or "not found" in result.error
    assert _files(claim_state.paths) == []
    assert gone["metadata"]["uid"] not in Checkpoint(path=claim_state.paths.checkpoint).read().claims
