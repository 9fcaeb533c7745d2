"""kube-apiserver's CPU profile while a fleet publishes: taken from its ``/debug/pprof/profile`` endpoint and read
with ``go tool pprof`` (the Go toolchain the control plane was built with).

The shares of a few frames say where the API server's CPU went; ``go tool pprof -top`` on the saved file gives the
rest.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fakedev.errors import BenchError
from harness.cluster.build import which_go
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
    r"^\s*[\d.]+(?:[a-zµ]*s)?\s+[\d.]+%\s+[\d.]+%\s+"
    r"[\d.]+(?:[a-zµ]*s)?\s+(?P<cump>[\d.]+)%\s+(?P<fn>\S.*?)(?:\s+\(inline\))?$"
)


@dataclass(frozen=True, kw_only=True)
class GoEntry:
    function: str
    cum_pct: float
    """Share of samples with this function anywhere on the stack."""


def parse_pprof_top(text: str) -> list[GoEntry]:
    """The rows of ``go tool pprof -top`` output (either order); header lines are skipped."""
    entries = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            entries.append(GoEntry(function=m["fn"], cum_pct=float(m["cump"])))
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
    done = subprocess.run(
        [which_go(), "tool", "pprof", "-top", "-cum", f"-nodecount={count}", str(profile)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GOTOOLCHAIN": "local"},
    )
    if done.returncode != 0:
        raise BenchError(f"go tool pprof {profile}: {done.stderr.strip()[-500:]}")
    return done.stdout


class ApiServerSampler:
    """kube-apiserver's CPU profile, taken in a thread (it blocks for ``seconds``) while the caller waits for the
    fleet; ``shares()`` then saves ``<out>.pprof`` and ``<out>.top.txt`` and reads them."""

    def __init__(self, *, kube: KubeClient, seconds: int, out: Path) -> None:
        self.out = out
        self._kube = kube
        self._seconds = seconds
        self._profile: bytes | None = None
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._take, name="apiserver-pprof", daemon=True)
        self._thread.start()

    def _take(self) -> None:
        try:
            self._profile = capture_cpu_profile(self._kube, seconds=self._seconds)
        except Exception as exc:  # raised again in the caller's thread by shares()
            self._error = exc

    def shares(self) -> dict[str, float]:
        """``watched_shares`` of the profile. Raises what taking it raised (then nothing is written) or what reading
        it raised (the ``.pprof`` stays, for ``go tool pprof`` by hand)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._profile is not None
        profile = self.out.with_suffix(".pprof")
        profile.write_bytes(self._profile)
        top = pprof_top(profile)
        self.out.with_suffix(".top.txt").write_text(top)
        return watched_shares(parse_pprof_top(top))
