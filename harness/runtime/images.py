"""Local images: the busybox rootfs plus programs built from Go sources in this repository (no registry, no pulls).

A pod's ``image`` names one of :data:`LOCAL_IMAGES` to get that program at its path inside the container; any other
image name runs on the plain busybox rootfs. Built programs and image trees are cached by the digest of their
sources and of busybox, so a second node or a second run reuses them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness.errors import ComponentError
from harness.runtime.rootfs import clone_rootfs, ensure_rootfs

_REPO_HARNESS: Final = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, kw_only=True)
class GoProgram:
    """A Go main package (standard library only) built statically into an image."""

    source: Path
    path_in_image: str


STANDIN_IMAGE: Final = "fakedev.local/virt-launcher-standin:latest"
LOCAL_IMAGES: Final = {
    STANDIN_IMAGE: GoProgram(
        source=_REPO_HARNESS / "kubevirt" / "standin", path_in_image="usr/bin/virt-launcher-standin"
    ),
}
_lock = threading.Lock()


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_go_program(program: GoProgram, *, cache_root: Path) -> Path:
    """Build (or reuse) the static binary of ``program``; returns its path in the cache."""
    sources = [p for p in program.source.iterdir() if p.suffix == ".go" or p.name == "go.mod"]
    target = cache_root / "programs" / f"{program.source.name}-{_digest(sources)}"
    if target.is_file():
        return target
    go = shutil.which("go")
    if go is None:
        raise ComponentError(f"building {program.source.name} needs Go on PATH (Go 1.22 or newer)")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
    os.close(fd)
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-mod=mod"}
    try:
        done = subprocess.run(
            [go, "build", "-trimpath", "-ldflags=-s -w", "-o", tmp, "."],
            cwd=program.source,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            raise ComponentError(f"go build of {program.source} failed:\n{done.stderr.strip()}")
        Path(tmp).replace(target)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target


def ensure_image(image: str, *, cache_root: Path) -> Path:
    """The rootfs template for ``image``: busybox, plus the image's program for a local image."""
    base = ensure_rootfs(cache_root=cache_root)
    program = LOCAL_IMAGES.get(image)
    if program is None:
        return base
    with _lock:
        binary = build_go_program(program, cache_root=cache_root)
        target = cache_root / "images" / f"{base.name}-{binary.name}"
        if (target / ".complete").exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".image-", dir=target.parent))
        try:
            tree = clone_rootfs(template=base, destination=tmp / "rootfs")
            (tree / ".complete").unlink(missing_ok=True)
            shutil.copy2(binary, tree / program.path_in_image)
            (tree / ".complete").write_text(f"{image}\n")
            if target.exists():
                shutil.rmtree(target)
            tree.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return target
