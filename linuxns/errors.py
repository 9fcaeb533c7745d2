"""Errors of linuxns.

NamespaceError    a namespace could not be made, entered or removed (the message carries iproute2's words)
"""

from __future__ import annotations


class NamespaceError(Exception):
    """A network namespace operation failed."""
