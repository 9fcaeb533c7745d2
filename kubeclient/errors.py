"""Errors of the API client.

    KubeClientError
    ├── ApiError                  the API server answered with an error status (``status``; 0 = no answer)
    │   ├── ConflictError         409: re-read and try again             (retryable)
    │   └── ApiUnavailableError   unreachable, 429 or 5xx                 (retryable)
    ├── OfficialLoaderNeededError the kubeconfig needs the official loader
    └── InvalidRequestError       a path or header that would break the request's framing (never sent)

``retryable`` tells callers whether a later attempt may succeed.

Inside the client, turned into ``ApiUnavailableError`` before a caller sees them:

    TransportError                the connection failed before a whole answer arrived
    HttpError                     an answer broke HTTP/1.1
    ConnectionError
    └── ServerClosedError         the server closed a connection without answering
"""

from __future__ import annotations


class KubeClientError(Exception):
    """Base of the client's errors."""

    retryable = False


class ApiError(KubeClientError):
    """The API server answered with an error status (0 when there was no answer or the config is unusable)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class ConflictError(ApiError):
    """409 Conflict: the object changed underneath; re-read and retry."""

    retryable = True


class ApiUnavailableError(ApiError):
    """The API server could not be reached or asked us to back off."""

    retryable = True


class OfficialLoaderNeededError(KubeClientError):
    """The kubeconfig uses something only the official loader implements (exec plugins, auth providers)."""


class InvalidRequestError(KubeClientError):
    """A request that cannot be sent as it is: a space, control character or non-ASCII byte in its path, a line
    break in a header. Nothing was sent."""


class TransportError(Exception):
    """The API server could not be reached, or the connection broke before a whole answer arrived."""


class HttpError(Exception):
    """An answer broke the HTTP/1.1 protocol."""


class ServerClosedError(ConnectionError):
    """The server closed the connection before any byte of an answer: the request may never have been seen."""
