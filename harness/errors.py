"""Errors raised by the harness.

HarnessError
├── RetryableError            a later attempt may succeed (a component not ready yet, a conflict)
│   └── NotReadyError         a readiness wait ran out of time
└── PermanentError            retrying cannot help; the message says what to fix
    ├── BuildError            a control-plane binary could not be built
    ├── ComponentError        a control-plane component exited or failed to start
    └── ClusterStateError     no cluster / a broken cluster state directory

API errors (``ApiError`` and its retryable children) live in :mod:`kubeclient.errors`.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every error the harness raises on purpose."""


class RetryableError(HarnessError):
    """The operation may succeed if tried again later."""


class PermanentError(HarnessError):
    """Retrying cannot help."""


class NotReadyError(RetryableError):
    """A wait for readiness ran out of time."""


class BuildError(PermanentError):
    """Building a binary from the Go module proxy failed."""


class ComponentError(PermanentError):
    """A control-plane component failed to start or exited."""


class ClusterStateError(PermanentError):
    """The cluster state directory is missing or not usable."""


class HostBusyError(RetryableError):
    """A host-wide resource (e.g. the kubepods cgroup a real node uses) is held by another run."""
