"""Waiting on API objects: poll until a predicate holds, with a deadline and a message saying what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable

from harness.errors import NotReadyError
from kubeclient.client import JsonObj, KubeClient
from kubeclient.errors import ApiError
from kubeclient.resources import Resource

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


def _summary(obj: JsonObj | None) -> str:
    if obj is None:
        return "nothing"
    status = obj.get("status")
    return str(status)[:400] if status else "(no status)"
