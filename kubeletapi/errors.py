"""Errors raised by kubeletapi.

KubeletApiError
└── GenerationError       protoc or one of its plugins is missing or failed; the message names the tool and its
                          output. Drift between the protos and the committed modules is not an error but a
                          result: ``generate.check()`` returns it and ``python -m kubeletapi.generate --check``
                          exits non-zero.
"""

from __future__ import annotations


class KubeletApiError(Exception):
    """Base of every error kubeletapi raises on purpose."""


class GenerationError(KubeletApiError):
    """The Python modules could not be generated from the protos."""
