"""Argument helpers the commands share (kept apart so that no command imports another)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fakedev.errors import ProfileError
from fakedev.render import Schema, SchemaPin, parse_schema
from harness.cluster import daemon
from harness.errors import ClusterStateError
from harness.node.podmode import PodMode


def positive_count(text: str) -> int:
    """An ``argparse`` type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_count(text: str) -> int:
    """An ``argparse`` type: a whole number of at least 0 (an ordinal, a port)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def add_node_shape_arguments(parser: argparse.ArgumentParser) -> None:
    """``--label``, ``--taint`` and ``--pods``: what every emulated Node of a command looks like and does with pods
    (``fakedev node run`` and ``fakedev fleet run`` share them)."""
    parser.add_argument(
        "--label",
        dest="labels",
        type=node_label,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra label on every emulated Node (repeatable)",
    )
    parser.add_argument(
        "--taint",
        dest="taints",
        type=node_taint,
        action="append",
        default=[],
        metavar="KEY[=VALUE]:EFFECT",
        help="a taint every emulated Node is created with, as kubectl taint writes it (repeatable); "
        "an adopted Node keeps the taints it has",
    )
    parser.add_argument(
        "--pods",
        choices=[m.value for m in PodMode],
        default=PodMode.CONTAINERS.value,
        help="containers: run pods' containers under runc (default; needs runc and root); status: only mark pods "
        "Running once their claims are prepared — no runc, sandbox or NICs",
    )


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./")


def _label_key(key: str, *, what: str) -> str:
    if not key or not set(key) <= _NAME_CHARS or key.count("/") > 1 or key.startswith(("-", ".", "/")):
        raise argparse.ArgumentTypeError(f"{what} key {key!r}: letters, digits, '-', '_', '.' and one '/' prefix")
    return key


def node_label(text: str) -> tuple[str, str]:
    """An ``argparse`` type: ``KEY=VALUE`` (a Node label)."""
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"label {text!r}: expected KEY=VALUE")
    if value and not set(value) <= _NAME_CHARS - {"/"}:
        raise argparse.ArgumentTypeError(f"label {text!r}: a value has letters, digits, '-', '_' and '.' only")
    return _label_key(key, what="label"), value


def node_taint(text: str) -> dict[str, str]:
    """An ``argparse`` type: ``KEY[=VALUE]:EFFECT`` as ``kubectl taint`` writes it (a Node taint)."""
    spec, sep, effect = text.rpartition(":")
    if not sep or effect not in TAINT_EFFECTS:
        raise argparse.ArgumentTypeError(f"taint {text!r}: expected KEY[=VALUE]:EFFECT, EFFECT one of {TAINT_EFFECTS}")
    key, _eq, value = spec.partition("=")
    taint = {"key": _label_key(key, what="taint"), "effect": effect}
    if value:
        taint["value"] = value
    return taint


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
