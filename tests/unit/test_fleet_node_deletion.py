"""A decommission's Node deletion retried through the API server's "later" answers, and given up on the others.

The retry loop is pure logic around three API calls, so a recording stand-in for the client is enough here; the real
deletions are asserted against a real API server in tests/integration/test_fleet_run.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from fakedev.cli.fleet.replica import delete_node_patiently
from kubeclient import ApiError, ApiUnavailableError, KubeClient
from kubeclient.resources import LEASES, NODES, RESOURCE_SLICES, Resource


@dataclass(kw_only=True)
class RecordingClient:
    """Answers the first ``failures`` calls with ``error``, then succeeds; records what was asked."""

    failures: int
    error: ApiError
    calls: list[str] = field(default_factory=list)

    def _answer(self, what: str) -> None:
        self.calls.append(what)
        if self.failures > 0:
            self.failures -= 1
            raise self.error

    def delete_collection(self, res: Resource, *, field_selector: str | None = None) -> None:
        self._answer(f"deletecollection {res.plural} {field_selector}")

    def delete(self, res: Resource, name: str, *, namespace: str | None = None) -> None:
        self._answer(f"delete {res.plural} {namespace or ''}/{name}")


def _delete(client: RecordingClient, *, seconds: float) -> tuple[bool, list[float]]:
    slept: list[float] = []
    done = delete_node_patiently(
        cast(KubeClient, client), name="f-0-1", seconds=seconds, backoff=(0.2, 1.0), sleep=slept.append
    )
    return done, slept


def test_throttled_deletion_is_retried_with_backoff_until_it_goes_through() -> None:
    client = RecordingClient(failures=4, error=ApiUnavailableError("429 TooManyRequests", status=429))
    done, slept = _delete(client, seconds=60)
    assert done
    assert slept == [0.2, 0.4, 0.8, 1.0]
    assert client.calls[-3:] == [
        f"deletecollection {RESOURCE_SLICES.plural} spec.nodeName=f-0-1",
        f"delete {NODES.plural} /f-0-1",
        f"delete {LEASES.plural} kube-node-lease/f-0-1",
    ]


def test_a_refusal_is_not_retried() -> None:
    client = RecordingClient(failures=1, error=ApiError("403 Forbidden", status=403))
    done, slept = _delete(client, seconds=60)
    assert (done, slept) == (False, [])
    assert len(client.calls) == 1


def test_retries_end_at_the_deadline() -> None:
    client = RecordingClient(failures=1000, error=ApiUnavailableError("503", status=503))
    done, slept = _delete(client, seconds=0.0)
    assert (done, slept) == (False, [])
    assert len(client.calls) == 1
