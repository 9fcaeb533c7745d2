"""Build and run ``minidra``: the small Go DRA driver the conformance tests use (source in ``minidra_go/``).

It links only the standard library, the kubelet's generated protos (``k8s.io/kubelet`` ``pkg/apis/dra/v1`` and
``pluginregistration/v1``) and gRPC, and is built from the Go module proxy by
:func:`harness.cluster.build.build_group`. Its cache entry is named after a digest of its sources, so an edited
driver gets a new entry and an unchanged one is built once: ``<cache>/minidra/<digest>/minidra``.

Its modes (flags after the placeholders): ``--devices N`` (default 1), ``--cdi-missing-device-node``,
``--publish-nothing``, ``--never-answer``. ``python -m tests.drivers.minidra`` builds it and prints its path.
"""

from __future__ import annotations

import enum
import fcntl
import hashlib
import sys
from pathlib import Path
from typing import Final

from harness.cluster.build import (
    BinaryGroup,
    GoProgram,
    Progress,
    build_group,
    cache_entry,
    check_cache,
    default_cache_root,
)
from harness.errors import BuildError

PROGRAM: Final = "minidra"
DRIVER_NAME: Final = "minidra.fakedev.example"
SOURCE_DIR: Final = Path(__file__).resolve().parent / "minidra_go"
BUILD_COMMAND: Final = "python -m tests.drivers.minidra"
PLACEHOLDER_ARGS: Final = (
    "--node-name",
    "{node}",
    "--registry-dir",
    "{registry_dir}",
    "--plugins-dir",
    "{plugins_dir}",
    "--cdi-dir",
    "{cdi_dir}",
    "--kubeconfig",
    "{kubeconfig}",
)
"""What a conformance run fills per node (see :mod:`harness.node.drivers`)."""


class MiniMode(enum.Enum):
    """One behaviour of the driver, chosen by flag."""

    SINGLE_DEVICE = "single-device"
    MISSING_DEVICE_NODE = "missing-device-node"
    PUBLISH_NOTHING = "publish-nothing"
    NEVER_ANSWER = "never-answer"


MODE_FLAGS: Final[dict[MiniMode, tuple[str, ...]]] = {
    MiniMode.SINGLE_DEVICE: ("--devices", "1"),
    MiniMode.MISSING_DEVICE_NODE: ("--cdi-missing-device-node",),
    MiniMode.PUBLISH_NOTHING: ("--publish-nothing",),
    MiniMode.NEVER_ANSWER: ("--never-answer",),
}


def compute_source_digest(*, source: Path) -> str:
    """A short digest of every file of the module (go.mod, go.sum, the Go sources): the cache entry's name."""
    h = hashlib.sha256()
    for path in sorted(p for p in source.iterdir() if p.is_file() and (p.suffix == ".go" or p.name.startswith("go."))):
        h.update(path.name.encode() + b"\0")
        h.update(len(path.read_bytes()).to_bytes(8, "big") + path.read_bytes())
    return h.hexdigest()[:16]


def minidra_group(*, source: Path = SOURCE_DIR) -> BinaryGroup:
    return BinaryGroup(
        group="minidra",
        module="minidra",
        version=compute_source_digest(source=source),
        programs=(GoProgram(name=PROGRAM, package="fakedev.local/minidra"),),
        version_ldflags=False,
        source=source,
        own_sources=True,
        tags="",
    )


def build_minidra(*, progress: Progress, cache_root: Path | None = None) -> Path:
    """The cached binary, built first when missing, stale or corrupt (seconds warm, about a minute cold)."""
    root = cache_root or default_cache_root()
    group = minidra_group()
    lock_path = cache_entry(group=group, cache_root=root).parent / ".build.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    # pytest-xdist workers may ask at once; build_group replaces the entry directory, which must not happen under
    # a reader.
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        binaries = build_group(group=group, cache_root=root, progress=progress)
    return binaries.path(PROGRAM)


def minidra_binary(*, cache_root: Path | None = None) -> Path:
    """The cached binary, or a :class:`BuildError` saying how to build it."""
    root = cache_root or default_cache_root()
    group = minidra_group()
    if (reason := check_cache(group=group, cache_root=root)) is not None:
        raise BuildError(f"minidra {group.version} is not usable ({reason}); run `{BUILD_COMMAND}`")
    return cache_entry(group=group, cache_root=root) / PROGRAM


def minidra_command(*, binary: Path, mode: MiniMode) -> tuple[str, ...]:
    """The driver's command line with the conformance placeholders, in one mode."""
    return (str(binary), *PLACEHOLDER_ARGS, *MODE_FLAGS[mode])


def main() -> None:
    print(build_minidra(progress=lambda message: print(message, file=sys.stderr, flush=True)))


if __name__ == "__main__":
    main()
