"""A pod churn: pods with a DRA claim created and deleted continuously on one node, surviving API outages."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Final

from kubeclient import ApiError, JsonObj, KubeClient
from kubeclient.errors import KubeClientError
from kubeclient.resources import PODS

ERROR_PAUSE: Final = 1.0
"""After a refused call, wait this long before the next: an API that is down is not asked a hundred times a second."""


def render_pod(*, name: str, node: str, template: str) -> JsonObj:
    """A pod pinned to ``node`` that holds one device from ``template`` while it sleeps."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "fakedev-soak"}},
        "spec": {
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "command": ["sh", "-c", "sleep 3600"],
                    "resources": {"claims": [{"name": "dev"}]},
                }
            ],
        },
    }


@dataclass(kw_only=True)
class Churn:
    """Keeps up to ``pods`` pods: while there is room it creates one, otherwise it deletes the oldest, one action
    every ``period`` seconds. API errors are counted and the action tried again."""

    client: KubeClient
    namespace: str
    node: str
    template: str
    pods: int
    period: float
    created: int = 0
    deleted: int = 0
    api_errors: int = 0
    live: deque[str] = field(default_factory=deque)
    """Names of the pods it created and has not deleted yet, oldest first."""
    _serial: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _running: threading.Event = field(default_factory=threading.Event)
    _idle: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._running.set()
        self._thread = threading.Thread(target=self._loop, name="soak-churn", daemon=True)
        self._thread.start()

    def pause(self) -> None:
        """Stop acting (returns once the action in progress is done), so the node can be checked at rest."""
        self._running.clear()
        self._idle.wait()

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stop.set()
        self._running.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self._running.is_set():
                self._idle.set()
                self._running.wait()
                continue
            self._idle.clear()
            try:
                self._act()
            except KubeClientError:
                self.api_errors += 1
                self._stop.wait(ERROR_PAUSE)
            self._stop.wait(self.period)  # the churn's pace, not a wait for a condition

    def _act(self) -> None:
        if len(self.live) < self.pods:
            # The name advances only once the pod exists: a create whose answer an outage lost is sent again under
            # the same name, and "already exists" then means it was made.
            name = f"soak-{self._serial:06d}"
            body = render_pod(name=name, node=self.node, template=self.template)
            try:
                self.client.create(PODS, body, namespace=self.namespace)
            except ApiError as exc:
                if exc.status != HTTPStatus.CONFLICT:
                    raise
            self._serial += 1
            self.live.append(name)
            self.created += 1
        else:
            self.client.delete(PODS, self.live[0], namespace=self.namespace, grace_seconds=1)
            self.live.popleft()
            self.deleted += 1
