"""A read-only busybox root filesystem shared by every emulated container (no image pulls anywhere here)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

from harness.errors import ComponentError

BUSYBOX_CANDIDATES: Final = ("/bin/busybox", "/usr/bin/busybox")
_DIRS: Final = ("bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "tmp", "etc", "run", "var", "root")


def find_busybox() -> Path:
    for candidate in BUSYBOX_CANDIDATES:
        if Path(candidate).is_file():
            return Path(candidate)
    found = shutil.which("busybox")
    if found is None:
        raise ComponentError("busybox was not found; install the Debian package busybox-static (make deps)")
    return Path(found)


def _applets(busybox: Path) -> list[str]:
    out = subprocess.run([str(busybox), "--list"], check=True, capture_output=True, text=True).stdout
    return sorted({a.strip() for a in out.splitlines() if a.strip() and "/" not in a})


def ensure_rootfs(*, cache_root: Path) -> Path:
    """Build (once per busybox binary) a rootfs with busybox and a symlink for every applet; return its path."""
    busybox = find_busybox()
    digest = hashlib.sha256(busybox.read_bytes()).hexdigest()[:16]
    target = cache_root / "rootfs" / f"busybox-{digest}"
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".rootfs-", dir=target.parent))
    try:
        for d in _DIRS:
            (tmp / d).mkdir(parents=True, exist_ok=True)
        shutil.copy2(busybox, tmp / "bin" / "busybox")
        for applet in _applets(busybox):
            link = tmp / "bin" / applet
            if not link.exists():
                link.symlink_to("busybox")
        (tmp / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n")
        (tmp / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
        (tmp / "etc" / "hostname").write_text("fakedev\n")
        (tmp / "var" / "run").symlink_to("../run")
        (tmp / ".complete").write_text(str(busybox) + "\n")
        tmp.chmod(0o755)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def clone_rootfs(*, template: Path, destination: Path) -> Path:
    """A private copy of the template for one container (busybox hard-linked, so this costs milliseconds).

    Each container gets its own tree because runc creates mount points (CDI mounts, device nodes) inside it.
    """

    def copy(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(template, destination, symlinks=True, copy_function=copy)
    return destination
