"""``fakedev image build|lock``: the fakedev OCI image, built locally with Debian's tools (no registry)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fakedev import __version__
from harness.cluster.build import default_cache_root
from harness.image import assemble, recipe, wheels


def _stderr(message: str) -> None:
    print(f"[image] {message}", file=sys.stderr, flush=True)


def _project_root() -> Path:
    """The checkout this fakedev runs from: the image is built from its sources, not from an installed copy."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():
        raise SystemExit(f"fakedev image: {root} is not a fakedev checkout (no pyproject.toml); build from a checkout")
    return root


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "image",
        help="build the fakedev OCI image archive (Debian 12 + fakedev), no registry involved",
        description="The fakedev container image: a Debian 12 root filesystem made by mmdebstrap from this machine's "
        "apt mirror, fakedev's wheel and its locked dependencies installed by pip, assembled by umoci into an OCI "
        "layout and tarred with a docker manifest.json beside it, so that `ctr images import`, `podman load` and "
        "`docker load` all take the same file.",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    ref = recipe.image_reference(version=__version__)
    b = verbs.add_parser(
        "build",
        help=f"write build/image/{recipe.archive_name(version=__version__)} ({ref})",
        description=f"Build {ref} into OUT/{recipe.archive_name(version=__version__)}. Every step is cached by its "
        "inputs under CACHE/image/ (Debian rootfs by package list, sources and package indices; wheels by the lock; "
        "the archive by all of them and the source tree), so a warm build with nothing changed is a copy. The same "
        "inputs give the same manifest digest. Needs root (mmdebstrap, chroot), mmdebstrap and umoci (`make deps`), "
        "and deploy/image/requirements.lock matching pyproject.toml (`fakedev image lock`).",
    )
    b.add_argument("--out", type=Path, default=Path("build/image"), help="output directory (default: build/image)")
    b.add_argument(
        "--cache", type=Path, default=None, help="cache root (default: $FAKEDEV_CACHE, else ~/.cache/fakedev)"
    )
    b.add_argument(
        "--source-url",
        default=None,
        help="org.opencontainers.image.source (default: the git remote 'origin', else 'local')",
    )
    b.add_argument("--force", action="store_true", help="assemble the archive again even when it is cached")
    b.add_argument(
        "--with-cluster",
        action="store_true",
        help=f"the cluster flavour, {recipe.image_reference(version=__version__, flavour=recipe.Flavour.CLUSTER)} in "
        f"OUT/{recipe.archive_name(version=__version__, flavour=recipe.Flavour.CLUSTER)}: one more layer with "
        f"kube-apiserver, kube-scheduler, kube-controller-manager and etcd from `fakedev cluster build`'s cache "
        f"(copied to {recipe.CLUSTER_CACHE}, where FAKEDEV_CACHE points), so `fakedev cluster serve` runs a whole "
        "fake cluster in a container (docs/testcontainers.md)",
    )
    b.set_defaults(handler=_build)

    lock = verbs.add_parser(
        "lock",
        help="resolve the image's Python wheels on PyPI into deploy/image/requirements.lock",
        description="Resolve pyproject.toml's dependencies (without the workstation-only ones: "
        f"{', '.join(sorted(recipe.NOT_IN_IMAGE))}) for CPython {recipe.PYTHON_VERSION} on manylinux x86-64 and write "
        "every wheel with its version and sha256. Run it after changing dependencies: `image build` refuses a "
        "stale lock.",
    )
    lock.set_defaults(handler=_lock)


def _build(args: argparse.Namespace) -> int:
    built = assemble.build_image(
        project_root=_project_root(),
        version=__version__,
        out_dir=args.out,
        cache_root=args.cache or default_cache_root(),
        progress=_stderr,
        source=args.source_url,
        force=args.force,
        flavour=recipe.Flavour.CLUSTER if args.with_cluster else recipe.Flavour.PLAIN,
    )
    how = "from the cache" if built.from_cache else "assembled"
    _stderr(f"{built.reference} {how} in {built.seconds:.1f} s")
    print(f"archive:  {built.archive}")
    print(f"image:    {built.reference}")
    print(f"manifest: {built.manifest_digest}")
    print(f"size:     {built.archive_bytes / 1e6:.1f} MB archive, {built.layers_bytes / 1e6:.1f} MB unpacked")
    return 0


def _lock(_args: argparse.Namespace) -> int:
    root = _project_root()
    lock = wheels.resolve_lock(project_root=root, progress=_stderr)
    path = root / wheels.LOCK_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(lock.render())
    print(f"{path}: {len(lock.wheels)} wheels")
    return 0
