"""The driver core on a real file system with an in-memory API: prepares of different claims run side by side
(their API reads overlap, their records share fsyncs), one claim's calls stay in order, and a call waits for a
start-up that holds the instances' lock."""

from __future__ import annotations

import fcntl
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fakedev.driver.cdi_layout import cdi_layout_for
from fakedev.driver.checkpoint import Checkpoint
from fakedev.driver.core import ConcurrentDriver
from fakedev.driver.state import ClaimState, StatePaths
from fakedev.model.inventory import resolve_inventory
from fakedev.model.releases import NVIDIA_DEFAULT
from fakedev.profiles import load_profile
from fakedev.render import RenderedNode, Schema, render_node
from harness.procs import wait_for
from kubeletapi.types import ClaimRef
from tests.helpers import ReadLater

NODE = "concurrent"
DRIVER = "gpu.example.com"
LAYOUT = cdi_layout_for(schema=Schema.EXAMPLE, nvidia=NVIDIA_DEFAULT, driver=DRIVER)
CLAIMS = [ClaimRef(uid=f"00000000-0000-0000-0000-00000000000{i}", namespace="ns", name=f"c{i}") for i in range(4)]


@dataclass
class GatedApi:
    """Every read waits at a barrier of ``parties``: it passes only if that many reads are in flight at once."""

    parties: int
    reads: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    barrier: threading.Barrier = field(init=False)

    def __post_init__(self) -> None:
        self.barrier = threading.Barrier(self.parties, timeout=10)

    def read_ahead_claim(self, *, namespace: str, name: str) -> Any:
        return None  # every read happens in the prepare's thread

    def get_claim_later(self, *, namespace: str, name: str) -> ReadLater:
        return ReadLater(read=lambda: self.get_claim(namespace=namespace, name=name))

    def get_claim(self, *, namespace: str, name: str) -> Any:
        self.barrier.wait()
        self.reads.append(name)
        ref = next(c for c in CLAIMS if c.name == name)
        result = {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": f"gpu-{ref.name[1:]}"}
        return {
            "metadata": {"uid": ref.uid, "name": name, "namespace": namespace},
            "status": {"allocation": {"devices": {"results": [result]}}, "reservedFor": [{"name": "p"}]},
        }

    def apply_claim_status(self, *, namespace: str, name: str, uid: str, devices: Any) -> None:
        self.statuses.append(name)


@pytest.fixture(scope="module")
def rendered() -> RenderedNode:
    return render_node(resolve_inventory(load_profile("seed-example"), node_name=NODE))


def _driver(rendered: RenderedNode, tmp_path: Path, api: GatedApi) -> ConcurrentDriver:
    paths = StatePaths(
        cdi_dir=tmp_path / "cdi",
        plugin_data_dir=tmp_path / "plugin",
        dev_root=tmp_path / "plugin" / "dev",
        checkpoint=tmp_path / "plugin" / "checkpoint.json",
    )
    state = ClaimState(
        driver=DRIVER,
        node_name=NODE,
        paths=paths,
        layout=LAYOUT,
        base_spec=None,
        api=api,  # type: ignore[arg-type]  # the two calls the state makes
        lookup=lambda pool, name: rendered.device(driver=DRIVER, pool=pool, name=name),
    )
    return ConcurrentDriver(state=state, lock_path=paths.plugin_data_dir / "serialize.lock")


def test_prepares_of_different_claims_run_at_the_same_time(rendered: RenderedNode, tmp_path: Path) -> None:
    api = GatedApi(parties=len(CLAIMS))  # a serializing driver would leave the first read waiting until timeout
    driver = _driver(rendered, tmp_path, api)
    driver.load()

    with ThreadPoolExecutor(max_workers=len(CLAIMS)) as pool:  # the DRA server's worker threads
        answers = list(pool.map(lambda ref: driver.prepare([ref]), CLAIMS))
    assert all(not a[ref.uid].error for a, ref in zip(answers, CLAIMS, strict=True)), answers
    assert sorted(api.reads) == sorted(c.name for c in CLAIMS)
    assert driver.state.outbox is not None and driver.state.outbox.wait_idle(timeout=10)
    driver.close()
    assert sorted(api.statuses) == sorted(c.name for c in CLAIMS)  # each status written once, after its answer
    assert sorted(Checkpoint(path=driver.state.paths.checkpoint).load()) == sorted(c.uid for c in CLAIMS)


def test_one_claims_calls_stay_in_order(rendered: RenderedNode, tmp_path: Path) -> None:
    api = GatedApi(parties=1)
    driver = _driver(rendered, tmp_path, api)
    driver.load()
    ref = CLAIMS[0]

    with ThreadPoolExecutor(max_workers=3) as pool, driver.locks.hold([ref.uid]):
        # Three calls queue up behind a call under way, in this order; each must wait for the one before it.
        calls = [pool.submit(driver.prepare, [ref])]
        wait_for(lambda: driver.locks.users(ref.uid) == 2, timeout=10, what="the first prepare waiting")
        calls.append(pool.submit(driver.prepare, [ref]))
        wait_for(lambda: driver.locks.users(ref.uid) == 3, timeout=10, what="the second prepare waiting")
        unprepared = pool.submit(driver.unprepare, [ref])
        wait_for(lambda: driver.locks.users(ref.uid) == 4, timeout=10, what="the unprepare waiting")
    first, second, gone = calls[0].result(), calls[1].result(), unprepared.result()
    assert first == second and not first[ref.uid].error
    assert api.reads == ["c0"]  # the second prepare waited for the first and was answered from its record
    assert gone == {ref.uid: ""}
    driver.close()
    assert Checkpoint(path=driver.state.paths.checkpoint).load() == {}


def test_a_call_waits_while_another_instance_starts_up(rendered: RenderedNode, tmp_path: Path) -> None:
    api = GatedApi(parties=1)
    driver = _driver(rendered, tmp_path, api)
    driver.load()
    lock_path = driver.lock_path
    done: list[Any] = []
    with lock_path.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the new instance of a rolling update, collecting temp files
        caller = threading.Thread(target=lambda: done.append(driver.prepare([CLAIMS[1]])))
        caller.start()
        caller.join(timeout=0.5)
        assert caller.is_alive() and done == []
    caller.join(timeout=10)
    assert not done[0][CLAIMS[1].uid].error
    driver.close()


@dataclass
class _Ahead:
    """A GET sent ahead: records whether the prepare took its answer, or it was drained or abandoned."""

    api: AheadApi
    name: str
    fate: str = ""

    def result(self) -> Any:
        self.fate = "taken"
        return self.api.get_claim(namespace="ns", name=self.name)

    def drain(self) -> None:
        self.fate = self.fate or "drained"

    def abandon(self) -> None:
        self.fate = self.fate or "abandoned"


@dataclass
class AheadApi(GatedApi):
    """Reads sent ahead, with the thread that sent each."""

    sent: list[_Ahead] = field(default_factory=list)

    def read_ahead_claim(self, *, namespace: str, name: str) -> _Ahead:
        self.sent.append(_Ahead(api=self, name=name))
        return self.sent[-1]


def test_the_claim_get_goes_out_before_the_call_waits_for_its_lock(rendered: RenderedNode, tmp_path: Path) -> None:
    api = AheadApi(parties=1)
    driver = _driver(rendered, tmp_path, api)
    driver.load()
    ref = CLAIMS[2]
    with ThreadPoolExecutor(max_workers=1) as pool:
        with driver.locks.hold([ref.uid]):  # another call on the claim is under way
            call = pool.submit(driver.prepare, [ref])
            wait_for(lambda: bool(api.sent), timeout=10, what="the GET sent ahead")
            assert [a.name for a in api.sent] == [ref.name] and api.reads == []  # sent, not read yet
            assert driver.locks.users(ref.uid) == 2  # and the call waits for the lock
        answer = call.result()
    assert not answer[ref.uid].error
    assert [a.fate for a in api.sent] == ["taken"] and api.reads == [ref.name]
    driver.close()


def test_a_read_ahead_the_prepare_did_not_need_is_drained(rendered: RenderedNode, tmp_path: Path) -> None:
    api = AheadApi(parties=1)
    driver = _driver(rendered, tmp_path, api)
    driver.load()
    driver.faults.prepare.fail_times = 1  # the call fails before it reads its claim
    answer = driver.prepare([CLAIMS[0]])
    assert answer[CLAIMS[0].uid].error == "injected fault"
    assert [a.fate for a in api.sent] == ["drained"] and api.reads == []
    driver.close()
