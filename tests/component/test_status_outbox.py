"""The status outbox with a real journal and an in-memory API (its logic; the real API is in the integration tests):
writes are sent after the answer, retried, settled by a gone claim, withdrawn when unsent, never reordered, and
re-sent by the next process when one died owing them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fakedev.driver import status_outbox as outbox_mod
from fakedev.driver.checkpoint import Checkpoint, ClaimRecord, del_entry, owe_entry, put_entry
from fakedev.driver.journal import ClaimJournal
from fakedev.driver.status_outbox import StatusOutbox, owed_status
from fakedev.errors import KubeApiError
from kubeclient import JsonObj
from tests.helpers import empty_record

DEVICES: list[JsonObj] = [{"driver": "gpu.example.com", "pool": "n", "device": "gpu-0"}]


def _record(uid: str) -> ClaimRecord:
    return empty_record(uid, name=f"c-{uid}")


@dataclass
class RecordingApi:
    calls: list[tuple[str, list[JsonObj]]] = field(default_factory=list)
    failures: list[KubeApiError] = field(default_factory=list)
    gate: threading.Event | None = None
    entered: threading.Event = field(default_factory=threading.Event)

    def apply_claim_status(self, *, namespace: str, name: str, uid: str, devices: list[JsonObj]) -> None:
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(timeout=10)
        if self.failures:
            raise self.failures.pop(0)
        self.calls.append((uid, devices))


@pytest.fixture
def journal(tmp_path: Path) -> ClaimJournal:
    j = ClaimJournal(path=tmp_path / "checkpoint.json")
    j.open()
    return j


def _owe(journal: ClaimJournal, outbox: StatusOutbox, uid: str, devices: list[JsonObj]) -> None:
    owed = owed_status(uid=uid, namespace="ns", name=f"c-{uid}", devices=devices)
    journal.commit([owe_entry(owed)])
    outbox.owe(owed)


def test_a_write_is_sent_and_then_no_longer_owed(journal: ClaimJournal) -> None:
    api = RecordingApi()
    outbox = StatusOutbox(journal=journal, api=api)
    outbox.start()
    _owe(journal, outbox, "a", DEVICES)
    assert outbox.wait_idle(timeout=10)
    outbox.stop()
    assert api.calls == [("a", DEVICES)]
    assert Checkpoint(path=journal.path).read().owed == {}


def test_an_unreachable_api_is_retried_and_a_gone_claim_settles_the_write(
    journal: ClaimJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox_mod, "FIRST_BACKOFF", 0.01)
    api = RecordingApi(failures=[KubeApiError("unreachable", status=0), KubeApiError("503", status=503)])
    outbox = StatusOutbox(journal=journal, api=api, workers=1)
    outbox.start()
    _owe(journal, outbox, "a", DEVICES)
    assert outbox.wait_idle(timeout=10)
    assert api.calls == [("a", DEVICES)]  # through on the third attempt
    api.failures.append(KubeApiError("not found", status=404))
    _owe(journal, outbox, "b", DEVICES)
    assert outbox.wait_idle(timeout=10)
    outbox.stop()
    assert [uid for uid, _ in api.calls] == ["a"]  # b is gone: nothing to write it to, and nothing owed
    assert journal.state.owed == {}


def test_an_unsent_write_is_withdrawn_without_a_call(journal: ClaimJournal) -> None:
    api = RecordingApi()
    outbox = StatusOutbox(journal=journal, api=api)  # not started: nothing is sent yet
    _owe(journal, outbox, "a", DEVICES)
    assert outbox.withdraw("a") is True
    journal.commit([del_entry("a")])  # what unprepare records next: the claim and the write it owed are gone
    assert outbox.withdraw("a") is False  # nothing owed any more: the caller cannot know what the claim holds
    outbox.start()
    assert outbox.wait_idle(timeout=5)
    outbox.stop()
    assert api.calls == []


def test_a_write_that_replaced_a_clear_not_sent_yet_is_never_withdrawn_as_harmless(journal: ClaimJournal) -> None:
    """An unprepare owed a clear (ours may be in the claim's status), a prepare's write replaced it before it was
    sent, and the next unprepare withdraws that write: the clear is still needed (``fakedev torture`` seed
    2076820582 found the claim's status left listing its device after 580 kills)."""
    api = RecordingApi()
    outbox = StatusOutbox(journal=journal, api=api)  # not started: nothing is sent yet
    _owe(journal, outbox, "a", [])
    _owe(journal, outbox, "a", DEVICES)
    assert outbox.withdraw("a") is False
    _owe(journal, outbox, "a", [])  # what the unprepare owes then
    outbox.start()
    assert outbox.wait_idle(timeout=10)
    outbox.stop()
    assert api.calls == [("a", [])]
    assert journal.state.owed == {}


def test_after_a_restart_a_recorded_claims_new_write_is_never_withdrawn_as_harmless(journal: ClaimJournal) -> None:
    """The claim's record survived a restart with its status write settled (``sent``, so no longer owed): what an
    earlier process wrote may be in the status, so withdrawing the new process's write still owes a clear."""
    journal.commit([put_entry(_record("a"))])
    outbox = StatusOutbox(journal=journal, api=RecordingApi(), workers=0)  # started, but nothing is ever sent
    outbox.start()
    _owe(journal, outbox, "a", DEVICES)
    assert outbox.withdraw("a") is False
    _owe(journal, outbox, "b", DEVICES)  # a claim this process prepared first: nothing of ours can be there
    assert outbox.withdraw("b") is True
    outbox.stop()


def test_after_a_clear_is_through_an_unsent_write_is_withdrawn_again(journal: ClaimJournal) -> None:
    gate = threading.Event()
    api = RecordingApi()
    outbox = StatusOutbox(journal=journal, api=api)
    outbox.start()
    _owe(journal, outbox, "a", [])
    assert outbox.wait_idle(timeout=10) and api.calls == [("a", [])]
    api.entered.clear()
    api.gate = gate  # the next write waits in flight for "b"'s until the gate opens: "a"'s stays unsent
    _owe(journal, outbox, "b", DEVICES)
    assert api.entered.wait(timeout=10)
    outbox.workers = 1
    _owe(journal, outbox, "a", DEVICES)
    withdrawn = outbox.withdraw("a")
    gate.set()
    assert outbox.wait_idle(timeout=10)
    outbox.stop()
    assert withdrawn is True and ("a", DEVICES) not in api.calls


def test_a_clear_waits_for_the_write_in_flight_it_undoes(journal: ClaimJournal) -> None:
    gate = threading.Event()
    api = RecordingApi(gate=gate)
    outbox = StatusOutbox(journal=journal, api=api, workers=4)
    outbox.start()
    _owe(journal, outbox, "a", DEVICES)
    assert api.entered.wait(timeout=10)
    assert outbox.withdraw("a") is False  # in flight: it may reach the claim, so a clear is owed
    _owe(journal, outbox, "a", [])
    gate.set()
    assert outbox.wait_idle(timeout=10)
    outbox.stop()
    assert api.calls == [("a", DEVICES), ("a", [])]
    assert journal.state.owed == {}


def test_a_write_owed_by_a_process_that_died_is_sent_by_the_next(journal: ClaimJournal) -> None:
    owed = owed_status(uid="a", namespace="ns", name="c-a", devices=DEVICES)
    journal.commit([owe_entry(owed)])  # recorded, then the process died before its outbox sent it
    journal.close()
    restarted = ClaimJournal(path=journal.path)
    restarted.open()
    api = RecordingApi()
    outbox = StatusOutbox(journal=restarted, api=api)
    outbox.start()
    assert outbox.wait_idle(timeout=10)
    outbox.stop()
    assert api.calls == [("a", DEVICES)]
    assert Checkpoint(path=journal.path).read().owed == {}
