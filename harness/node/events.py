"""Events the emulated kubelet records on pods, with the kubelet's reasons, so `kubectl describe pod` reads true."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from typing import Any, Final

from kubeclient import ApiError, KubeClient
from kubeclient.resources import EVENTS
from kubeclient.timestamps import render_time

FAILED_PREPARE: Final = "FailedPrepareDynamicResources"
FAILED_PREPARE_PREFIX: Final = "Failed to prepare dynamic resources: prepare dynamic resources: "
"""How the kubelet words the event: its event text, then its manager's wrapping, then the cause."""
FAILED_UNPREPARE: Final = "FailedUnprepareDynamicResources"


def render_event(*, pod: Mapping[str, Any], node: str, reason: str, message: str, warning: bool) -> dict[str, Any]:
    meta = pod["metadata"]
    now = render_time()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": "kubelet", "host": node},
        "reportingComponent": "kubelet",
        "reportingInstance": node,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def record_event(
    client: KubeClient, *, pod: Mapping[str, Any], node: str, reason: str, message: str, warning: bool = False
) -> None:
    """Best effort, as in the kubelet: a lost event never fails the pod."""
    with contextlib.suppress(ApiError):
        client.create(
            EVENTS,
            render_event(pod=pod, node=node, reason=reason, message=message, warning=warning),
            namespace=pod["metadata"]["namespace"],
        )
