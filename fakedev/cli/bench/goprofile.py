"""kube-apiserver's CPU profile while a fleet publishes: taken from its ``/debug/pprof/profile`` endpoint and read
with ``go tool pprof`` (the Go toolchain the control plane was built with).

The shares of a few frames say where the API server's CPU went; ``go tool pprof -top`` on the saved file gives the
rest.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fakedev.errors import BenchError
from kubeclient import KubeClient

WATCHED_FRAMES: Final[dict[str, str]] = {
    "create_handler": "k8s.io/apiserver/pkg/endpoints/handlers.CreateResource.createHandler.func1",
    "create_store": "k8s.io/apiserver/pkg/registry/generic/registry.(*Store).Create",
    "decode": "k8s.io/apimachinery/pkg/runtime/serializer/versioning.(*codec).Decode",
    "declarative_validation": "k8s.io/apiserver/pkg/registry/rest.validateDeclaratively",
    "field_path_strings": "k8s.io/apimachinery/pkg/util/validation/field.(*Path).String",
    "etcd_create": "k8s.io/apiserver/pkg/storage/etcd3.(*store).Create",
    "watch_serve": "k8s.io/apiserver/pkg/endpoints/handlers.handleWatch",
    "list": "k8s.io/apiserver/pkg/endpoints/handlers.ListResource.func1",
    "gc_mark": "runtime.gcBgMarkWorker",
    "malloc": "runtime.mallocgc",
}
"""Frames whose inclusive share is reported (``<key>_pct``): the request handling of a slice creation and the
runtime's memory management, which the profile showed to be most of the API server's work."""

_LINE: Final = re.compile(
    r"^\s*[\d.]+(?:[a-zµ]*s)?\s+(?P<flatp>[\d.]+)%\s+[\d.]+%\s+"
    r"[\d.]+(?:[a-zµ]*s)?\s+(?P<cump>[\d.]+)%\s+(?P<fn>\S.*?)(?:\s+\(inline\))?$"
)


@dataclass(frozen=True, kw_only=True)
class GoEntry:
    function: str
    flat_pct: float
    """Share of samples with this function on top."""
    cum_pct: float
    """Share of samples with this function anywhere on the stack."""


def parse_pprof_top(text: str) -> list[GoEntry]:
    """The rows of ``go tool pprof -top`` output (either order); header lines are skipped."""
    entries = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            entries.append(GoEntry(function=m["fn"], flat_pct=float(m["flatp"]), cum_pct=float(m["cump"])))
    return entries


def watched_shares(entries: list[GoEntry]) -> dict[str, float]:
    """``WATCHED_FRAMES``' inclusive shares in percent; a frame absent from the profile is 0."""
    by_function = {e.function: e.cum_pct for e in entries}
    return {key: by_function.get(function, 0.0) for key, function in WATCHED_FRAMES.items()}


def capture_cpu_profile(client: KubeClient, *, seconds: int) -> bytes:
    """Sample the API server for ``seconds`` (blocks that long); returns the gzipped pprof protobuf."""
    status, body = client.get_bytes(f"/debug/pprof/profile?seconds={seconds}", timeout=seconds + 30)
    if status != 200 or not body.startswith(b"\x1f\x8b"):
        raise BenchError(
            f"kube-apiserver's CPU profile: HTTP {status}: {body[:200].decode(errors='replace')} (is --profiling off?)"
        )
    return body


def pprof_top(profile: Path, *, count: int = 2000) -> str:
    """``go tool pprof -top -cum`` of a saved profile: every function above pprof's noise floor."""
    go = shutil.which("go")
    if go is None:
        raise BenchError("reading a Go CPU profile needs the Go toolchain on PATH (the one `make build` uses)")
    done = subprocess.run(
        [go, "tool", "pprof", "-top", "-cum", f"-nodecount={count}", str(profile)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GOTOOLCHAIN": "local"},
    )
    if done.returncode != 0:
        raise BenchError(f"go tool pprof {profile}: {done.stderr.strip()[-500:]}")
    return done.stdout
