"""Which profile a plugin serves when a DaemonSet runs it on many nodes: its Node's label, else a default.

A container cannot see its Node's labels through the downward API, so the plugin reads its own Node once at start
(``get nodes`` is all it needs). The choice itself is pure (:func:`choose_profile`); :func:`profile_from_node` adds
the read, retried while the API server is unreachable, because a plugin started with its node usually races the
API server being ready.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from fakedev.errors import KubeApiError, ProfileError, RetryableKubeError
from fakedev.kube import get_node_labels
from fakedev.profiles import builtin_profile_names
from kubeclient import KubeClient

log = logging.getLogger("fakedev.plugin.nodeprofile")

NODE_READ_SECONDS: Final = 60.0
NODE_READ_RETRY: Final = 2.0


class ProfileSource(StrEnum):
    """Where the profile came from: said in the start-up log, so a node serving the wrong devices is explained."""

    NODE_LABEL = "node-label"
    DEFAULT = "default"


@dataclass(frozen=True, kw_only=True)
class ProfileChoice:
    profile: str
    source: ProfileSource


def choose_profile(*, labels: Mapping[str, str], label: str, default: str | None, node_name: str) -> ProfileChoice:
    """The label's value when the Node has it (a built-in profile name: a label must never name a file on the
    host), else ``default``; neither is a :class:`ProfileError` naming the node and the label."""
    value = labels.get(label)
    if value:
        known = builtin_profile_names()
        if value not in known:
            raise ProfileError(
                f"node {node_name}: label {label}={value}: no built-in profile of that name "
                f"(built-in: {', '.join(known)}); a node label can only name a built-in profile"
            )
        return ProfileChoice(profile=value, source=ProfileSource.NODE_LABEL)
    if default is None:
        raise ProfileError(
            f"node {node_name}: label {label}: the node has no such label and no default was given (--profile)"
        )
    return ProfileChoice(profile=default, source=ProfileSource.DEFAULT)


def profile_from_node(
    client: KubeClient,
    *,
    node_name: str,
    label: str,
    default: str | None,
    deadline_seconds: float = NODE_READ_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> ProfileChoice:
    """Read the Node and choose; an unreachable API server is retried until ``deadline_seconds``, any other refusal
    (no such Node, no permission) is raised at once."""
    give_up = clock() + deadline_seconds
    while True:
        try:
            labels = get_node_labels(client, node_name=node_name)
            break
        except RetryableKubeError as exc:
            if clock() >= give_up:
                raise KubeApiError(
                    f"cannot read node {node_name} for its {label} label within {deadline_seconds:.0f}s: {exc}",
                    status=exc.status,
                ) from exc
            log.info("node not readable yet", extra={"fields": {"node": node_name, "reason": str(exc)}})
            time.sleep(NODE_READ_RETRY)
    choice = choose_profile(labels=labels, label=label, default=default, node_name=node_name)
    log.info(
        "profile chosen",
        extra={"fields": {"node": node_name, "profile": choice.profile, "source": choice.source.value}},
    )
    return choice
