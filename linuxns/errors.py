"""Errors of linuxns.

NamespaceError    a namespace could not be made, entered or removed (the message carries iproute2's words)
RtnlError         an rtnetlink request was refused (``code``: the kernel's errno) or its answer was not netlink
"""

from __future__ import annotations


class NamespaceError(Exception):
    """A network namespace operation failed."""


class RtnlError(Exception):
    """An rtnetlink request failed; ``code`` is the errno the kernel answered (EBADMSG for bytes not understood)."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code
