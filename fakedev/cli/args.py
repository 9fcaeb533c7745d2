"""Argument helpers the commands share (kept apart so that no command imports another)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fakedev.errors import ProfileError
from fakedev.render import Schema, SchemaPin, parse_schema
from harness.cluster import daemon
from harness.errors import ClusterStateError


def positive_count(text: str) -> int:
    """An ``argparse`` type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def schema_pin(text: str) -> tuple[Schema, SchemaPin]:
    """An ``argparse`` type: ``SCHEMA[@RELEASE]`` (``nvidia``, ``nvidia@v25.12.0``); unknown names list the known."""
    try:
        return parse_schema(text)
    except ProfileError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def kubeconfig_path(explicit: Path | None, *, command: str) -> Path:
    """``--kubeconfig``, else ``$KUBECONFIG``, else the cluster ``fakedev cluster up`` started; a clear exit if none."""
    if explicit is not None:
        return explicit
    if os.environ.get("KUBECONFIG"):
        return Path(os.environ["KUBECONFIG"])
    try:
        return Path(daemon.read_pointer(state_dir=daemon.default_state_dir(), name="default")["kubeconfig"])
    except ClusterStateError as exc:
        raise SystemExit(
            f"fakedev {command}: no cluster: give --kubeconfig, set KUBECONFIG or run `fakedev cluster up` ({exc})"
        ) from exc
