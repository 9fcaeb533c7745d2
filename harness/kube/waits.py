"""Waiting on API objects: poll until a predicate holds, with a deadline and a message saying what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from harness.errors import NotReadyError
from harness.kube.podstart import compute_start_failure
from kubeclient.client import JsonObj, KubeClient
from kubeclient.errors import ApiError
from kubeclient.resources import EVENTS, PODS, Resource

POLL_SECONDS = 0.1


def wait_object(
    client: KubeClient,
    res: Resource,
    name: str,
    *,
    namespace: str | None = None,
    predicate: Callable[[JsonObj], bool],
    timeout: float = 30.0,
    what: str = "",
) -> JsonObj:
    """Return the object once ``predicate(obj)`` is true; a missing object counts as not yet."""
    deadline = time.monotonic() + timeout
    last: JsonObj | None = None
    while True:
        try:
            last = client.get(res, name, namespace=namespace)
            if predicate(last):
                return last
        except ApiError as exc:
            if exc.status != 404:
                raise
        if time.monotonic() >= deadline:
            where = f"{namespace}/{name}" if namespace else name
            raise NotReadyError(
                f"timed out after {timeout:.0f}s waiting for {res.kind} {where}: {what or 'condition'}"
                f" (last seen: {_summary(last)})"
            )
        time.sleep(POLL_SECONDS)


def wait_gone(
    client: KubeClient, res: Resource, name: str, *, namespace: str | None = None, timeout: float = 30.0
) -> None:
    """Return once the object no longer exists."""
    deadline = time.monotonic() + timeout
    while client.get_or_none(res, name, namespace=namespace) is not None:
        if time.monotonic() >= deadline:
            raise NotReadyError(f"timed out after {timeout:.0f}s waiting for {res.kind} {name} to be deleted")
        time.sleep(POLL_SECONDS)


def wait_list(
    client: KubeClient,
    res: Resource,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    predicate: Callable[[list[JsonObj]], bool],
    timeout: float = 30.0,
    what: str = "",
) -> list[JsonObj]:
    """Return the list once ``predicate(items)`` is true."""
    deadline = time.monotonic() + timeout
    while True:
        items = client.list(res, namespace=namespace, label_selector=label_selector, field_selector=field_selector)
        if predicate(items):
            return items
        if time.monotonic() >= deadline:
            raise NotReadyError(
                f"timed out after {timeout:.0f}s waiting for {res.plural}: {what or 'condition'} ({len(items)} seen)"
            )
        time.sleep(POLL_SECONDS)


def wait_pod_phase(
    client: KubeClient, name: str, *, namespace: str, phase: str = "Running", timeout: float = 120.0
) -> JsonObj:
    """Return the pod once it is in ``phase``; on time-out say where it got stuck: its containers' states and the
    pod's latest events (a pod that never starts usually explains itself there)."""
    try:
        return wait_object(
            client,
            PODS,
            name,
            namespace=namespace,
            predicate=lambda p: p.get("status", {}).get("phase") == phase,
            timeout=timeout,
            what=f"phase {phase}",
        )
    except NotReadyError as exc:
        raise NotReadyError(f"{exc}; {describe_pod(client, name, namespace=namespace)}") from None


def describe_pod(client: KubeClient, name: str, *, namespace: str) -> str:
    """One line on a pod: phase, node, each container's state, and its last five events."""
    pod = client.get_or_none(PODS, name, namespace=namespace)
    if pod is None:
        return f"pod {namespace}/{name} does not exist"
    status = pod.get("status", {})
    states = []
    for container in status.get("containerStatuses") or []:
        state: dict[str, Any] = container.get("state") or {}
        for kind, detail in state.items() or {"unknown": {}}.items():
            reason = detail.get("reason") if isinstance(detail, dict) else None
            states.append(f"{container.get('name')}={kind}" + (f"({reason})" if reason else ""))
    events = sorted(
        client.list(EVENTS, namespace=namespace, field_selector=f"involvedObject.name={name}"),
        key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""),
    )[-5:]
    said = [f"{e.get('reason')}: {str(e.get('message', ''))[:200]}" for e in events]
    failure = compute_start_failure(pod, events=events)
    # The runtime's own words (CDI spec, device ID, runc's error) lead: they are the why of a pod stuck Pending.
    why = f"cannot start: {failure.describe()[:1000]}; " if failure is not None else ""
    return (
        f"{why}phase={status.get('phase')} node={pod.get('spec', {}).get('nodeName')} containers=[{', '.join(states)}] "
        f"events=[{' | '.join(said) or 'none'}]"
    )


def _summary(obj: JsonObj | None) -> str:
    if obj is None:
        return "nothing"
    status = obj.get("status")
    return str(status)[:400] if status else "(no status)"
