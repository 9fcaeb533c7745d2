"""Errors raised by the harness.

HarnessError
├── RetryableError            a later attempt may succeed (a component not ready yet, a conflict)
│   └── NotReadyError         a readiness wait ran out of time
└── PermanentError            retrying cannot help; the message says what to fix
    ├── BuildError            a control-plane binary could not be built
    ├── ComponentError        a control-plane component exited or failed to start
    └── ClusterStateError     no cluster / a broken cluster state directory
ApiError                      the API server answered with an error status (``status``, ``reason``)
├── ConflictError             409: re-read and try again (also a RetryableError)
└── ApiUnavailableError       unreachable, 429 or 5xx (also a RetryableError)
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


class ApiError(HarnessError):
    """The API server answered with an error status (0 when there was no answer)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class ConflictError(ApiError, RetryableError):
    """409 Conflict: the object changed underneath; re-read and retry."""


class ApiUnavailableError(ApiError, RetryableError):
    """The API server could not be reached or asked us to back off."""
