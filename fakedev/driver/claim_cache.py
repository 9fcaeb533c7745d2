"""The claims allocated on this node for this driver, as a list and watch of ResourceClaims last showed them.

A head start, never the truth: a prepare still GETs its claim — a linearizable read, the only proof that the UID the
kubelet names still has the allocation the driver reads (a reallocated claim keeps its UID, and a watch that lags
cannot be told from one that does not). What the cache buys is time: the prepare sends that GET first and plans
the cached copy while the API server answers; the answer confirms the copy (the same :class:`ClaimPlan`) or the
prepare is done again from the answer (:mod:`fakedev.driver.state`).

Only the plans are kept — a claim's :class:`ClaimPlan` when it is allocated on this node with devices of this
driver — so memory follows the claims of this node, not of the cluster. A thread lists and watches (the API client
blocks); it lists again when the watch's version is gone, and stops for good, with one warning, when the plugin's
account may not list claims (a chart without the ``watch`` verb): prepares then read only by GET, as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from fakedev.driver.claims import ClaimPlan, compute_claim_plan
from fakedev.errors import ClaimError, KubeApiError
from fakedev.kube import DriverApi

log = logging.getLogger("fakedev.driver.claim_cache")

WATCH_SECONDS: Final = 300
RETRY_FIRST: Final = 0.5
RETRY_MAX: Final = 30.0
FORBIDDEN: Final = 403


def compute_cached_plan(claim: Mapping[str, Any], *, driver: str, node_name: str) -> tuple[str, ClaimPlan | None]:
    """(UID, the plan a prepare of this claim would start from, or None when this node has nothing to prepare)."""
    uid = str((claim.get("metadata") or {}).get("uid") or "")
    try:
        return uid, compute_claim_plan(claim, uid=uid, driver=driver, node_name=node_name)
    except ClaimError:
        return uid, None


@dataclass(kw_only=True)
class ClaimCache:
    """Mutable on purpose: UID → plan, replaced by a list and changed by watch events (from one thread; readers in
    others see a dict whose single operations are atomic)."""

    driver: str
    node_name: str
    _plans: dict[str, ClaimPlan] = field(default_factory=dict)

    def get(self, uid: str) -> ClaimPlan | None:
        return self._plans.get(uid)

    def __len__(self) -> int:
        return len(self._plans)

    def replace(self, claims: Iterable[Mapping[str, Any]]) -> None:
        """Everything a list returned (claims missing from it were deleted meanwhile)."""
        plans: dict[str, ClaimPlan] = {}
        for claim in claims:
            uid, plan = compute_cached_plan(claim, driver=self.driver, node_name=self.node_name)
            if plan is not None:
                plans[uid] = plan
        self._plans = plans

    def change(self, kind: str, claim: Mapping[str, Any]) -> None:
        """A watch event: ADDED, MODIFIED or DELETED."""
        uid, plan = compute_cached_plan(claim, driver=self.driver, node_name=self.node_name)
        if kind == "DELETED" or plan is None:
            self._plans.pop(uid, None)
        else:
            self._plans[uid] = plan


@dataclass(kw_only=True)
class ClaimWatch:
    """The thread that keeps a :class:`ClaimCache` current."""

    api: DriverApi
    cache: ClaimCache
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    listed: threading.Event = field(default_factory=threading.Event)
    """Set once the first list is in the cache (tests wait on it)."""

    def start(self) -> None:
        # A daemon of its own, not the loop's executor: a watch blocks for minutes, and the executor is joined
        # when the plugin stops.
        self._thread = threading.Thread(target=self._run, name="claim-cache", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        delay = RETRY_FIRST
        complained = False
        while not self._stop.is_set():
            try:
                claims, version = self.api.list_claims_versioned()
                self.cache.replace(claims)
                self.listed.set()
                if complained:
                    log.info("claim cache: listing works again", extra={"fields": {"cached": len(self.cache)}})
                delay, complained = RETRY_FIRST, False
                self._watch(version)
            except KubeApiError as exc:
                if exc.status == FORBIDDEN:
                    log.warning(
                        "claim cache: may not list resourceclaims; every prepare reads its claim by GET alone",
                        extra={"fields": {"error": str(exc)}},
                    )
                    return
                if not complained:
                    log.warning(
                        "claim cache: cannot list or watch claims; retrying",
                        extra={"fields": {"error": str(exc), "retry_max_s": RETRY_MAX}},
                    )
                    complained = True
                self._stop.wait(delay)
                delay = min(delay * 2, RETRY_MAX)

    def _watch(self, version: str) -> None:
        """Watch from ``version`` until the server says it is gone (then the caller lists again)."""
        while not self._stop.is_set():
            for event in self.api.watch_claims(resource_version=version, timeout_seconds=WATCH_SECONDS):
                kind = event.get("type")
                claim = event.get("object")
                if kind == "ERROR" or not isinstance(claim, dict):
                    return  # typically 410 Gone: the version is too old to watch from
                version = str((claim.get("metadata") or {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self.cache.change(str(kind), claim)
                if self._stop.is_set():
                    return
