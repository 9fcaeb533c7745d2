"""OCI runtime specs for emulated containers (pure: builds dicts in config.json shape)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

JsonObj = dict[str, Any]

DEFAULT_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The capability set container runtimes grant by default (containerd/docker), enough for `ip` to read links.
DEFAULT_CAPABILITIES: Final = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
)


def _mount(destination: str, kind: str, source: str, options: Sequence[str]) -> JsonObj:
    return {"destination": destination, "type": kind, "source": source, "options": list(options)}


def render_container_spec(
    *,
    args: Sequence[str],
    env: Mapping[str, str],
    rootfs: Path,
    hostname: str,
    netns_path: Path | None,
    cwd: str = "/",
    extra_capabilities: Sequence[str] = (),
) -> JsonObj:
    """A runc-ready spec: a private busybox root, private pid/ipc/uts/mount namespaces, the pod's network."""
    caps = sorted({*DEFAULT_CAPABILITIES, *extra_capabilities})
    namespaces: list[JsonObj] = [{"type": t} for t in ("pid", "ipc", "uts", "mount")]
    namespaces.append({"type": "network", "path": str(netns_path)} if netns_path else {"type": "network"})
    full_env = {"PATH": DEFAULT_PATH, "HOSTNAME": hostname, **env}
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": list(args),
            "env": [f"{k}={v}" for k, v in full_env.items()],
            "cwd": cwd,
            "capabilities": {k: list(caps) for k in ("bounding", "effective", "permitted")},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": str(rootfs), "readonly": False},
        "hostname": hostname,
        "mounts": [
            _mount("/proc", "proc", "proc", ["nosuid", "noexec", "nodev"]),
            _mount("/dev", "tmpfs", "tmpfs", ["nosuid", "strictatime", "mode=755", "size=65536k"]),
            _mount("/dev/pts", "devpts", "devpts", ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]),
            _mount("/dev/shm", "tmpfs", "shm", ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]),
            _mount("/dev/mqueue", "mqueue", "mqueue", ["nosuid", "noexec", "nodev"]),
            _mount("/sys", "sysfs", "sysfs", ["nosuid", "noexec", "nodev", "ro"]),
            _mount("/tmp", "tmpfs", "tmpfs", ["nosuid", "nodev", "mode=1777"]),
            _mount("/run", "tmpfs", "tmpfs", ["nosuid", "nodev", "mode=755"]),
        ],
        "linux": {
            "namespaces": namespaces,
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        },
    }
